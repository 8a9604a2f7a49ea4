"""Drive one load run: open loop (scheduled arrivals), closed loop (N clients), or both
(arrivals with a concurrency cap). The schedule and every request body exist before the
first send; during the run the event loop only sends bytes and stamps arrivals. The result is a
`LoadResult` (servebench/load/result.py), its summary derived from the records afterwards.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, NamedTuple

import uvloop

from servebench.load.balance import Targets, requests_per_replica, targets_for
from servebench.load.config import LoadConfig
from servebench.load.health import WatchBroken, hung_since
from servebench.load.metrics import percentile, steady_summary, ttft
from servebench.load.pinning import CpuMeter, IdlePolling, place_self, polling_when_idle
from servebench.load.records import RequestRecord
from servebench.load.result import (
    T0,
    HungSummary,
    LoadResult,
    LoadSummary,
    PromptCacheCounts,
    TurnFigures,
    WorkloadName,
    load_result,
    write_result,
)
from servebench.load.schedule import arrival_offsets
from servebench.load.server_metrics import scrape_counter
from servebench.load.steady import WARMUP_SEED_OFFSET, WarmupOutcome, warm_until_steady
from servebench.load.summary import ClientUsage
from servebench.load.workload import Workload, request_body

# `load_result` and `write_result` are the result file's (servebench/load/result.py), named here too
# for the readers and writers that take them from the runner
__all__ = ["LiveCounts", "load_result", "run_load", "run_load_result", "write_result"]

PATHS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}


@dataclass
class LiveCounts:
    """Read by a progress display from another thread; written only by the event loop."""

    sent: int = 0
    done: int = 0
    failed: int = 0
    total: int | None = None


class Prepared(NamedTuple):
    """A request rendered before the run: its body and what its record says about it."""

    body: bytes
    expected_input_tokens: int | None
    output_len: int
    group: int | None
    session: int | None
    turn: int | None
    token_ids: bool  # the prompt is token ids: the server must count exactly those


@dataclass
class RunPlan:
    """What a run knows before its first send."""

    config: LoadConfig
    workload: Workload
    offsets: list[float] | None        # open loop: when each request is due, seconds from t0
    count: int | None                  # requests to send (None: made as they are sent, until the duration)
    prepared: list[Prepared] | None    # every request rendered up front, when the count is known


@dataclass(frozen=True)
class Counters:
    """The server's counters around the measurement (None: not asked for, or not readable)."""

    tokens: float | None = None
    prefix_cache: tuple[float | None, float | None] | None = None  # (queries, hits)


@dataclass(frozen=True)
class Window:
    """The measured window: its start, whether the server hung in it, and what it cost the generator."""

    t0: float
    hung: tuple[float, float] | None  # (its last sign of life, when the load stopped), monotonic
    client: ClientUsage
    unwatched: str | None = None      # why the hang watch asked for could not judge the window


class CounterCheck(NamedTuple):
    skipped: str | None   # why the server's counter was not compared
    invalid: str | None   # why its count makes the run invalid


Make = Callable[[int, int | None, float], tuple[RequestRecord, bytes]]
Send = Callable[[RequestRecord, bytes], Awaitable[None]]


def workload_for(config: LoadConfig, data_seed: int) -> Workload:
    return Workload(endpoint=config.endpoint, input_len=config.input_len, output_len=config.output_len,
                    vocab_size=config.vocab_size, data_seed=data_seed, tokenizer=config.tokenizer,
                    prompts_file=config.prompts, sharegpt_file=config.sharegpt, spec=config.workload,
                    max_context=config.max_context)


def run_load(config: LoadConfig, live: LiveCounts | None = None) -> dict[str, Any]:
    """Run the load and return the result as its file holds it: {"version", "config", "t0", "summary",
    "requests"}, plain JSON."""
    return run_load_result(config, live).model_dump(mode="json")


def run_load_result(config: LoadConfig, live: LiveCounts | None = None) -> LoadResult:
    """Run the load: prepared before the first send, measured, then summarized from the records."""
    plan = plan_run(config)
    live = live or LiveCounts()
    live.total = plan.count
    notes = place_self(config.cpus, config.nice)
    with polling_when_idle(config.idle_poll) as idle, asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(_run(plan, live, notes, idle))


