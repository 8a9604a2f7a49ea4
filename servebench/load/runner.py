"""Drive one load run: open loop (scheduled arrivals), closed loop (N clients), or both
(arrivals with a concurrency cap). The schedule and every request body exist before the
first send; during the run the event loop only sends bytes and stamps arrivals.
"""

from __future__ import annotations

import asyncio
import gc
import json
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import uvloop

from servebench.load.config import LoadConfig
from servebench.load.health import hung_since
from servebench.load.http import ConnectionPool, Endpoint, stream_request
from servebench.load.metrics import summarize
from servebench.load.pinning import CpuMeter, IdlePolling, place_self, polling_when_idle
from servebench.load.records import RequestRecord
from servebench.load.schedule import arrival_offsets
from servebench.load.server_metrics import scrape_counter
from servebench.load.steady import WARMUP_SEED_OFFSET, WarmupOutcome, warm_until_steady
from servebench.load.workload import Workload, request_body

RESULT_VERSION = 1
PATHS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}


@dataclass
class LiveCounts:
    """Read by a progress display from another thread; written only by the event loop."""

    sent: int = 0
    done: int = 0
    failed: int = 0
    total: int | None = None


def workload_for(config: LoadConfig, data_seed: int) -> Workload:
    return Workload(endpoint=config.endpoint, input_len=config.input_len, output_len=config.output_len,
                    vocab_size=config.vocab_size, data_seed=data_seed, tokenizer=config.tokenizer,
                    prompts_file=config.prompts, sharegpt_file=config.sharegpt, spec=config.workload,
                    max_context=config.max_context)


def run_load(config: LoadConfig, live: LiveCounts | None = None) -> dict:
    """Run the load and return {"version", "config", "t0", "summary", "requests"}."""
    workload = workload_for(config, config.effective_data_seed)
    offsets = None
    if config.replay:
        trace_offsets = workload.offsets(config.rate)
        assert trace_offsets is not None  # a trace workload (config.replay) has its own schedule
        offsets = replay_schedule(trace_offsets, config.requests, config.duration)
    elif config.rate is not None:
        offsets = arrival_offsets(config.rate, config.arrival, config.effective_schedule_seed,
                                  count=config.requests, duration=config.duration, burstiness=config.burstiness)
    count = len(offsets) if offsets is not None else config.requests
    if config.sessions is not None:
        whole = config.sessions.sessions * config.sessions.turns
        count = whole if config.duration is None else None  # with a duration: turns made as they are sent
        count = min(count, config.requests) if count is not None and config.requests else count
    if count is None:
        workload.check_bounded()
    prepared = [_prepare(config, workload, i) for i in range(count)] if count is not None else None
    live = live or LiveCounts()
    live.total = count
    notes = place_self(config.cpus, config.nice)
    with polling_when_idle(config.idle_poll) as idle, asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(_run(config, workload, offsets, prepared, live, notes, idle))


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


# body, prompt tokens, answer tokens asked, prefix group, session, turn, whether the prompt is token ids
Prepared = tuple[bytes, int | None, int, int | None, int | None, int | None, bool]


def _prepare(config: LoadConfig, workload: Workload, index: int) -> Prepared:
    item = workload.item(index)
    token_ids = isinstance(item.prompt, list) and bool(item.prompt) and isinstance(item.prompt[0], int)
    return (request_body(config.model, config.endpoint, item, config.request_extras), item.expected_input_tokens,
            item.output_len, item.group, item.session, item.turn, token_ids)


def write_result(result: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=1, allow_nan=False))
    tmp.replace(path)


def load_result(path: Path) -> dict:
    return json.loads(Path(path).read_text())


