"""One request as measured: raw monotonic timestamps and the server's token counts only.

Everything else (TTFT, TPOT, ITL, throughput) is derived by servebench.load.metrics. A record is a
plain dataclass, cheap on the send path; the result file's model (servebench.load.result) validates
and writes it as it is, its fields the file's request keys.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar

from pydantic import ConfigDict

TIME_FIELDS = ("scheduled_s", "sent_s", "first_token_s", "last_token_s", "first_text_s")


@dataclass(slots=True)
class RequestRecord:
    __pydantic_config__: ClassVar[ConfigDict] = ConfigDict(extra="forbid")  # as a request of a result file

    index: int
    warmup: bool
    client: int | None = None
    scheduled_s: float | None = None   # when the schedule said to send (closed loop: when the client was free)
    sent_s: float | None = None
    first_token_s: float | None = None  # first event that carried at least one token (its text may be empty)
    last_token_s: float | None = None   # last event that carried a token
    input_tokens: int | None = None     # usage.prompt_tokens from the server
    output_tokens: int | None = None    # usage.completion_tokens from the server
    expected_input_tokens: int | None = None   # what the workload meant to send
    chunks: int = 0                     # JSON events received (token-carrying or not)
    chunk_times: list[float] = field(default_factory=list)   # arrival of each token-carrying event
    chunk_tokens: list[int] = field(default_factory=list)    # tokens each of those carried
    token_source: str | None = None     # "usage" (server's running count) or "chunks" (fallback)
    http_status: int | None = None
    error_kind: str | None = None       # http | connect | disconnect | timeout | malformed | incomplete
    error: str | None = None
    first_text_s: float | None = None   # first event with non-empty text (visible-text TTFT)
    requested_output_tokens: int | None = None  # the answer length the workload asked for
    prefix_group: int | None = None     # shared-prefix workloads: the request's group
    session: int | None = None          # sessions workloads: the conversation ...
    turn: int | None = None             # ... and the turn in it (0 first)
    cached_input_tokens: int | None = None     # prompt tokens the server reused from its prefix cache ...
    processed_input_tokens: int | None = None  # ... and those it computed (where its responses say: llama.cpp)
    replica: str | None = None          # the replica the load generator sent it to (it balancing a replicas mode)

    @property
    def ok(self) -> bool:
        return self.error_kind is None

    def shift(self, t0: float) -> None:
        """Make every timestamp relative to t0."""
        for name in TIME_FIELDS:
            value = getattr(self, name)
            if value is not None:
                setattr(self, name, value - t0)
        self.chunk_times = [t - t0 for t in self.chunk_times]

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in RECORD_FIELDS}


RECORD_FIELDS = tuple(f.name for f in fields(RequestRecord))  # a request's keys in a result file, in order


# The request columns a CSV hands to DuckDB, with their types (after run_id and cell_id).
REQUEST_CSV_TYPES = {
    "index": "INTEGER", "warmup": "BOOLEAN", "client": "INTEGER", "scheduled_s": "DOUBLE", "sent_s": "DOUBLE",
    "first_token_s": "DOUBLE", "last_token_s": "DOUBLE", "input_tokens": "INTEGER", "output_tokens": "INTEGER",
    "chunks": "INTEGER", "token_source": "VARCHAR", "http_status": "INTEGER", "error_kind": "VARCHAR",
    "error": "VARCHAR", "first_text_s": "DOUBLE",
    "expected_input_tokens": "INTEGER", "requested_output_tokens": "INTEGER", "prefix_group": "INTEGER",
    "session": "INTEGER", "turn": "INTEGER", "cached_input_tokens": "INTEGER", "processed_input_tokens": "INTEGER",
}


def write_requests_csv(requests: Iterable[Mapping[str, Any]], path: Path) -> Path:
    """Request rows as CSV, the fast way into DuckDB (its parallel reader lands 1M rows in about a second)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(REQUEST_CSV_TYPES)
        writer.writerows([r.get(name) for name in REQUEST_CSV_TYPES] for r in requests)
    return path