def plan_run(config: LoadConfig) -> RunPlan:
    """The workload, the schedule and, where the count is known, every request body."""
    workload = workload_for(config, config.effective_data_seed)
    offsets = _offsets(config, workload)
    count = _request_count(config, offsets)
    if count is None:
        workload.check_bounded()
    prepared = [_prepare(config, workload, i) for i in range(count)] if count is not None else None
    return RunPlan(config, workload, offsets, count, prepared)


def _offsets(config: LoadConfig, workload: Workload) -> list[float] | None:
    if config.replay:
        trace_offsets = workload.offsets(config.rate)
        assert trace_offsets is not None  # a trace workload (config.replay) has its own schedule
        return replay_schedule(trace_offsets, config.requests, config.duration)
    if config.rate is not None:
        return arrival_offsets(config.rate, config.arrival, config.effective_schedule_seed,
                               count=config.requests, duration=config.duration, burstiness=config.burstiness)
    return None


def _request_count(config: LoadConfig, offsets: list[float] | None) -> int | None:
    count = len(offsets) if offsets is not None else config.requests
    if config.sessions is not None:
        whole = config.sessions.sessions * config.sessions.turns
        count = whole if config.duration is None else None  # with a duration: turns made as they are sent
        count = min(count, config.requests) if count is not None and config.requests else count
    return count


def replay_schedule(offsets: list[float], requests: int | None, duration: float | None) -> list[float]:
    """A trace's offsets, cut to the first `requests` or to those due within `duration` seconds."""
    if requests is not None:
        offsets = offsets[:requests]
    if duration is not None:
        offsets = [t for t in offsets if t < duration]
    return offsets


def judged_config(config: LoadConfig, offsets: list[float] | None) -> LoadConfig:
    """The config the summary judges by: a trace replayed without a rate is judged like any open-loop
    schedule (lag, achieved rate), its offered rate the replay's mean rate."""
    if not config.replay or config.rate is not None or not offsets or len(offsets) < 2 or offsets[-1] <= 0:
        return config
    return config.model_copy(update={"rate": (len(offsets) - 1) / offsets[-1]})


def _prepare(config: LoadConfig, workload: Workload, index: int) -> Prepared:
    item = workload.item(index)
    token_ids = isinstance(item.prompt, list) and bool(item.prompt) and isinstance(item.prompt[0], int)
    return Prepared(request_body(config.model, config.endpoint, item, config.request_extras),
                    item.expected_input_tokens, item.output_len, item.group, item.session, item.turn, token_ids)


class _Sender:
    """What every sending loop does with request i: `make` its record and body, then `send` them (to the
    one server, or to the replica picked as it is sent). Keeps the records, the requests that finished and
    those whose prompts are token ids."""

    def __init__(self, plan: RunPlan, targets: Targets, live: LiveCounts):
        self.plan, self.targets, self.live = plan, targets, live
        self.records: list[RequestRecord] = []
        self.exact: set[int] = set()
        self.finished: set[int] = set()

    def make(self, index: int, client: int | None, scheduled: float) -> tuple[RequestRecord, bytes]:
        plan = self.plan
        ready = plan.prepared[index] if plan.prepared is not None else _prepare(plan.config, plan.workload, index)
        if ready.token_ids:
            self.exact.add(index)
        record = RequestRecord(index=index, warmup=index < plan.config.warmup, client=client, scheduled_s=scheduled,
                               expected_input_tokens=ready.expected_input_tokens,
                               requested_output_tokens=ready.output_len, prefix_group=ready.group,
                               session=ready.session, turn=ready.turn)
        self.records.append(record)
        return record, ready.body

    async def send(self, record: RequestRecord, body: bytes) -> None:
        live = self.live
        live.sent += 1
        await self.targets.stream(body, record, self.plan.config.timeout_s)
        self.finished.add(record.index)
        live.done += 1
        live.failed += record.error_kind is not None