async def _run(config: LoadConfig, workload: Workload, offsets: list[float] | None,
               prepared: list[Prepared] | None, live: LiveCounts, notes: list[str], idle: IdlePolling) -> dict:
    endpoint = Endpoint(config.base_url.rstrip("/") + PATHS[config.endpoint], config.stream_token_counts,
                        config.prompt_cache_tokens)
    pool = ConnectionPool(endpoint)
    records: list[RequestRecord] = []
    exact: set[int] = set()  # requests whose prompt is token ids: the server must count exactly those
    warmed = await _warm_up(config, pool, endpoint) if config.warm_until_steady else None
    tokens_before = _server_tokens(config)  # after the warm-up: its tokens are not the cell's
    cache_before = _prefix_cache(config)
    started_wall = datetime.now(timezone.utc)

    def make(index: int, client: int | None, scheduled: float) -> tuple[RequestRecord, bytes]:
        body, expected, output_len, group, session, turn, token_ids = prepared[index] if prepared is not None \
            else _prepare(config, workload, index)
        if token_ids:
            exact.add(index)
        record = RequestRecord(index=index, warmup=index < config.warmup, client=client, scheduled_s=scheduled,
                               expected_input_tokens=expected, requested_output_tokens=output_len,
                               prefix_group=group, session=session, turn=turn)
        records.append(record)
        return record, endpoint.request_bytes(body)

    async def one(record: RequestRecord, payload: bytes) -> None:
        live.sent += 1
        await stream_request(pool, payload, record, config.timeout_s)
        finished.add(record.index)
        live.done += 1
        live.failed += record.error_kind is not None

    finished: set[int] = set()

    gc.collect()
    gc.freeze()  # no collector pauses inside the measurement
    gc.disable()
    meter = CpuMeter()
    meter.start()
    t0 = time.monotonic()
    try:
        if config.sessions is not None:
            sending = _sessions_loop(config, workload, t0, make, one)
        elif offsets is not None:
            sending = _open_loop(config, offsets, t0, make, one)
        else:
            sending = _closed_loop(config, t0, make, one)
        hung = await _unless_hung(sending, config, lambda: _last_activity(records))
    finally:
        gc.enable()
        gc.unfreeze()
        pool.close()
    if hung is not None:
        _mark_hung(records, finished, hung, t0, config)
    client = meter.usage(notes) | {"idle_poll_cpus": idle.cpus, "idle_poll_off": idle.why_not}
    tokens_after = _server_tokens(config) if hung is None else None  # a hung server answers no /metrics
    records.sort(key=lambda r: r.index)
    for record in records:
        record.shift(t0)
    summary = summarize(records, judged_config(config, offsets), client)
    _add_prompt_check(summary, [r for r in records if r.index in exact])
    if warmed is not None:
        summary["warm_until_steady"] = warmed.model_dump()
    if config.workload is not None:
        summary["workload"] = {"kind": config.workload.kind, "name": config.workload.label}
    if config.sessions is not None:
        summary["turns"] = per_turn(records)
    server_tokens = tokens_after - tokens_before if tokens_before is not None and tokens_after is not None else None
    summary["server_output_tokens"] = server_tokens
    summary["client_output_tokens"] = sum(r.output_tokens or 0 for r in records)
    _add_counter_check(summary, server_tokens)
    if config.prefix_cache_counters:
        summary["prefix_cache_hit_rate"] = hit_rate(cache_before, _prefix_cache(config) if hung is None else None)
    if config.prompt_cache_tokens:
        summary["prompt_cache_tokens"] = cache_counts(records)
        if not config.prefix_cache_counters:
            summary["prefix_cache_hit_rate"] = response_hit_rate(summary["prompt_cache_tokens"])
    if hung is not None:
        summary["hung"] = _hung_summary(hung, t0, config, records, finished)
        summary["valid"] = False
        summary["invalid_reasons"].append(summary["hung"]["reason"])
    return {
        "version": RESULT_VERSION,
        "config": config.model_dump(mode="json"),
        "t0": {"monotonic": t0, "wall": started_wall.isoformat()},
        "summary": summary,
        "requests": [r.to_dict() for r in records],
    }


