"""The tuner inside a campaign (`search: tune`): the default configuration measured again after the
others, Optuna's trials one configuration after the other, and the verdict over every capacity the
run landed (`servebench.analysis.tuning`). Each configuration is a whole mode (`flows/modes.py`)."""

from __future__ import annotations

from servebench.flows.context import RunContext
from servebench.flows.modes import run_mode
from servebench.warehouse import store
from servebench.analysis.capacity_report import times
from servebench.analysis.tuning import AGAIN, point_key, propose_configuration
from servebench.spec.campaign import ModeSpec
from servebench.spec.sweep import Cell, configuration_space, configurations
from servebench.progress import reporter
from servebench.warehouse.store import session
from servebench.tasks.land import land_tuning


def remeasure_default(ctx: RunContext) -> None:
    """`search: tune`: the default configuration once more, after all the others, as
    `<default>-again` (its own server and capacity search): what order alone changes
    (`servebench.analysis.tuning.tune_verdict`). Skipped when already measured (a resume) or when
    the default itself has no capacity (its server failed, or it met the SLO nowhere)."""
    default = configurations(ctx.campaign)[0]
    again = default.model_copy(update={"name": default.name + AGAIN})
    landed = landed_capacities(ctx)
    if landed.get(default.name) is None or again.name in landed:
        return
    if ctx.searches is not None:
        ctx.searches.add(again.name)
    reporter().stage(f"tuning: the default {default.name} measured again, after the others")
    run_mode(ctx, again, [])


def judge_tuning(ctx: RunContext) -> None:
    """`search: tune`: the best configuration against the default, from every capacity the run
    landed (also those of an earlier attempt, after a resume), into `tuning`."""
    spec = ctx.campaign.search
    default = configurations(ctx.campaign)[0].name
    verdict = land_tuning(ctx.warehouse, ctx.run_id, default, spec.over, ctx.campaign.slo)
    bounds = (f" (the probes' brackets allow {times(verdict.ratio_low, 'unknown')} to "
              f"{times(verdict.ratio_high)})" if verdict.ratio is not None else "")
    reporter().stage(f"tuning: best {verdict.best_mode} at {verdict.best_capacity}, default {default} at "
                     f"{verdict.default_first} first, {verdict.default_again} again: {verdict.why}{bounds}; "
                     f"{verdict.probes} probes")


def tune_with_optuna(ctx: RunContext, cells: list[Cell]) -> None:
    """`search: {kind: tune, strategy: optuna, trials: N}`: launch N configurations, the default
    first, each next one proposed by Optuna from the capacities found so far
    (`servebench.analysis.tuning.propose_configuration`); every trial is a whole mode (its cells,
    then its capacity search), landed like any other. A resumed run finishes the configuration the
    killed one had started, then goes on proposing from every capacity landed."""
    spec = ctx.campaign.search
    space = configuration_space(ctx.campaign)
    points = [point for point, _ in space]
    by_key = {point_key(point): mode for point, mode in space}
    capacities = landed_capacities(ctx)
    tried = [(point, capacities[mode.name] or 0.0) for point, mode in space if mode.name in capacities]
    started = [mode for point, mode in space if mode.name not in capacities and any(
        cell.key in ctx.statuses for cell in ctx.plan.cells if cell.mode.name == mode.name)]
    while len(tried) < spec.trials:
        if started:
            mode = started.pop(0)
        else:
            point = propose_configuration(points, tried, spec.seed)
            if point is None:
                break
            mode = by_key[point_key(point)]
        reporter().stage(f"tuning: trial {len(tried) + 1} of {spec.trials}: {mode.name}")
        run_mode(ctx, mode, [cell for cell in cells if cell.mode.name == mode.name])
        capacity = landed_capacities(ctx).get(mode.name)
        tried.append((next(point for point, m in space if m.name == mode.name), capacity or 0.0))


def optuna_first_mode(ctx: RunContext) -> ModeSpec | None:
    """The configuration an optuna tuning launches first: the default, unless a resumed run had
    already searched it (then the next is not known before it is proposed)."""
    default = configurations(ctx.campaign)[0]
    return None if default.name in landed_capacities(ctx) else default


def landed_capacities(ctx: RunContext) -> dict[str, float | None]:
    """Each configuration done: its capacity (None: met the SLO nowhere), and None too for one
    whose server failed to start or was stopped without a search (a blocking gate): a resume does
    not launch those again."""
    with session(ctx.warehouse) as con:
        finished = store.finished_modes(con, ctx.run_id)
        searched = store.capacities(con, ctx.run_id)
    return {**dict.fromkeys(finished), **dict(searched)}