async def _run(plan: RunPlan, live: LiveCounts, notes: list[str], idle: IdlePolling) -> LoadResult:
    config = plan.config
    targets = targets_for(config, PATHS[config.endpoint])
    warmed = await _warm_up(config, targets) if config.warm_until_steady else None
    before = read_counters(config)  # after the warm-up: its tokens are not the cell's
    started_wall = datetime.now(timezone.utc)
    sender = _Sender(plan, targets, live)
    window = await _measure(plan, sender, notes, idle)
    after = read_counters(config) if window.hung is None else Counters()  # a hung server answers no /metrics
    sender.records.sort(key=lambda r: r.index)
    for record in sender.records:
        record.shift(window.t0)
    summary = load_summary(plan, sender, window, (before, after), warmed)
    return LoadResult(config=config, t0=T0(monotonic=window.t0, wall=started_wall), summary=summary,
                      requests=sender.records)


async def _measure(plan: RunPlan, sender: _Sender, notes: list[str], idle: IdlePolling) -> Window:
    """Send the run's requests with the collector off; requests in flight when a hung server stopped
    the load become error rows."""
    config = plan.config
    gc.collect()
    gc.freeze()  # no collector pauses inside the measurement
    gc.disable()
    meter = CpuMeter()
    meter.start()
    t0 = time.monotonic()
    try:
        hung, unwatched = await _unless_hung(_sending(plan, sender, t0), config,
                                             lambda: _last_activity(sender.records))
    finally:
        gc.enable()
        gc.unfreeze()
        sender.targets.close()
    if hung is not None:
        _mark_hung(sender.records, sender.finished, hung, t0, config)
    return Window(t0, hung, meter.usage(notes, idle), unwatched)


def _sending(plan: RunPlan, sender: _Sender, t0: float) -> Coroutine[Any, Any, None]:
    config = plan.config
    if config.sessions is not None:
        return _sessions_loop(config, plan.workload, t0, sender.make, sender.send)
    if plan.offsets is not None:
        return _open_loop(config, plan.offsets, t0, sender.make, sender.send)
    return _closed_loop(config, t0, sender.make, sender.send)


def load_summary(plan: RunPlan, sender: _Sender, window: Window, counters: tuple[Counters, Counters],
                 warmed: WarmupOutcome | None) -> LoadSummary:
    """The steady-window summary with the checks only a whole run can make (the server's counters,
    the prompts it counted, a hang), and the keys that apply to this kind of run."""
    config, records = plan.config, sender.records
    before, after = counters
    steady = steady_summary(records, judged_config(config, plan.offsets), window.client)
    mismatches, prompt_reason = prompt_check([r for r in records if r.index in sender.exact])
    server_tokens = after.tokens - before.tokens if before.tokens is not None and after.tokens is not None else None
    client_tokens = sum(r.output_tokens or 0 for r in records)
    counted = counter_check(server_tokens, client_tokens, steady.failed)
    hung = _hung_summary(window.hung, window.t0, config, records, sender.finished) if window.hung is not None else None
    unwatched = f"not checked for hangs: {window.unwatched}" if window.unwatched is not None else None
    more = [r for r in (prompt_reason, counted.invalid, hung.reason if hung else None, unwatched) if r is not None]
    summary = LoadSummary(**(dict(steady) | {"valid": steady.valid and not more,
                                             "invalid_reasons": steady.invalid_reasons + more}),
                          prompt_token_mismatches=mismatches, server_output_tokens=server_tokens,
                          client_output_tokens=client_tokens)
    _add_run_kind(summary, config, records, warmed)
    if counted.skipped is not None:
        summary.counter_check = counted.skipped
    _add_prefix_cache(summary, config, records, counters)
    if config.replica_urls:
        summary.replica_requests = requests_per_replica(records, list(config.replica_urls))
    if hung is not None:
        summary.hung = hung
    if window.unwatched is not None:
        summary.hang_watch_error = window.unwatched
    return summary


def _add_run_kind(summary: LoadSummary, config: LoadConfig, records: list[RequestRecord],
                  warmed: WarmupOutcome | None) -> None:
    """Set only where they apply (a reader asks whether they are there): the warm-up phase, the
    workload block, a sessions workload's turns."""
    if warmed is not None:
        summary.warm_until_steady = warmed
    if config.workload is not None:
        summary.workload = WorkloadName(kind=config.workload.kind, name=config.workload.label)
    if config.sessions is not None:
        summary.turns = per_turn(records)


