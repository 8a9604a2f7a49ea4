"""A cell's requests through continuous batching, step by step (pure).

The scheduler is the one continuous-batching engines share (vLLM's, llama.cpp's slots alike): every step
first gives each running sequence its next token (one a sequence) or the next chunk of its prompt, then
admits waiting requests while fewer than `max_seqs` run and the step's token budget (`max_batched_tokens`)
lasts, a prompt longer than what is left prefilled in chunks over several steps; the step that finishes a
prompt samples its first token. A step's time is `step.step_time` of what it holds. Closed loop: each client
sends its next request when its answer ends; open loop: the requests arrive at their offsets. What it leaves
out: preemption when the KV cache is full, prefix caching, speculative decoding, the API process's own
queue (docs/performance-model.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from servebench.load.metrics import percentile
from servebench.prediction.step import BOUNDS, StepBatch, StepTime

StepModel = Callable[[StepBatch], StepTime]


@dataclass(frozen=True)
class Arrivals:
    """How a cell's requests come: `clients` closed-loop clients, or `offsets` (seconds from the start) of an
    open loop; `requests` in all, the first `warmup` of them left out of the metrics, each a prompt of
    `prompt_tokens` asking `output_tokens`."""

    requests: int
    prompt_tokens: int
    output_tokens: int
    clients: int | None = None
    offsets: tuple[float, ...] = ()
    warmup: int = 0


@dataclass(frozen=True)
class BatchLimits:
    max_seqs: int
    max_batched_tokens: int


@dataclass
class _Sequence:
    index: int
    arrived_s: float
    prompt: int
    output: int
    prefilled: int = 0
    generated: int = 0
    first_token_s: float | None = None
    done_s: float | None = None


@dataclass(frozen=True)
class SimulatedCell:
    """What the simulation gives a cell: its metrics (seconds; tokens/s), over the requests after the warm-up,
    and the share of the busy time each bound took."""

    ttft_p50_s: float
    ttft_p99_s: float
    tpot_p50_s: float | None
    tpot_p99_s: float | None
    output_throughput: float
    duration_s: float
    bound_shares: dict[str, float] = field(default_factory=dict)
    mean_batch: float = 0.0

    @property
    def bound(self) -> str:
        """The bound of most of the busy time."""
        return max(self.bound_shares, key=lambda b: self.bound_shares[b]) if self.bound_shares else "engine"


def _schedule(running: list[_Sequence], waiting: list[_Sequence], limits: BatchLimits
              ) -> tuple[list[_Sequence], list[tuple[_Sequence, int]]]:
    """One step's work: the running sequences' decodes and prompt chunks first, then waiting requests admitted
    while there is room; returns (decoding sequences, [(sequence, prompt tokens this step)])."""
    budget = limits.max_batched_tokens
    decoding: list[_Sequence] = []
    chunks: list[tuple[_Sequence, int]] = []
    for seq in running:
        if budget <= 0:
            break
        if seq.prefilled >= seq.prompt:
            decoding.append(seq)
            budget -= 1
        else:
            take = min(seq.prompt - seq.prefilled, budget)
            chunks.append((seq, take))
            budget -= take
    while waiting and budget > 0 and len(running) < limits.max_seqs:
        seq = waiting.pop(0)
        running.append(seq)
        take = min(seq.prompt, budget)
        chunks.append((seq, take))
        budget -= take
    return decoding, chunks


def _batch(decoding: list[_Sequence], chunks: list[tuple[_Sequence, int]]) -> StepBatch:
    """The step's tokens, the context tokens whose KV it reads and the attention pairs: a decoding sequence
    attends its whole context, a chunk of n tokens after p prefilled ones n p + n (n + 1) / 2 pairs."""
    kv = sum(s.prompt + s.generated for s in decoding) + sum(s.prefilled for s, _ in chunks)
    pairs = sum(s.prompt + s.generated for s in decoding) + \
        sum(n * s.prefilled + n * (n + 1) // 2 for s, n in chunks)
    return StepBatch(decode_seqs=len(decoding), prefill_tokens=sum(n for _, n in chunks), kv_read_tokens=kv,
                     attention_pairs=pairs)


def _advance(decoding: list[_Sequence], chunks: list[tuple[_Sequence, int]], now: float) -> list[_Sequence]:
    """The step's tokens done at `now`; returns the sequences it finished."""
    finished = []
    for seq in decoding:
        seq.generated += 1
        if seq.generated >= seq.output:
            seq.done_s = now
            finished.append(seq)
    for seq, taken in chunks:
        seq.prefilled += taken
        if seq.prefilled >= seq.prompt:
            seq.generated, seq.first_token_s = 1, now
            if seq.output <= 1:
                seq.done_s = now
                finished.append(seq)
    return finished


