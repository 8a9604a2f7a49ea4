"""KV-cache saturation (seed 002): where a server's KV cache stops holding every sequence in flight.

The theoretical saturation point is the KV capacity divided by the tokens one sequence holds at
its longest (prompt + output): that many closed-loop clients fill the cache. The measured knee is
the most clients the cache held without misses: the last client count before the first whose
cache-miss probability (misses per decode attempt) exceeds MISS_THRESHOLD, going up from one
client. Engine-neutral: the inputs are the warehouse's `cell_kv` rows, which hold llama.cpp's
failed batches and vLLM's preemptions alike.
"""

from __future__ import annotations

from collections import defaultdict
from statistics import mean

import duckdb
from pydantic import BaseModel

from servebench import warehouse

MISS_THRESHOLD = 0.01   # a cell whose decode attempts missed more often than this is past the knee


class Saturation(BaseModel):
    mode: str
    kv_capacity_tokens: int | None
    tokens_per_sequence: int
    theoretical_clients: float | None    # capacity / tokens per sequence
    measured_knee: int | None            # the most clients held without misses (None: no point had misses)
    first_miss_clients: int | None       # the first client count past the knee
    clients_measured: list[int]
    peak_normalized_throughput_past_knee: float | None  # the best throughput past the knee, 1.0 = the mode's best
    mean_normalized_throughput_past_knee: float | None

    @property
    def knee_gap(self) -> float | None:
        """Measured knee minus the theoretical point, in clients."""
        if self.measured_knee is None or self.theoretical_clients is None:
            return None
        return self.measured_knee - self.theoretical_clients


def measured_knee(miss_by_clients: dict[int, float], threshold: float = MISS_THRESHOLD) -> tuple[int | None, int | None]:
    """(knee, first client count with misses) from each client count's mean cache-miss probability."""
    held = None
    for clients in sorted(miss_by_clients):
        if miss_by_clients[clients] > threshold:
            return held, clients
        held = clients
    return None, None


def saturation_by_mode(cells: list[dict], input_len: int, output_len: int) -> list[Saturation]:
    """One Saturation per mode from closed-loop `cell_kv` rows (joined with normalized throughput)."""
    by_mode: dict[str, list[dict]] = defaultdict(list)
    for cell in cells:
        if cell.get("clients") is not None:
            by_mode[cell["mode"]].append(cell)
    result = []
    per_sequence = input_len + output_len
    for mode, rows in sorted(by_mode.items()):
        misses: dict[int, list[float]] = defaultdict(list)
        for row in rows:
            if row.get("cache_miss_probability") is not None:
                misses[row["clients"]].append(row["cache_miss_probability"])
        knee, first_miss = measured_knee({clients: mean(values) for clients, values in misses.items()})
        capacity = next((r["kv_capacity_tokens"] for r in rows if r.get("kv_capacity_tokens")), None)
        past = [r.get("normalized_throughput") or 0.0 for r in rows if first_miss and r["clients"] >= first_miss]
        result.append(Saturation(
            mode=mode, kv_capacity_tokens=capacity, tokens_per_sequence=per_sequence,
            theoretical_clients=capacity / per_sequence if capacity else None, measured_knee=knee,
            first_miss_clients=first_miss, clients_measured=sorted({r["clients"] for r in rows}),
            peak_normalized_throughput_past_knee=max(past) if past else None,
            mean_normalized_throughput_past_knee=mean(past) if past else None))
    return result


def run_saturation(con: duckdb.DuckDBPyConnection, run_id: str) -> list[Saturation]:
    """The run's saturation per mode, from the warehouse."""
    cells = warehouse.rows(con, """
        select k.mode, k.clients, k.cache_miss_probability, k.kv_capacity_tokens, n.normalized_throughput,
               c.input_len, c.output_len
        from cell_kv k join cell_normalized n using (cell_id) join cells c using (cell_id)
        where k.run_id = ? and c.status = 'completed' and not coalesce(c.search_probe, false)""", [run_id])
    if not cells:
        return []
    return saturation_by_mode(cells, cells[0]["input_len"], cells[0]["output_len"])