def _add_prefix_cache(summary: LoadSummary, config: LoadConfig, records: list[RequestRecord],
                      counters: tuple[Counters, Counters]) -> None:
    """The prefix cache's hit rate from the server's counters where it has them, else from what its
    responses said (set only where the engine gives either)."""
    if config.prefix_cache_counters:
        summary.prefix_cache_hit_rate = hit_rate(counters[0].prefix_cache, counters[1].prefix_cache)
    if config.prompt_cache_tokens:
        counts = summary.prompt_cache_tokens = cache_counts(records)
        if not config.prefix_cache_counters:
            summary.prefix_cache_hit_rate = response_hit_rate(counts)


async def _warm_up(config: LoadConfig, targets: Targets) -> WarmupOutcome:
    """Warm-up requests at the cell's concurrency until the server is steady (servebench/load/steady.py):
    prompts of another data seed, sent before the measurement starts and left out of its records."""
    steady = config.warm_until_steady
    assert steady is not None  # `_run` warms up only when it is set
    workload = workload_for(config, config.effective_data_seed + WARMUP_SEED_OFFSET)

    async def send(index: int) -> RequestRecord:
        ready = _prepare(config, workload, index)
        record = RequestRecord(index=index, warmup=True, scheduled_s=time.monotonic(),
                               expected_input_tokens=ready.expected_input_tokens,
                               requested_output_tokens=ready.output_len)
        await targets.stream(ready.body, record, config.timeout_s)
        return record

    return await warm_until_steady(steady, config.clients, config.rate, send)


async def _unless_hung(sending: Coroutine[Any, Any, None], config: LoadConfig,
                       activity: Callable[[], float]) -> tuple[tuple[float, float] | None, str | None]:
    """Run the sending coroutine; with a health URL and a hang limit, stop it once the server has
    shown no sign of life for that long (`health.hung_since`). Returns (None, or (its last sign of
    life, when the load was stopped) as monotonic times; None, or why the watch could not judge: it
    broke, the load ran on to its end, and the run is invalid saying so)."""
    if not (config.health_url and config.hang_after_s):
        await sending
        return None, None
    load = asyncio.ensure_future(sending)
    watch = asyncio.ensure_future(hung_since(config.health_url, config.hang_after_s, activity))
    await asyncio.wait({load, watch}, return_when=asyncio.FIRST_COMPLETED)
    broke = _broken(watch)
    if not load.done() and broke is not None:  # the watch broke: the load runs on, not checked for hangs
        await load
    if load.done():
        watch.cancel()
        await asyncio.gather(watch, return_exceptions=True)
        load.result()  # the load's own exception, if it raised
        return None, broke
    load.cancel()
    await asyncio.gather(load, return_exceptions=True)
    return (watch.result(), time.monotonic()), None


def _broken(watch: asyncio.Future[float]) -> str | None:
    """Why a finished watch could not judge (None: still watching, or it found a hang). A watch that
    raised anything is broken, not only by `WatchBroken`: nothing it raises may pass for a judged load."""
    if not watch.done() or watch.cancelled():
        return None
    error = watch.exception()
    if error is None:
        return None
    return str(error) if isinstance(error, WatchBroken) else f"the hang watchdog broke: {type(error).__name__}: {error}"


def _last_activity(records: list[RequestRecord]) -> float:
    """When the server last sent a token-carrying event on any request (monotonic; 0: never)."""
    return max((r.chunk_times[-1] for r in records if r.chunk_times), default=0.0)


def _mark_hung(records: list[RequestRecord], finished: set[int], hung: tuple[float, float], t0: float,
               config: LoadConfig) -> None:
    """Requests in flight when the load stopped: error rows of kind 'hung', whatever they had received."""
    for record in records:
        if record.index not in finished:
            record.error_kind = "hung"
            record.error = (f"the server hung ({config.health_url} unanswered for {config.hang_after_s:g} s): "
                            f"the load stopped at {hung[1] - t0:.1f} s")


