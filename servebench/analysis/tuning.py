"""The tuner's verdict: which configuration (mode x knob values) served the most
under the SLO, and by how much it beats the campaign's default. Pure: capacities in, verdict out.

Each configuration's capacity search leaves a bracket: the SLO held at `capacity` and failed
at `upper`, so the true capacity lies in [capacity, upper). The ratio best/default is reported
with the range those brackets allow (`ratio_low`, `ratio_high`), which is what the probes can
vouch for; with `search.repeats` every verdict in the bracket also held in each repeat.
"""

from __future__ import annotations

from pydantic import BaseModel, Field


class ConfigurationCapacity(BaseModel):
    """One configuration's capacity search, as landed in `capacity`."""

    mode: str
    capacity: float | None          # the highest point that met the SLO (None: none did)
    upper: float | None             # the lowest point that missed (None: none did)
    probes: int
    tpot_p50_ms: float | None = None
    knobs: dict = Field(default_factory=dict)


AGAIN = "-again"  # the default configuration measured once more, after all the others


class TuneVerdict(BaseModel):
    default_mode: str
    best_mode: str | None
    default_capacity: float | None          # the default's higher measurement (first or again)
    default_first: float | None = None      # measured first ...
    default_again: float | None = None      # ... and again after every other configuration
    drift: float | None = None              # again / first - 1: what order alone changed
    best_capacity: float | None
    ratio: float | None
    ratio_low: float | None
    ratio_high: float | None
    pareto: list[str]
    probes: int
    why: str


def tune_verdict(configurations: list[ConfigurationCapacity], default_mode: str) -> TuneVerdict:
    """The best configuration against the default. Best = highest capacity, ties broken by the
    lower TPOT p50 at it (then by campaign order).

    The default is measured first and again last (`<default>-again`): the first server of a
    campaign may pay what later ones find ready (compiled graphs cached on disk, warm page
    cache), and a machine may drift. The ratio is taken against the default's *higher*
    measurement, so neither helps the winner; `drift` says how far the two were apart."""
    by_mode = {c.mode: c for c in configurations}
    first, again = by_mode.get(default_mode), by_mode.get(default_mode + AGAIN)
    measured = [c for c in (first, again) if c is not None and c.capacity is not None]
    default = max(measured, key=_served) if measured else first
    candidates = [c for c in configurations if c.mode != default_mode + AGAIN]
    served = [c for c in candidates if c.capacity is not None]
    probes = sum(c.probes for c in configurations)
    best = min(served, key=lambda c: (-_served(c), _tpot(c))) if served else None
    drift = (again.capacity / first.capacity - 1 if first and again and first.capacity and again.capacity is not None
             else None)
    base = dict(default_mode=default_mode, best_mode=best.mode if best else None,
                default_capacity=default.capacity if default else None,
                default_first=first.capacity if first else None, default_again=again.capacity if again else None,
                drift=drift, best_capacity=best.capacity if best else None, pareto=pareto_front(candidates),
                probes=probes)
    if best is None:
        return TuneVerdict(**base, ratio=None, ratio_low=None, ratio_high=None,
                           why="no configuration met the SLO at any probed point")
    if default is None or default.capacity is None:
        why = ("the default configuration was not searched (its server did not start?)" if default is None
               else "the default configuration met the SLO at no probed point")
        return TuneVerdict(**base, ratio=None, ratio_low=None, ratio_high=None, why=why)
    ratio = _served(best) / default.capacity
    low = _served(best) / default.upper if default.upper else None
    high = best.upper / default.capacity if best.upper else None
    if best.mode == default_mode:
        why = "the default configuration is the best one found"
    elif low is not None and low <= 1:
        why = (f"{best.mode} measured {ratio:.2f}x the default's capacity ({best.capacity:g} vs "
               f"{default.capacity:g}), within what the probes' brackets cannot tell apart")
    else:
        why = f"{best.mode} serves {ratio:.2f}x the default's capacity ({best.capacity:g} vs {default.capacity:g})"
    if drift is not None and abs(drift) > 0.05:
        why += f"; the default measured again last moved {drift:+.0%} (order or drift: weigh small ratios with it)"
    return TuneVerdict(**base, ratio=ratio, ratio_low=low, ratio_high=high, why=why)


def pareto_front(configurations: list[ConfigurationCapacity]) -> list[str]:
    """Configurations no other beats on both capacity (higher) and TPOT p50 (lower), by capacity."""
    served = [c for c in configurations if c.capacity is not None]
    front = [c for c in served if not any(_dominates(o, c) for o in served)]
    return [c.mode for c in sorted(front, key=lambda c: -_served(c))]


def _dominates(a: ConfigurationCapacity, b: ConfigurationCapacity) -> bool:
    return (_served(a) >= _served(b) and _tpot(a) <= _tpot(b)
            and (_served(a) > _served(b) or _tpot(a) < _tpot(b)))


def _served(c: ConfigurationCapacity) -> float:
    """The capacity of a configuration that met the SLO somewhere (callers keep only those)."""
    assert c.capacity is not None, "only configurations filtered on `capacity is not None` get here"
    return c.capacity


def _tpot(c: ConfigurationCapacity) -> float:
    return c.tpot_p50_ms if c.tpot_p50_ms is not None else float("inf")


def propose_configuration(space: list[dict], tried: list[tuple[dict, float]], seed: int) -> dict | None:
    """The next point of the tuning space to launch (`search: {strategy: optuna}`): Optuna's TPE
    sampler, given every capacity found so far, maximizing it. Nothing is remembered between
    calls: the study is rebuilt from `tried` (so a resumed run continues where the killed one
    stopped), and the sampler's seed is `seed` plus the trials so far (the same capacities, the
    same choice). A point already tried is told its value and asked again; when the sampler keeps
    proposing known points, the first untried point in `space` order is taken. None: all tried.

    space: every point, {"mode": name, knob: value, ...}, the default first; tried: (point,
    capacity) pairs, a capacity of 0 for a configuration that met the SLO nowhere."""
    import optuna
    from optuna.distributions import BaseDistribution, CategoricalDistribution
    from optuna.trial import create_trial

    known = {point_key(point): value for point, value in tried}
    untried = [point for point in space if point_key(point) not in known]
    if not untried:
        return None
    if not tried:
        return space[0]  # the default configuration is always measured, first
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    names = list(space[0])
    distributions: dict[str, BaseDistribution] = {
        name: CategoricalDistribution(_choices(space, name)) for name in names}
    sampler = optuna.samplers.TPESampler(seed=seed + len(tried), n_startup_trials=min(4, len(space)))
    study = optuna.create_study(direction="maximize", sampler=sampler)
    for point, value in tried:
        study.add_trial(create_trial(params=point, distributions=distributions, value=value))
    valid = {point_key(point) for point in space}
    for _ in range(16):
        trial = study.ask(distributions)
        key = point_key(trial.params)
        if key not in known and key in valid:
            return dict(trial.params)
        study.tell(trial, known.get(key, 0.0))  # known: its capacity; outside the space: nothing served
    return untried[0]


def _choices(space: list[dict], name: str) -> tuple:
    choices: list = []
    for point in space:
        if point[name] not in choices:
            choices.append(point[name])
    return tuple(choices)


def point_key(point: dict) -> str:
    """A point of the tuning space as one text (for lookups across proposals and configurations)."""
    import json

    return json.dumps(point, sort_keys=True)
