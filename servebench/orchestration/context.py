"""The state one campaign run threads through its stages (`RunContext`), and the small helpers
every stage shares."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from servebench.campaign.outcome import CellOutcome
from servebench.config.campaign import Campaign, EngineSpecBase, GeneratedModelSpec, ModeSpec
from servebench.config.sweep import Cell
from servebench.engines import Engine
from servebench.planning.plan import Plan
from servebench.providers import Provider
from servebench.providers.claims import HeldClaims
from servebench.serving.correctness import GateAnswer
from servebench.serving.deployment import Deployment
from servebench.warehouse.sink import RunResults
from servebench.warehouse.stage_timings import StageClock

REFERENCE_MODE = "reference-tp1"


def reference_mode_name(kind: str, primary: bool) -> str:
    """The reference server's mode name: `reference-tp1` for the campaign's engine (as ever), and
    `reference-KIND` for each further engine of a side-by-side campaign."""
    return REFERENCE_MODE if primary else f"reference-{kind}"


@dataclass
class EngineRun:
    """One engine of the campaign: what its modes are started from (its build, model and shared
    services on the nodes) and the single-worker answers its other modes are judged against."""

    engine: Engine
    spec: EngineSpecBase
    reference_name: str                            # the reference server's mode name, when one is started
    deployment: Deployment | None = None           # set once provisioned
    vocab: int = 0
    # by model variant (`variant_key`: "" without `model_axes`): the TP=1 answers its other modes are judged
    # against, and why there is none (its modes are then unchecked)
    references: dict[str, GateAnswer] = field(default_factory=dict)
    reference_problems: dict[str, str] = field(default_factory=dict)
    build_hold: IO | None = None                   # the build's use lock, held until release (`builds gc` waits)
    # one per `build:` block or model variant that differs (two blocks may share a key)
    variants: list[Deployment] = field(default_factory=list)
    variant_holds: list[IO] = field(default_factory=list)

    def deployment_for(self, mode: ModeSpec) -> Deployment | None:
        """What `mode` is started from: the engine's deployment, or the one of its own build or model variant."""
        if self.deployment is None or (not mode.build and mode.model == self.deployment.variant):
            return self.deployment
        spec = self.deployment.campaign.engine_spec_for(mode)
        return next((d for d in [self.deployment, *self.variants] if d.spec == spec and d.variant == mode.model),
                    self.deployment)


def variant_key(mode: ModeSpec) -> str:
    """A mode's model variant as the key of its engine's reference answers ("" for the campaign's model)."""
    return json.dumps(mode.model, sort_keys=True) if mode.model else ""


@dataclass
class RunContext:
    """The state one campaign run threads through its stages (set once, read everywhere)."""

    plan: Plan
    engines: dict[str, EngineRun]                  # by kind, the campaign's `engine:` first
    provider: Provider                             # one per run: allocates, holds and releases the nodes
    warehouse: str
    run_id: str
    run_dir: Path
    campaign_dir: Path                             # relative paths in the campaign (a model) are from here
    link: str | None = None                        # the network setting the testbed's links have now
    claims: HeldClaims | None = None               # what the run has to itself (nodes' CPUs), until release
    statuses: dict[str, str] = field(default_factory=dict)          # cell key -> completed | failed
    invalid: dict[str, list[str]] = field(default_factory=dict)     # cell key -> the generator's reasons
    signalled: set[str] = field(default_factory=set)  # cells where a kill/stop fault hit a process of the server
    searches: set[str] | None = None               # configurations whose capacity search is to run (None: all)
    rerun_failed: bool = False                     # `rerun-failed`: only failed cells again, nothing new proposed
    results: RunResults = field(init=False)        # where every result of the run lands
    stages: StageClock = field(default_factory=StageClock)  # each stage's time and the orchestrator's cost

    def __post_init__(self) -> None:
        self.results = RunResults(self.warehouse, self.run_id)

    def record(self, cell: Cell, outcome: CellOutcome) -> None:
        """A landed cell's verdict, as the run's status will count it."""
        self.statuses[cell.key] = outcome.status
        if outcome.invalid_reasons is not None:  # outcome.invalid
            self.invalid[cell.key] = outcome.invalid_reasons

    def engine_run(self, mode: ModeSpec) -> EngineRun:
        """The engine serving `mode`."""
        return self.engines[self.campaign.engine_kind(mode)]

    def gives_reference(self, mode: ModeSpec) -> bool:
        """Whether the mode's answers can be its engine's reference: a single-worker mode of the
        engine's own build (a mode built for another target is judged against it, not the reference), and
        one server (replicas behind a balancer are judged against one engine)."""
        return self.engine_run(mode).engine.is_reference(mode) and not mode.build and mode.replicas == 1

    @property
    def primary(self) -> EngineRun:
        return next(iter(self.engines.values()))

    @property
    def deployment(self) -> Deployment | None:
        """A deployment's nodes and client node (the same for every engine): the first engine's that has one."""
        return next((run.deployment for run in self.engines.values() if run.deployment is not None), None)

    @property
    def campaign(self) -> Campaign:
        return self.plan.campaign

    @property
    def planned_cells(self) -> int:
        """The campaign's cells plus the most probes its capacity searches may take: an upper
        bound for progress (a search usually stops earlier)."""
        search, configurations = self.campaign.search, len(self.plan.modes())
        if search is not None and search.trials is not None:  # optuna: only `trials` configurations
            per_configuration = len(self.plan.cells) // configurations
            return min(search.trials, configurations) * (per_configuration + search.max_probes * search.repeats)
        probes = 0 if search is None else configurations * search.max_probes * search.repeats
        return len(self.plan.cells) + probes

    @property
    def served_name(self) -> str:
        return served_name(self.campaign)


def served_name(campaign: Campaign) -> str:
    if isinstance(campaign.model, GeneratedModelSpec):
        return campaign.model.generate
    return Path(campaign.model.path).name


def first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0][:300]


def log_text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""
