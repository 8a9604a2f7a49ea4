"""The load generator's result file, as a versioned model: `version`, the `config` that produced it, `t0`
(when the run started), the `summary` derived from the requests and the `requests` themselves, each
its raw timings only (servebench.load.records).

One model on both sides. The generator's process on a client node (`python -S -m
servebench.load.on_node`) runs from a tree that carries pydantic with the generator's other packages
(servebench/distribution/load_tree.py, `LOAD_DISTRIBUTIONS`), the same versions as the orchestrator's,
so the node writes its file through this model too and the orchestrator reads it back with it.

A file is written only from `LoadResult.model_dump(mode="json")` (`write_result`) and read only by
`LoadResult.model_validate_json` (`read_result`). `load_result` and `run_load` hand the same JSON form
to readers that index plain dicts. The keys a run leaves out when they do not apply (`hung`, `turns`,
`counter_check`, ...; see `LoadSummary.SPARSE`) stay out of the file, and a key the run set to None
is written as null, so `"hung" in summary` means what it meant. A file without `version` is read as
the current version's shape; a file of another version is refused, naming it.

A config read back from a file is a record of what ran: its data files (a dataset, a trace, an
empirical length file) are not read again (validation context `RECORDED`), so a result still reads
after they moved; to run that config again, validate its JSON form afresh.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar, Final, Literal

from pydantic import ConfigDict, ValidationError, field_serializer, model_validator, with_config
from pydantic_core import PydanticCustomError
from typing_extensions import TypedDict  # pydantic takes typing's own only from Python 3.12

from servebench.load.config import LoadConfig
from servebench.load.distributions import RECORDED
from servebench.load.records import RequestRecord
from servebench.load.steady import WarmupOutcome
from servebench.load.summary import Model, Sparse, SteadySummary

RESULT_VERSION: Final = 1
VERSION_ERROR = "result_version"


class ResultFileError(ValueError):
    """A file that is not a load result this servebench reads; the message names the file."""


class WorkloadName(Model):
    kind: str
    name: str


class TurnFigures(Model):
    """One turn of a sessions workload, over the sessions that reached it."""

    turn: int
    requests: int
    completed: int
    input_tokens_mean: float | None
    ttft_p50_ms: float | None
    ttft_p99_ms: float | None


@with_config(ConfigDict(extra="forbid"))
class PromptCacheCounts(TypedDict):
    """Prompt tokens the responses said came from the server's prefix cache and were processed, and
    how many responses said so."""

    requests: int
    cached: int
    processed: int


class HungSummary(Model):
    """When a server that stopped answering last answered and when the load stopped (seconds from t0)."""

    last_answer_s: float
    stopped_s: float
    in_flight: int
    sent: int
    reason: str


class NodeCpu(Model):
    """What the cores a server was given on one node did over the cell's window (its node sampler's
    counts, servebench/telemetry/node_sampler.py): shares of the cores' time [0-1]."""

    node: str
    cores: str                      # the cores, as a CPU list ("0-3")
    seconds: float                  # the window the samples cover
    server_share: float             # the server's processes
    foreign_share: float            # everything else but servebench's own (samplers, scraper, generator)
    servebench_share: float
    top_foreign: str | None = None  # the busiest foreign processes seen ("pid 123 (spin): 0.45, ..."), if any


class LoadSummary(SteadySummary, Sparse):
    """The steady-window summary and what only the whole run knows: the server's own counters, the
    warm-up, the workload, and what went wrong."""

    SPARSE: ClassVar[tuple[str, ...]] = ("warm_until_steady", "workload", "turns", "counter_check",
                                         "prefix_cache_hit_rate", "prompt_cache_tokens", "hung",
                                         "hang_watch_error", "node_cpu", "replica_requests")

    prompt_token_mismatches: int
    warm_until_steady: WarmupOutcome | None = None
    workload: WorkloadName | None = None
    turns: list[TurnFigures] | None = None
    server_output_tokens: float | None
    client_output_tokens: int
    counter_check: str | None = None
    prefix_cache_hit_rate: float | None = None
    prompt_cache_tokens: PromptCacheCounts | None = None
    hung: HungSummary | None = None
    hang_watch_error: str | None = None      # the hang watch asked for broke: the run was not checked for hangs
    node_cpu: list[NodeCpu] | None = None    # added by a campaign from its server nodes' samples
    replica_requests: dict[str, int] | None = None  # the load generator balancing replicas: requests sent to each


class T0(Sparse):
    """The run's start: monotonic clock (every request time is seconds from it) and wall clock. A
    result measured on a client node and moved onto the orchestrator's clocks keeps the node's
    readings and the offset between the two."""

    SPARSE: ClassVar[tuple[str, ...]] = ("monotonic_node", "wall_node", "clock_offset_s")

    monotonic: float
    wall: datetime
    monotonic_node: float | None = None
    wall_node: datetime | None = None
    clock_offset_s: float | None = None

    @field_serializer("wall", "wall_node")
    def _iso(self, value: datetime | None) -> str | None:
        """Python's own ISO form (`+00:00`), which readers parse with `datetime.fromisoformat`."""
        return None if value is None else value.isoformat()


class LoadResult(Model):
    """One load run as its result file holds it."""

    version: Literal[1] = RESULT_VERSION
    config: LoadConfig
    t0: T0
    summary: LoadSummary
    requests: list[RequestRecord]

    @model_validator(mode="before")
    @classmethod
    def _known_version(cls, data: Any) -> Any:
        """A file without a version is of the current shape; another version is refused by name."""
        if isinstance(data, dict) and data.get("version", RESULT_VERSION) != RESULT_VERSION:
            version = data["version"]
            newer = isinstance(version, int) and not isinstance(version, bool) and version > RESULT_VERSION
            raise PydanticCustomError(VERSION_ERROR, "{problem}", {"problem": (
                f"a load result of version {version}, newer than the version {RESULT_VERSION} this servebench "
                "reads: read it with the servebench that wrote it" if newer else
                f"a load result of unknown version {version!r}; this servebench reads version {RESULT_VERSION}")})
        return data


def read_result(path: Path) -> LoadResult:
    """The result file at `path`; ResultFileError naming it if it is no result of this version."""
    path = Path(path)
    try:
        return LoadResult.model_validate_json(path.read_bytes(), context=RECORDED)
    except ValidationError as exc:
        raise ResultFileError(f"{path}: {_problem(exc)}") from None


def load_result(path: Path) -> dict[str, Any]:
    """`read_result`, as the plain JSON form readers of dicts index."""
    return read_result(path).model_dump(mode="json")


def write_result(result: LoadResult | Mapping[str, Any], path: Path) -> None:
    """Write atomically (a reader sees the whole file or none); a JSON form given is validated first."""
    model = result if isinstance(result, LoadResult) else LoadResult.model_validate(result, context=RECORDED)
    text = json.dumps(model.model_dump(mode="json"), indent=1, allow_nan=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def _problem(exc: ValidationError) -> str:
    errors = exc.errors(include_url=False)
    versions = [err["msg"] for err in errors if err["type"] == VERSION_ERROR]
    if versions:
        return versions[0]
    first = errors[0]
    where = ".".join(str(part) for part in first["loc"]) or "the file"
    more = f" (and {len(errors) - 1} more problems)" if len(errors) > 1 else ""
    return f"not a load result of version {RESULT_VERSION}: {where}: {first['msg']}{more}"
