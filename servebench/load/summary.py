"""The load summary's parts that metrics.py derives from request records: distributions, a window's
figures, the generator's own CPU use and the steady-window summary with its validity.

Plain data models and nothing else (no imports from the rest of the load generator), so the pure
metric functions can build them while `result.py`, which adds what only a whole run knows, imports
the config and the warm-up (and through it the metrics).
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, SerializerFunctionWrapHandler, model_serializer


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Sparse(Model):
    """A model whose keys in `SPARSE` are written only when they were set (given, read from a file or
    assigned), whatever their value: a reader asking `"hung" in summary` gets the answer the run gave,
    and a key set to None stays in the file as null."""

    SPARSE: ClassVar[tuple[str, ...]] = ()

    @model_serializer(mode="wrap")
    def _set_keys_only(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        for name in self.SPARSE:
            if name not in self.model_fields_set:
                data.pop(name, None)
        return data


class Distribution(Model):
    """One metric's values over a window: count, mean and percentiles (None: no value measured)."""

    count: int
    mean: float | None
    p50: float | None
    p90: float | None
    p95: float | None
    p99: float | None
    p999: float | None


class WindowSummary(Model):
    """A window's figures (the steady window's, or the whole run's under `whole_run`)."""

    requests: int
    completed: int
    failed: int
    duration_s: float | None
    offered_rate: float | None
    scheduled_rate: float | None
    achieved_rate: float | None
    request_throughput: float | None
    output_throughput: float | None
    total_token_throughput: float | None
    goodput: float | None
    slos: dict[str, float]
    total_input_tokens: int
    total_output_tokens: int
    ttft_ms: Distribution
    ttft_from_scheduled_ms: Distribution
    ttft_text_ms: Distribution
    tpot_ms: Distribution
    itl_ms: Distribution
    e2el_ms: Distribution
    schedule_lag_ms: Distribution
    errors: dict[str, int]


class ClientUsage(Sparse):
    """The generator's own process over the run: where it ran, at what priority, how busy it was."""

    SPARSE: ClassVar[tuple[str, ...]] = ("node",)

    cpu_seconds: float
    wall_seconds: float
    core_fraction: float | None
    cpus: str
    nice: int
    notes: list[str]
    idle_poll_cpus: str = ""
    idle_poll_off: str | None = None
    node: str | None = None  # the client node it ran on, added by the orchestrator when it brings the files back


class SteadySummary(WindowSummary):
    """The steady window's figures, the same over the whole run, and the verdict on the measurement."""

    warmup_requests: int
    whole_run: WindowSummary
    percentile_estimator: str
    client: ClientUsage | None
    valid: bool
    invalid_reasons: list[str]