async def _warm_up(config: LoadConfig, pool: ConnectionPool, endpoint: Endpoint) -> WarmupOutcome:
    """Warm-up requests at the cell's concurrency until the server is steady (servebench/load/steady.py):
    prompts of another data seed, sent before the measurement starts and left out of its records."""
    steady = config.warm_until_steady
    assert steady is not None  # `_run` warms up only when it is set
    workload = workload_for(config, config.effective_data_seed + WARMUP_SEED_OFFSET)

    async def send(index: int) -> RequestRecord:
        body, expected, output_len, *_ = _prepare(config, workload, index)
        record = RequestRecord(index=index, warmup=True, scheduled_s=time.monotonic(),
                               expected_input_tokens=expected, requested_output_tokens=output_len)
        await stream_request(pool, endpoint.request_bytes(body), record, config.timeout_s)
        return record

    return await warm_until_steady(steady, config.clients, config.rate, send)


async def _unless_hung(sending, config: LoadConfig, activity) -> tuple[float, float] | None:
    """Run the sending coroutine; with a health URL and a hang limit, stop it once the server has
    shown no sign of life for that long (`health.hung_since`). None, or (its last sign of life, when
    the load was stopped) as monotonic times."""
    if not (config.health_url and config.hang_after_s):
        await sending
        return None
    load = asyncio.ensure_future(sending)
    watch = asyncio.ensure_future(hung_since(config.health_url, config.hang_after_s, activity))
    await asyncio.wait({load, watch}, return_when=asyncio.FIRST_COMPLETED)
    if not load.done() and watch.result() is None:  # the watch broke: the load runs on, unjudged
        await load
    if load.done():
        watch.cancel()
        await asyncio.gather(watch, return_exceptions=True)
        load.result()  # the load's own exception, if it raised
        return None
    load.cancel()
    await asyncio.gather(load, return_exceptions=True)
    last_sign = watch.result()
    assert last_sign is not None  # a None result awaited the load above, and so returned
    return last_sign, time.monotonic()


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
                  finished: set[int]) -> dict:
    last_answer, stopped = hung
    in_flight = len(records) - len(finished)
    planned = config.requests
    unsent = f", {planned - len(records)} never sent" if planned is not None else ""
    return {"last_answer_s": round(last_answer - t0, 3), "stopped_s": round(stopped - t0, 3),
            "in_flight": in_flight, "sent": len(records),
            "reason": f"the server hung: {config.health_url} unanswered since {max(last_answer - t0, 0.0):.1f} s "
                      f"(limit {config.hang_after_s:g} s); the load stopped at {stopped - t0:.1f} s with "
                      f"{in_flight} requests in flight{unsent}"}


async def _open_loop(config: LoadConfig, offsets: list[float], t0: float, make, one) -> None:
    cap = asyncio.Semaphore(config.clients) if config.clients else None

    async def capped(cap: asyncio.Semaphore, record: RequestRecord, payload: bytes) -> None:
        async with cap:
            await one(record, payload)

    tasks = []
    for index, offset in enumerate(offsets):
        due = t0 + offset
        delay = due - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        record, payload = make(index, None, due)
        tasks.append(asyncio.ensure_future(capped(cap, record, payload) if cap else one(record, payload)))
    await asyncio.gather(*tasks)


async def _sessions_loop(config: LoadConfig, workload: Workload, t0: float, make, one) -> None:
    """`clients` conversations at once (default: all): each client takes a session no client has started yet and
    sends its turns in order, each when the answer before it is complete and the think time has passed (its
    scheduled time; a turn is never sent before it). No new turn after `duration`, none past `requests`."""
    spec = config.sessions
    assert spec is not None  # `_run` calls it for a sessions workload only
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
                while (delay := due - time.monotonic()) > 0:  # the loop's timers may wake up to 1 ms early
                    await asyncio.sleep(delay)
                record, payload = make(index, client_id, due)
                await one(record, payload)
                due = time.monotonic() + workload.think_s(session, turn)

    await asyncio.gather(*(client(i) for i in range(min(config.clients or spec.sessions, spec.sessions))))