def _hung_summary(hung: tuple[float, float], t0: float, config: LoadConfig, records: list[RequestRecord],
                  finished: set[int]) -> HungSummary:
    last_answer, stopped = hung
    in_flight = len(records) - len(finished)
    planned = config.requests
    unsent = f", {planned - len(records)} never sent" if planned is not None else ""
    return HungSummary(
        last_answer_s=round(last_answer - t0, 3), stopped_s=round(stopped - t0, 3), in_flight=in_flight,
        sent=len(records),
        reason=f"the server hung: {config.health_url} unanswered since {max(last_answer - t0, 0.0):.1f} s "
               f"(limit {config.hang_after_s:g} s); the load stopped at {stopped - t0:.1f} s with "
               f"{in_flight} requests in flight{unsent}")


async def sleep_until(due: float) -> None:
    """Return once time.monotonic() reaches `due`, never before: the event loop's timers may wake up to a
    millisecond early, so a request would be sent before its scheduled time."""
    while (delay := due - time.monotonic()) > 0:
        await asyncio.sleep(delay)


async def _open_loop(config: LoadConfig, offsets: list[float], t0: float, make: Make, one: Send) -> None:
    cap = asyncio.Semaphore(config.clients) if config.clients else None

    async def capped(cap: asyncio.Semaphore, record: RequestRecord, payload: bytes) -> None:
        async with cap:
            await one(record, payload)

    tasks: list[asyncio.Future[None]] = []
    for index, offset in enumerate(offsets):
        due = t0 + offset
        await sleep_until(due)
        record, payload = make(index, None, due)
        tasks.append(asyncio.ensure_future(capped(cap, record, payload) if cap else one(record, payload)))
    await asyncio.gather(*tasks)


async def _sessions_loop(config: LoadConfig, workload: Workload, t0: float, make: Make, one: Send) -> None:
    """`clients` conversations at once (default: all): each client takes a session no client has started yet and
    sends its turns in order, each when the answer before it is complete and the think time has passed (its
    scheduled time; a turn is never sent before it). No new turn after `duration`, none past `requests`."""
    spec = config.sessions
    assert spec is not None  # `_sending` calls it for a sessions workload only
    deadline = t0 + config.duration if config.duration else None
    next_session = 0

    async def client(client_id: int) -> None:
        nonlocal next_session
        while next_session < spec.sessions:
            session = next_session
            next_session += 1
            due = time.monotonic()
            for turn in range(spec.turns):
                index = session * spec.turns + turn
                if (config.requests is not None and index >= config.requests) or \
                        (deadline is not None and due >= deadline):
                    return
                await sleep_until(due)
                record, payload = make(index, client_id, due)
                await one(record, payload)
                due = time.monotonic() + workload.think_s(session, turn)

    await asyncio.gather(*(client(i) for i in range(min(config.clients or spec.sessions, spec.sessions))))


def per_turn(records: list[RequestRecord]) -> list[TurnFigures]:
    """Per turn of a sessions workload: requests, those answered, the mean prompt length the server
    counted and TTFT percentiles (a growing context shows as both rising with the turn)."""
    turns: dict[int, list[RequestRecord]] = {}
    for record in records:
        if record.turn is not None:
            turns.setdefault(record.turn, []).append(record)
    rows = []
    for turn in sorted(turns):
        answered = [r for r in turns[turn] if r.ok and ttft(r) is not None]
        ttfts = sorted(1000 * t for t in map(ttft, answered) if t is not None)  # (all of them: answered)
        prompts = [r.input_tokens for r in answered if r.input_tokens is not None]
        rows.append(TurnFigures(turn=turn, requests=len(turns[turn]), completed=len(answered),
                                input_tokens_mean=sum(prompts) / len(prompts) if prompts else None,
                                ttft_p50_ms=percentile(ttfts, 50) if ttfts else None,
                                ttft_p99_ms=percentile(ttfts, 99) if ttfts else None))
    return rows


async def _closed_loop(config: LoadConfig, t0: float, make: Make, one: Send) -> None:
    assert config.clients is not None  # `LoadConfig._check`: neither rate nor a trace nor sessions
    next_index = 0
    deadline = t0 + config.duration if config.duration else None

    async def client(client_id: int) -> None:
        nonlocal next_index
        while config.requests is None or next_index < config.requests:
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                return
            index = next_index
            next_index += 1
            record, payload = make(index, client_id, now)
            await one(record, payload)

    await asyncio.gather(*(client(i) for i in range(config.clients)))


