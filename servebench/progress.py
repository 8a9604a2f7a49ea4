"""Where a running campaign says what it is doing.

The flow reports stages and cells to the current reporter. The CLI installs a live
terminal display (which mode, which cell, how many left); deployments and tests get the
logging reporter. Kept out of the flow's parameters so flows stay plain and serializable.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Iterator, Protocol

from rich.console import Console, Group
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

log = logging.getLogger("servebench")


class Reporter(Protocol):
    def stage(self, text: str) -> None: ...
    def cells_planned(self, total: int) -> None: ...
    def cell_started(self, key: str, mode: str, done: int, total: int) -> None: ...
    def cell_finished(self, key: str, status: str, detail: str) -> None: ...


class LogReporter:
    def stage(self, text: str) -> None:
        log.info(text)

    def cells_planned(self, total: int) -> None:
        log.info("%d cells to run", total)

    def cell_started(self, key: str, mode: str, done: int, total: int) -> None:
        log.info("cell %s (mode %s): %d of %d done, %d left", key, mode, done, total, total - done)

    def cell_finished(self, key: str, status: str, detail: str) -> None:
        log.info("cell %s %s %s", key, status, detail)


class LiveReporter:
    """A progress bar over cells, the current stage, and one line per finished cell."""

    def __init__(self, console: Console):
        self.console = console
        self.progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("{task.fields[left]} left"), TimeElapsedColumn(), console=console)
        self.task = self.progress.add_task("starting", total=None, left="?")
        self.finished = Table.grid(padding=(0, 2))
        self.live = Live(Group(self.finished, self.progress), console=console, refresh_per_second=4)

    def stage(self, text: str) -> None:
        self.progress.update(self.task, description=text)

    def cells_planned(self, total: int) -> None:
        self.progress.update(self.task, total=total, completed=0, left=total)

    def cell_started(self, key: str, mode: str, done: int, total: int) -> None:
        self.progress.update(self.task, description=f"mode {mode} | cell {key}", completed=done,
                             left=total - done)

    def cell_finished(self, key: str, status: str, detail: str) -> None:
        colour = "green" if status == "completed" else "red"
        self.finished.add_row(f"[{colour}]{status}[/]", key, detail)
        task = self.progress.tasks[0]
        self.progress.update(self.task, completed=task.completed + 1,
                             left=max(0, (task.total or 0) - task.completed - 1))


_current: Reporter = LogReporter()


def reporter() -> Reporter:
    return _current


@contextlib.contextmanager
def live(console: Console | None = None) -> Iterator[Reporter]:
    global _current
    previous = _current
    live_reporter = LiveReporter(console or Console(stderr=True))
    _current = live_reporter
    try:
        with live_reporter.live:
            yield live_reporter
    finally:
        _current = previous