def _run(arrivals: Arrivals, limits: BatchLimits, step: StepModel,
         request_overhead_s: float) -> tuple[list[_Sequence], dict[str, float], float]:
    """Every request through the engine: the sequences with their times, the busy seconds by bound, the mean
    batch (tokens a step). A request reaches the scheduler `request_overhead_s` after it is sent (the API
    process's own work on it)."""
    closed = arrivals.clients is not None
    starts = [0.0] * min(arrivals.clients or 0, arrivals.requests) if closed else list(arrivals.offsets)
    incoming = [_Sequence(i, t, arrivals.prompt_tokens, arrivals.output_tokens) for i, t in enumerate(starts)]
    expected = arrivals.requests if closed else len(incoming)
    pending = list(incoming)   # sent, not with the scheduler yet
    waiting: list[_Sequence] = []
    running: list[_Sequence] = []
    done: list[_Sequence] = []
    busy = dict.fromkeys(BOUNDS, 0.0)
    now, steps, tokens = 0.0, 0, 0
    while len(done) < expected:
        for seq in [s for s in pending if s.arrived_s + request_overhead_s <= now]:
            pending.remove(seq)
            waiting.append(seq)
        if not running and not waiting:
            now = min(s.arrived_s for s in pending) + request_overhead_s
            continue
        decoding, chunks = _schedule(running, waiting, limits)
        timing = step(_batch(decoding, chunks))
        now += timing.total_s
        busy[timing.bound] += timing.total_s
        steps, tokens = steps + 1, tokens + len(decoding) + sum(n for _, n in chunks)
        for seq in _advance(decoding, chunks, now):
            running.remove(seq)
            done.append(seq)
            if closed and len(incoming) < arrivals.requests:
                follow = _Sequence(len(incoming), now, arrivals.prompt_tokens, arrivals.output_tokens)
                incoming.append(follow)
                pending.append(follow)
    return incoming, busy, tokens / steps if steps else 0.0


def simulate(arrivals: Arrivals, limits: BatchLimits, step: StepModel, request_overhead_s: float = 0.0
             ) -> SimulatedCell:
    """A cell's predicted metrics: TTFT (from a request's send to its first token, the API process's
    `request_overhead_s` included), TPOT ((last - first token) / (tokens - 1)) and the output tokens a second
    over the window from the first counted send to the last counted answer, as the load generator counts them."""
    sequences, busy, mean_batch = _run(arrivals, limits, step, request_overhead_s)
    counted = sorted(sequences, key=lambda s: s.index)[arrivals.warmup:] or sequences
    ttfts = sorted((s.first_token_s or 0.0) - s.arrived_s for s in counted)
    tpots = sorted(((s.done_s or 0.0) - (s.first_token_s or 0.0)) / (s.output - 1) for s in counted if s.output > 1)
    start = min(s.arrived_s for s in counted)
    end = max(s.done_s or 0.0 for s in counted)
    window = max(end - start, 1e-9)
    total = sum(busy.values()) or 1.0
    return SimulatedCell(
        ttft_p50_s=percentile(ttfts, 50) or 0.0, ttft_p99_s=percentile(ttfts, 99) or 0.0,
        tpot_p50_s=percentile(tpots, 50), tpot_p99_s=percentile(tpots, 99),
        output_throughput=sum(s.output for s in counted) / window, duration_s=end,
        bound_shares={bound: seconds / total for bound, seconds in busy.items() if seconds > 0},
        mean_batch=mean_batch)
