"""Drive one load run: open loop (scheduled arrivals), closed loop (N clients), or both
(arrivals with a concurrency cap). Records are kept in request order.
"""

from __future__ import annotations

import asyncio
import json
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import aiohttp

from servebench.load.client import completion_payload, send
from servebench.load.config import LoadConfig
from servebench.load.metrics import summarize
from servebench.load.records import RequestRecord
from servebench.load.schedule import arrival_offsets
from servebench.load.server_metrics import scrape_counter
from servebench.load.workload import token_prompt

RESULT_VERSION = 1
Progress = Callable[[int, int | None], None]


def run_load(config: LoadConfig, progress: Progress | None = None) -> dict:
    """Run the load and return {"version", "config", "t0", "summary", "requests"}."""
    return asyncio.run(_run(config, progress))


def write_result(result: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=1, allow_nan=False))
    tmp.replace(path)


async def _run(config: LoadConfig, progress: Progress | None) -> dict:
    url = config.base_url.rstrip("/") + "/v1/completions"
    records: list[RequestRecord] = []
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=10)
    started_wall = datetime.now(timezone.utc)
    t0 = time.monotonic()
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        tokens_before = await _server_tokens(session, config)
        def issue(index: int, client: int | None, scheduled: float):
            record = RequestRecord(index=index, warmup=index < config.warmup, client=client, scheduled_s=scheduled)
            records.append(record)
            prompt = token_prompt(index, config.input_len, config.vocab_size, config.data_seed)
            return record, send(session, url, completion_payload(config.model, prompt, config.output_len),
                                record, config.timeout_s)

        done = _Counter(progress, config.requests)
        if config.rate is not None:
            await _open_loop(config, t0, issue, done)
        else:
            await _closed_loop(config, t0, issue, done)
        tokens_after = await _server_tokens(session, config)
    records.sort(key=lambda r: r.index)
    for record in records:  # timestamps relative to t0
        for name in ("scheduled_s", "sent_s", "first_token_s", "last_token_s"):
            value = getattr(record, name)
            if value is not None:
                setattr(record, name, value - t0)
    summary = summarize(records, config.rate)
    summary["server_output_tokens"] = (tokens_after - tokens_before
                                       if tokens_before is not None and tokens_after is not None else None)
    summary["client_output_tokens"] = sum(r.output_tokens or 0 for r in records)
    return {
        "version": RESULT_VERSION,
        "config": config.model_dump(mode="json"),
        "t0": {"monotonic": t0, "wall": started_wall.isoformat()},
        "summary": summary,
        "requests": [r.to_dict() for r in records],
    }


async def _server_tokens(session: aiohttp.ClientSession, config: LoadConfig) -> float | None:
    if not config.token_counter:
        return None
    return await scrape_counter(session, config.base_url, config.token_counter)


async def _open_loop(config: LoadConfig, t0: float, issue, done: "_Counter") -> None:
    offsets = arrival_offsets(config.rate, config.arrival, config.schedule_seed,
                              count=config.requests, duration=config.duration)
    cap = asyncio.Semaphore(config.clients) if config.clients else None
    tasks = []
    for index, offset in enumerate(offsets):
        delay = t0 + offset - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(_capped(cap, issue, index, t0 + offset, done)))
    await asyncio.gather(*tasks)


async def _capped(cap: asyncio.Semaphore | None, issue, index: int, scheduled: float, done: "_Counter") -> None:
    if cap is None:
        _, coroutine = issue(index, None, scheduled)
        await coroutine
    else:
        async with cap:
            _, coroutine = issue(index, None, scheduled)
            await coroutine
    done.tick()


async def _closed_loop(config: LoadConfig, t0: float, issue, done: "_Counter") -> None:
    next_index = 0
    deadline = t0 + config.duration if config.duration else None

    async def client(client_id: int) -> None:
        nonlocal next_index
        while True:
            if config.requests is not None and next_index >= config.requests:
                return
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                return
            index = next_index
            next_index += 1
            _, coroutine = issue(index, client_id, now)
            await coroutine
            done.tick()

    await asyncio.gather(*(client(i) for i in range(config.clients)))


class _Counter:
    def __init__(self, progress: Progress | None, total: int | None):
        self.progress, self.total, self.count = progress, total, 0

    def tick(self) -> None:
        self.count += 1
        if self.progress:
            self.progress(self.count, self.total)


def load_result(path: Path) -> dict:
    return json.loads(Path(path).read_text())
