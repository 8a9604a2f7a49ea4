"""KV-cache saturation: where a server's KV cache stops holding every sequence in flight.

The theoretical saturation point is the KV capacity divided by the tokens one closed-loop client
holds at its longest: that many clients fill the cache. With fixed lengths a client's sequence is
prompt + output; with multi-turn sessions (`clients` = conversations at once) it is the session's
whole conversation at the end of its last turn, since every turn's prompt re-sends every earlier
prompt and answer (`tokens_per_client`, from the cell's workload block). The measured knee is the
most clients the cache held without misses: the last client count before the first whose
cache-miss probability exceeds MISS_THRESHOLD, going up from one
client. Engine-neutral: the inputs are the warehouse's `cell_kv` rows, which hold llama.cpp's
failed batches and vLLM's preemptions alike. A run's cells are grouped per mode and workload (a
series): two workloads on one server have two theoretical points. The cache-miss probability is
read, never recomputed, from `cell_kv.cache_miss_probability` (defined once in
warehouse/views/cell_kv.sql: the fraction of decode attempts that found no room in the KV cache).
"""

from __future__ import annotations

import json
from collections import defaultdict
from statistics import mean
from typing import Any

from pydantic import BaseModel, TypeAdapter, ValidationError

from servebench.config.campaign import ModelSpec, ModeSpec
from servebench.engines import get_engine
from servebench.engines.base import RankShare
from servebench.planning.memory import kv_capacity_tokens, model_weights, ranks_of, resolved_model_path
from servebench.warehouse import Connection, reads

MISS_THRESHOLD = 0.01   # a cell whose decode attempts missed more often than this is past the knee


class Saturation(BaseModel):
    mode: str
    workload: str | None = None           # the cells' workload name (None: the fixed input_len/output_len)
    workload_kind: str | None = None      # 'sessions': a client is a conversation
    kv_capacity_tokens: int | None       # as the engine logged it at start-up
    shape_kv_capacity_tokens: int | None = None  # as the model's shape gives it: KV pool / KV bytes a token
    tokens_per_sequence: int | None       # KV tokens a client holds at its longest (None: lengths drawn)
    theoretical_clients: float | None     # capacity / tokens per sequence
    measured_knee: int | None             # the most clients held without misses (None: no point had misses)
    first_miss_clients: int | None        # the first client count past the knee
    clients_measured: list[int]
    peak_normalized_throughput_past_knee: float | None  # the best throughput past the knee, 1.0 = the series' best
    mean_normalized_throughput_past_knee: float | None

    @property
    def knee_gap(self) -> float | None:
        """Measured knee minus the theoretical point, in clients."""
        if self.measured_knee is None or self.theoretical_clients is None:
            return None
        return self.measured_knee - self.theoretical_clients

    @property
    def series(self) -> str:
        """The mode, with the workload when there is one: what a chart line and a printed row are of."""
        return f"{self.mode}.{self.workload}" if self.workload else self.mode


def session_turn_tokens(first_input: int, turn_input: int, output: int, turn: int) -> int:
    """KV tokens a session holds at the end of turn `turn` (0 = the first): its prompt is the first
    message, then per earlier turn its answer and the next message, and the answer is added to it."""
    return first_input + turn * (output + turn_input) + output


def session_peak_tokens(first_input: int, turn_input: int, output: int, turns: int) -> int:
    """KV tokens a session holds at its longest, the end of its last turn: the conversation grows every
    turn, so its last turn, not one request's prompt + output, is what a session needs from the cache."""
    return session_turn_tokens(first_input, turn_input, output, turns - 1)


def fixed_length(length: Any) -> int | None:
    """A workload length block's value when it is fixed (`64` or `{dist: fixed, value: 64}`); None when
    drawn from a distribution, which has no one peak."""
    if isinstance(length, int) and not isinstance(length, bool):
        return length
    if isinstance(length, dict) and length.get("dist") == "fixed":
        return length.get("value")
    return None


def tokens_per_client(workload: dict | str | None, input_len: int | None, output_len: int | None) -> int | None:
    """KV tokens one closed-loop client holds at its longest, from a cell's workload block (as landed:
    a mapping or its JSON). No workload: input_len + output_len. A synthetic workload with fixed lengths:
    input + output; a sessions workload with fixed lengths: a session's peak context. None otherwise:
    drawn lengths have no single peak, and shared prefixes, datasets and traces are not one sequence a
    client (a prefix shared in the cache, a schedule of its own), so there is no theoretical point."""
    block: dict | None = json.loads(workload) if isinstance(workload, str) else workload
    if not block:
        return input_len + output_len if input_len and output_len else None
    kind = block.get("kind")
    if kind == "synthetic":
        input_tokens, output_tokens = (fixed_length(block.get(key)) for key in ("input", "output"))
        return None if input_tokens is None or output_tokens is None else input_tokens + output_tokens
    if kind == "sessions":
        first_input, turn_input, output = (
            fixed_length(block.get(key)) for key in ("first_input", "turn_input", "output"))
        turns = block.get("turns")
        if first_input is None or turn_input is None or output is None or not turns:
            return None
        return session_peak_tokens(first_input, turn_input, output, turns)
    return None


def theoretical_clients(capacity_tokens: int | None, per_client_tokens: int | None) -> float | None:
    """Clients (or sessions) whose longest sequences fill the KV capacity: capacity / tokens a client."""
    if not capacity_tokens or not per_client_tokens:
        return None
    return capacity_tokens / per_client_tokens