def read_counters(config: LoadConfig) -> Counters:
    """Read outside the measured window, so a blocking call costs the measurement nothing."""
    return Counters(_server_tokens(config), _prefix_cache(config))


def _server_tokens(config: LoadConfig) -> float | None:
    if not config.token_counter:
        return None
    return _summed_counter(config, config.token_counter)


def _summed_counter(config: LoadConfig, name: str) -> float | None:
    """A counter summed over the servers that hold it (a balancer's replicas, else those the generator balances
    itself); None if one has none."""
    urls = config.metrics_urls or list(config.replica_urls.values()) or [config.base_url]
    values = [scrape_counter(url, name) for url in urls]
    return None if any(v is None for v in values) else sum(v for v in values if v is not None)


def _prefix_cache(config: LoadConfig) -> tuple[float | None, float | None] | None:
    """The server's prefix-cache (queries, hits) counters now."""
    if not config.prefix_cache_counters:
        return None
    queries, hits = config.prefix_cache_counters
    return _summed_counter(config, queries), _summed_counter(config, hits)


def hit_rate(before: tuple[float | None, float | None] | None,
             after: tuple[float | None, float | None] | None) -> float | None:
    """Prompt tokens the prefix cache held / prompt tokens looked up, over the run (None: unknown, or
    nothing was looked up)."""
    if before is None or after is None:
        return None
    if before[0] is None or before[1] is None or after[0] is None or after[1] is None:
        return None
    queries, hits = after[0] - before[0], after[1] - before[1]
    return round(hits / queries, 4) if queries > 0 else None


def cache_counts(records: list[RequestRecord]) -> PromptCacheCounts:
    """The prompt tokens the server's responses say it reused from its prefix cache and processed, summed over
    the run's requests that said both (as the counters', the run's every request: warm-up ones too)."""
    told = [(r.cached_input_tokens, r.processed_input_tokens) for r in records
            if r.cached_input_tokens is not None and r.processed_input_tokens is not None]
    return PromptCacheCounts(requests=len(told), cached=sum(cached for cached, _ in told),
                             processed=sum(processed for _, processed in told))


def response_hit_rate(counts: PromptCacheCounts) -> float | None:
    """Prompt tokens reused from the cache / prompt tokens (cached + processed), over the responses that said
    (None: none did, or their prompts were empty)."""
    total = counts["cached"] + counts["processed"]
    return round(counts["cached"] / total, 4) if total > 0 else None


def prompt_check(token_id_requests: list[RequestRecord]) -> tuple[int, str | None]:
    """How many prompts of token ids the server counted as other than their length, and then why the
    run is invalid: it added or dropped tokens, so the lengths the workload asked for were not served."""
    wrong = [r for r in token_id_requests if r.input_tokens is not None and r.expected_input_tokens is not None
             and r.input_tokens != r.expected_input_tokens]
    if not wrong:
        return 0, None
    first = wrong[0]
    return len(wrong), (f"{len(wrong)} prompts of token ids were counted otherwise by the server (request "
                        f"{first.index}: {first.expected_input_tokens} sent, {first.input_tokens} counted)")


def _add_prompt_check(summary: dict[str, Any], token_id_requests: list[RequestRecord]) -> None:
    """`prompt_check` applied to a summary in its JSON form."""
    mismatches, reason = prompt_check(token_id_requests)
    summary["prompt_token_mismatches"] = mismatches
    if reason is not None:
        summary["valid"] = False
        summary["invalid_reasons"].append(reason)


def counter_check(server_tokens: float | None, client_tokens: int, failed: int) -> CounterCheck:
    """Invalid when the server's own counter disagrees with the tokens the client counted. Not
    checked when requests failed: the server counts what it generated for them before the error
    (a KV cache that overflowed mid-sequence), which the client never receives as a completion."""
    if server_tokens is not None and failed:
        return CounterCheck(f"skipped: {failed} requests failed; the server's counter holds tokens it generated "
                            "for them", None)
    if server_tokens is not None and round(server_tokens) != client_tokens:
        return CounterCheck(None, f"server counter says {server_tokens:.0f} tokens were generated, the client "
                                  f"counted {client_tokens} (another client on the server, or lost events)")
    return CounterCheck(None, None)
