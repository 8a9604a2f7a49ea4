"""One request as measured: raw monotonic timestamps and the server's token counts only.

Everything else (TTFT, TPOT, throughput) is derived by servebench.load.metrics.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(slots=True)
class RequestRecord:
    index: int
    warmup: bool
    client: int | None = None
    scheduled_s: float | None = None   # when the schedule said to send (closed loop: when the client was free)
    sent_s: float | None = None
    first_token_s: float | None = None  # first chunk that carried at least one token
    last_token_s: float | None = None
    input_tokens: int | None = None     # usage.prompt_tokens from the server
    output_tokens: int | None = None    # usage.completion_tokens from the server
    chunks: int = 0
    http_status: int | None = None
    error_kind: str | None = None       # http | connect | disconnect | timeout | malformed | incomplete
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error_kind is None

    def to_dict(self) -> dict:
        return asdict(self)
