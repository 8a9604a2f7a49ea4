"""Each stage of a run timed as it runs, and landed in `stage_timings` (migration 035).

A run at 32 hosts spends its time somewhere: in allocation, placement, server and sampler starts,
fetching results, release. `StageClock` times each stage the orchestration wraps in `stage(...)`:
its wall time, the CPU time the orchestrator process and the children it waited for (ssh, srun,
tar) spent over it, and at its end the orchestrator's threads and open TCP connections (its own
and its children's: ssh masters, srun clients); what it measured lands in one transaction by
`land_stage_timings`, so a stage that failed still has its row with its error. Measuring costs a
`getrusage` and a walk of this process's children at each stage's end: nothing per host.
"""

from __future__ import annotations

import contextlib
import resource
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone

import psutil

from .landing import Connection, Record, insert_row


class StageTiming(Record):
    """One stage as it ran (the columns of `stage_timings`, the run's id aside)."""

    seq: int
    stage: str
    subject: str | None = None
    hosts: int
    started_at: datetime
    seconds: float
    orchestrator_cpu_s: float | None = None
    orchestrator_threads: int | None = None
    open_connections: int | None = None
    ok: bool = True
    error: str | None = None


def orchestrator_cpu_s() -> float:
    """CPU seconds of this process and of the children it has waited for, user and system."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def open_connections() -> int | None:
    """TCP connections held by this process and its descendants (None: the system would not say)."""
    try:
        me = psutil.Process()
        family = [me, *me.children(recursive=True)]
    except psutil.Error:
        return None
    count = 0
    for process in family:
        try:
            count += len(process.net_connections(kind="tcp"))
        except psutil.Error:
            continue  # gone meanwhile, or not ours to read
    return count


@dataclass
class StageClock:
    """The stages of one run in the order they ran (`timings`), numbered from 0."""

    timings: list[StageTiming] = field(default_factory=list)

    @contextlib.contextmanager
    def stage(self, name: str, hosts: int, subject: str | None = None) -> Iterator[None]:
        """Time the block as stage `name` over `hosts` hosts; an exception is recorded and raised on."""
        started_at, started, cpu = datetime.now(timezone.utc), time.monotonic(), orchestrator_cpu_s()
        threads = threading.active_count()
        error: str | None = None
        try:
            yield
        except BaseException as exc:
            error = f"{type(exc).__name__}: {exc}"[:2000]
            raise
        finally:
            self.timings.append(StageTiming(
                seq=len(self.timings), stage=name, subject=subject, hosts=hosts, started_at=started_at,
                seconds=round(time.monotonic() - started, 4), orchestrator_cpu_s=round(orchestrator_cpu_s() - cpu, 4),
                orchestrator_threads=max(threads, threading.active_count()), open_connections=open_connections(),
                ok=error is None, error=error))


def land_stage_timings(con: Connection, run_id: str, timings: list[StageTiming]) -> None:
    """The run's stage rows, in one transaction; a stage landed again (a resumed run) replaces its row."""
    con.execute("begin transaction")
    try:
        for timing in timings:
            insert_row(con, "stage_timings", {"run_id": run_id, **timing.model_dump()}, conflict="or replace")
        con.execute("commit")
    except BaseException:
        con.execute("rollback")
        raise
