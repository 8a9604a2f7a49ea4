"""The tuner inside a campaign (`search: tune`): the default configuration measured again after the
others, Optuna's trials one configuration after the other, and the verdict over every capacity the
run landed (`servebench.analysis.tuning`). Each configuration is a whole mode (`servebench.orchestration.modes`)."""

from __future__ import annotations

from servebench.analysis.capacity_report import times
from servebench.analysis.tuning import (
    AGAIN,
    ConfigurationCapacity,
    TuneVerdict,
    point_key,
    propose_configuration,
    tune_verdict,
)
from servebench.config.campaign import ModeSpec
from servebench.config.sweep import Cell, configuration_space, configurations
from servebench.orchestration.context import RunContext
from servebench.orchestration.modes import run_mode
from servebench.progress import reporter


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
    default = configurations(ctx.campaign)[0].name
    verdict = land_tuning(ctx, default)
    bounds = (f" (the probes' brackets allow {times(verdict.ratio_low, 'unknown')} to "
              f"{times(verdict.ratio_high)})" if verdict.ratio is not None else "")
    reporter().stage(f"tuning: best {verdict.best_mode} at {verdict.best_capacity}, default {default} at "
                     f"{verdict.default_first} first, {verdict.default_again} again: {verdict.why}{bounds}; "
                     f"{verdict.probes} probes")


def land_tuning(ctx: RunContext, default_mode: str) -> TuneVerdict:
    """The tuner's verdict over every capacity the run landed (`servebench.analysis.tuning`), landed in `tuning`."""
    spec = ctx.campaign.search
    assert spec is not None  # only a campaign with a `search: tune` is tuned
    found = [ConfigurationCapacity(**row) for row in ctx.results.capacity_configurations()]
    verdict = tune_verdict(found, default_mode)
    ctx.results.tuning(spec.over, ctx.campaign.slo, verdict,
                       configurations=len([c for c in found if c.mode != default_mode + AGAIN]))
    return verdict


def tune_with_optuna(ctx: RunContext, cells: list[Cell]) -> None:
    """`search: {kind: tune, strategy: optuna, trials: N}`: launch N configurations, the default
    first, each next one proposed by Optuna from the capacities found so far
    (`servebench.analysis.tuning.propose_configuration`); every trial is a whole mode (its cells,
    then its capacity search), landed like any other. A resumed run finishes the configuration the
    killed one had started, then goes on proposing from every capacity landed."""
    spec = ctx.campaign.search
    # strategy optuna: SearchSpec refuses one without trials
    assert spec is not None and spec.trials is not None
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
    finished, searched = ctx.results.finished_modes(), ctx.results.capacities()
    return {**dict.fromkeys(finished), **dict(searched)}
