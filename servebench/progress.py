"""Where a running campaign says what it is doing.

The flow reports stages and cells to the current reporter. The CLI installs a live
terminal display (which mode, which cell, how many left) when stderr is a terminal, and
plain timestamped lines otherwise (CI logs, `| cat`, nohup, a Prefect worker), where a
live display would print nothing useful; deployments and tests get the logging reporter.
Kept out of the flow's parameters so flows stay plain and serializable.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import IO, Callable, Iterator, Protocol

from rich.console import Console, Group
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

log = logging.getLogger("servebench")


class Reporter(Protocol):
    def stage(self, text: str) -> None: ...
    def note(self, text: str) -> None: ...
    def cells_planned(self, total: int) -> None: ...
    def cell_started(self, key: str, mode: str, done: int, total: int) -> None: ...
    def cell_finished(self, key: str, status: str, detail: str) -> None: ...


class LogReporter:
    def stage(self, text: str) -> None:
        log.info(text)

    def note(self, text: str) -> None:
        log.info(text)

    def cells_planned(self, total: int) -> None:
        log.info("%d cells to run", total)

    def cell_started(self, key: str, mode: str, done: int, total: int) -> None:
        log.info("cell %s (mode %s): %d of %d done, %d left", key, mode, done, total, total - done)

    def cell_finished(self, key: str, status: str, detail: str) -> None:
        log.info("cell %s %s %s", key, status, detail)


class PlainReporter:
    """One line per event with the time since the run started, flushed at once: readable in a
    CI log or a nohup file while the run goes on, and greppable afterwards.

    Writes the stream directly (not through rich), so long lines are never wrapped at the
    80 columns rich assumes for a non-terminal. A lock keeps lines whole when a task thread
    and the flow's thread report at the same moment."""

    def __init__(self, stream: IO[str], clock: Callable[[], float] = time.monotonic):
        self.stream = stream
        self.clock = clock
        self.started = clock()
        self.lock = threading.Lock()

    def line(self, text: str) -> None:
        with self.lock:
            self.stream.write(f"[{self.clock() - self.started:6.1f}s] {text}\n")
            self.stream.flush()

    def stage(self, text: str) -> None:
        self.line(f"stage: {text}")

    def note(self, text: str) -> None:
        self.line(f"  {text}")

    def cells_planned(self, total: int) -> None:
        self.line(f"{total} cells to run")

    def cell_started(self, key: str, mode: str, done: int, total: int) -> None:
        self.line(f"cell {key} (mode {mode}): {done} of {total} done, {total - done} left")

    def cell_finished(self, key: str, status: str, detail: str) -> None:
        self.line(f"cell {key} {status}: {detail}")


class LiveReporter:
    """A progress bar over cells, the current stage, one line per finished cell, and under the
    bar the latest note (e.g. the engine build's pip progress), cleared when the stage moves on."""

    def __init__(self, console: Console):
        self.console = console
        self.progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("{task.fields[left]} left"), TimeElapsedColumn(), console=console)
        self.task = self.progress.add_task("starting", total=None, left="?")
        self.finished = Table.grid(padding=(0, 2))
        self.latest_note = ""
        self.live = Live(console=console, refresh_per_second=4, get_renderable=self.render)

    def render(self) -> Group:
        if not self.latest_note:
            return Group(self.finished, self.progress)
        return Group(self.finished, self.progress, Text(self.latest_note, style="dim", no_wrap=True,
                                                        overflow="ellipsis"))

    def stage(self, text: str) -> None:
        self.latest_note = ""
        self.progress.update(self.task, description=text)

    def note(self, text: str) -> None:
        self.latest_note = text

    def cells_planned(self, total: int) -> None:
        self.progress.update(self.task, total=total, completed=0, left=total)

    def cell_started(self, key: str, mode: str, done: int, total: int) -> None:
        self.latest_note = ""
        self.progress.update(self.task, description=f"mode {mode} | cell {key}", completed=done,
                             left=total - done)

    def cell_finished(self, key: str, status: str, detail: str) -> None:
        colour = "green" if status == "completed" else "red"
        self.finished.add_row(f"[{colour}]{status}[/]", key, Text(detail))
        task = self.progress.tasks[0]
        self.progress.update(self.task, completed=task.completed + 1,
                             left=max(0, (task.total or 0) - task.completed - 1))


_current: Reporter = LogReporter()


def reporter() -> Reporter:
    return _current


def wants_live_display(console: Console) -> bool:
    """A live display redraws in place: only a real (not dumb) terminal shows it."""
    return console.is_terminal and not console.is_dumb_terminal


@contextlib.contextmanager
def live(console: Console | None = None) -> Iterator[Reporter]:
    """Make the console's display the current reporter for the block: the live display on a
    terminal, plain lines on the console's stream otherwise."""
    global _current
    console = console or Console(stderr=True)
    previous = _current
    if wants_live_display(console):
        live_reporter = LiveReporter(console)
        display: contextlib.AbstractContextManager = live_reporter.live
        _current = live_reporter
    else:
        _current = PlainReporter(console.file)
        display = contextlib.nullcontext()
    try:
        with display:
            yield _current
    finally:
        _current = previous