def per_turn(records: list[RequestRecord]) -> list[dict]:
    """Per turn of a sessions workload: requests, those answered, the mean prompt length the server
    counted and TTFT percentiles (a growing context shows as both rising with the turn)."""
    from servebench.load.metrics import percentile, ttft

    turns: dict[int, list[RequestRecord]] = {}
    for record in records:
        if record.turn is not None:
            turns.setdefault(record.turn, []).append(record)
    rows = []
    for turn in sorted(turns):
        answered = [r for r in turns[turn] if r.ok and ttft(r) is not None]
        ttfts = sorted(1000 * t for t in map(ttft, answered) if t is not None)  # (all of them: answered)
        prompts = [r.input_tokens for r in answered if r.input_tokens is not None]
        rows.append({"turn": turn, "requests": len(turns[turn]), "completed": len(answered),
                     "input_tokens_mean": sum(prompts) / len(prompts) if prompts else None,
                     "ttft_p50_ms": percentile(ttfts, 50) if ttfts else None,
                     "ttft_p99_ms": percentile(ttfts, 99) if ttfts else None})
    return rows


async def _closed_loop(config: LoadConfig, t0: float, make, one) -> None:
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


def _server_tokens(config: LoadConfig) -> float | None:
    """Read outside the measured window, so a blocking call costs the measurement nothing."""
    if not config.token_counter:
        return None
    return _summed_counter(config, config.token_counter)


def _summed_counter(config: LoadConfig, name: str) -> float | None:
    """A counter summed over the servers that hold it (a balancer's replicas); None if one has none."""
    values = [scrape_counter(url, name) for url in config.metrics_urls or [config.base_url]]
    return None if any(v is None for v in values) else sum(v for v in values if v is not None)


def _prefix_cache(config: LoadConfig) -> tuple[float | None, float | None] | None:
    """The server's prefix-cache (queries, hits) counters now, read outside the measured window."""
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


def cache_counts(records: list[RequestRecord]) -> dict:
    """The prompt tokens the server's responses say it reused from its prefix cache and processed, summed over
    the run's requests that said both (as the counters', the run's every request: warm-up ones too)."""
    told = [r for r in records if r.cached_input_tokens is not None and r.processed_input_tokens is not None]
    return {"requests": len(told), "cached": sum(r.cached_input_tokens for r in told),
            "processed": sum(r.processed_input_tokens for r in told)}


def response_hit_rate(counts: dict) -> float | None:
    """Prompt tokens reused from the cache / prompt tokens (cached + processed), over the responses that said
    (None: none did, or their prompts were empty)."""
    total = counts["cached"] + counts["processed"]
    return round(counts["cached"] / total, 4) if total > 0 else None


def _add_prompt_check(summary: dict, token_id_requests: list[RequestRecord]) -> None:
    """Invalid when the server counted a token-id prompt as other than its length (it added or dropped
    tokens: the lengths the workload asked for were not the lengths served)."""
    wrong = [r for r in token_id_requests if r.input_tokens is not None and r.expected_input_tokens is not None
             and r.input_tokens != r.expected_input_tokens]
    summary["prompt_token_mismatches"] = len(wrong)
    if wrong:
        first = wrong[0]
        summary["valid"] = False
        summary["invalid_reasons"].append(
            f"{len(wrong)} prompts of token ids were counted otherwise by the server (request {first.index}: "
            f"{first.expected_input_tokens} sent, {first.input_tokens} counted)")


def _add_counter_check(summary: dict, server_tokens: float | None) -> None:
    """Invalid when the server's own counter disagrees with the tokens the client counted. Not
    checked when requests failed: the server counts what it generated for them before the error
    (a KV cache that overflowed mid-sequence), which the client never receives as a completion."""
    if server_tokens is not None and summary["failed"]:
        summary["counter_check"] = (f"skipped: {summary['failed']} requests failed; the server's counter holds "
                                    "tokens it generated for them")
        return
    if server_tokens is not None and round(server_tokens) != summary["client_output_tokens"]:
        summary["valid"] = False
        summary["invalid_reasons"].append(
            f"server counter says {server_tokens:.0f} tokens were generated, the client counted "
            f"{summary['client_output_tokens']} (another client on the server, or lost events)")