def measured_knee(
        miss_by_clients: dict[int, float], threshold: float = MISS_THRESHOLD) -> tuple[int | None, int | None]:
    """(knee, first client count with misses) from each client count's mean cache-miss probability."""
    held = None
    for clients in sorted(miss_by_clients):
        if miss_by_clients[clients] > threshold:
            return held, clients
        held = clients
    return None, None


def normalized_per_series(cells: list[dict]) -> list[dict]:
    """Each cell's output throughput over the best of its series (mode and workload), where the rows say
    it; else the `normalized_throughput` they carry (the mode's best). Two workloads on one server differ
    in throughput by their lengths alone, so each is normalized against its own best."""
    best: dict[tuple, float] = defaultdict(float)
    for cell in cells:
        if cell.get("output_throughput") is not None:
            key = (cell["mode"], cell.get("workload_name"))
            best[key] = max(best[key], cell["output_throughput"])
    result = []
    for cell in cells:
        top = best.get((cell["mode"], cell.get("workload_name")))
        if cell.get("output_throughput") is not None and top:
            cell = {**cell, "normalized_throughput": cell["output_throughput"] / top}
        result.append(cell)
    return result


def saturation_by_mode(cells: list[dict], input_len: int | None = None, output_len: int | None = None,
                       threshold: float = MISS_THRESHOLD) -> list[Saturation]:
    """One Saturation per mode and workload from closed-loop `cell_kv` rows (with normalized throughput,
    or output throughput, and optionally `workload`/`workload_name`). A cell without a workload holds
    `input_len` + `output_len` tokens a client (its own `input_len`/`output_len` where it has them)."""
    by_series: dict[tuple, list[dict]] = defaultdict(list)
    for cell in normalized_per_series([c for c in cells if c.get("clients") is not None]):
        by_series[(cell["mode"], cell.get("workload_name"))].append(cell)
    result = []
    for (mode, workload_name), rows in sorted(by_series.items(), key=lambda item: (item[0][0], item[0][1] or "")):
        misses: dict[int, list[float]] = defaultdict(list)
        for row in rows:
            if row.get("cache_miss_probability") is not None:
                misses[row["clients"]].append(row["cache_miss_probability"])
        knee, first_miss = measured_knee({clients: mean(values) for clients, values in misses.items()}, threshold)
        capacity = next((r["kv_capacity_tokens"] for r in rows if r.get("kv_capacity_tokens")), None)
        first = rows[0]
        workload = first.get("workload")
        if isinstance(workload, str):
            workload = json.loads(workload)
        per_client = tokens_per_client(workload, first.get("input_len") or input_len,
                                       first.get("output_len") or output_len)
        past = [r.get("normalized_throughput") or 0.0 for r in rows if first_miss and r["clients"] >= first_miss]
        result.append(Saturation(
            mode=mode, workload=workload_name, workload_kind=(workload or {}).get("kind"),
            kv_capacity_tokens=capacity, tokens_per_sequence=per_client,
            theoretical_clients=theoretical_clients(capacity, per_client), measured_knee=knee,
            first_miss_clients=first_miss, clients_measured=sorted({r["clients"] for r in rows}),
            peak_normalized_throughput_past_knee=max(past) if past else None,
            mean_normalized_throughput_past_knee=mean(past) if past else None))
    return result


def run_saturation(con: Connection, run_id: str, threshold: float = MISS_THRESHOLD) -> list[Saturation]:
    """The run's saturation per mode and workload, from the warehouse, with the capacity the shape gives."""
    found = saturation_by_mode(reads.saturation_cells(con, run_id), threshold=threshold)
    shape = {row["mode"]: shape_capacity(row) for row in reads.saturation_modes(con, run_id)}
    return [s.model_copy(update={"shape_kv_capacity_tokens": shape.get(s.mode)}) for s in found]


def shape_capacity(row: dict) -> int | None:
    """The KV tokens the mode's server holds by the model's shape and the engine's KV pool
    (servebench/planning/memory.py): the fewest any rank's pool holds. None when the run's spec does
    not say the shape (a GGUF file) or no longer validates. Placement does not change a pool, so the
    ranks are laid out on stand-in nodes."""
    spec = json.loads(row["spec"]) if isinstance(row["spec"], str) else row["spec"]
    try:
        engine = get_engine(row["engine"] or spec["engine"]["kind"])
        blocks = {block["kind"]: block for block in [spec["engine"], *spec.get("engines", [])]}
        engine_spec = engine.spec_model.model_validate(blocks[engine.kind])
        model = TypeAdapter(ModelSpec).validate_python(spec["model"])
        mode = served_mode(spec["modes"], row)
    except (KeyError, ValueError, ValidationError):
        return None
    weights = model_weights(model, engine, resolved_model_path(model, None))
    if weights.shape is None or engine.api.memory is None:
        return None
    nodes = [(f"node{i}", list(range(mode.world_size))) for i in range(mode.world_size)]
    shares: list[RankShare] = ranks_of(engine, mode, engine_spec, nodes, weights.shape)
    return kv_capacity_tokens(weights, shares)


def served_mode(modes: list[dict], row: dict) -> ModeSpec:
    """The campaign's mode a served configuration (`tp1-mns8`) is of, with the configuration's layout and knobs."""
    name = row["mode"]
    base = max((m for m in modes if name == m["name"] or name.startswith(m["name"] + "-")),
               key=lambda m: len(m["name"]))
    knobs = json.loads(row["knobs"]) if isinstance(row["knobs"], str) else row["knobs"]
    return ModeSpec.model_validate({**base, "name": name, "tp": row["tp"], "pp": row["pp"], "executor": row["executor"],
                                    "nodes": None, "knobs": knobs or base.get("knobs", {})})
