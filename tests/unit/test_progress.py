"""Progress where nobody watches a terminal: plain lines that appear as they happen, and an
engine build that says what pip is doing instead of going silent for minutes."""

import io
import sys
import time

from rich.console import Console

from servebench import progress
from servebench.builds.venv import run_step


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class FlushCounter(io.StringIO):
    def __init__(self) -> None:
        super().__init__()
        self.flushes = 0

    def flush(self) -> None:
        self.flushes += 1


def test_plain_reporter_writes_one_flushed_line_per_event_with_the_elapsed_time():
    clock, stream = FakeClock(), FlushCounter()
    plain = progress.PlainReporter(stream, clock)
    clock.now += 12.3
    plain.stage("building the engine venv")
    plain.note("pip: installing 143 packages")
    clock.now += 82.7
    plain.cells_planned(8)
    plain.cell_started("tp1.c1.r0", "tp1", 0, 8)
    clock.now += 6.2
    plain.cell_finished("tp1.c1.r0", "completed", "22 ok, 0 failed, 439.1 tok/s")
    assert stream.getvalue().splitlines() == [
        "[  12.3s] stage: building the engine venv",
        "[  12.3s]   pip: installing 143 packages",
        "[  95.0s] 8 cells to run",
        "[  95.0s] cell tp1.c1.r0 (mode tp1): 0 of 8 done, 8 left",
        "[ 101.2s] cell tp1.c1.r0 completed: 22 ok, 0 failed, 439.1 tok/s",
    ]
    assert stream.flushes == 5


def test_live_writes_plain_lines_when_the_console_is_not_a_terminal():
    stream = io.StringIO()
    before = progress.reporter()
    with progress.live(Console(file=stream)) as current:
        assert isinstance(current, progress.PlainReporter) and progress.reporter() is current
        current.stage("provisioning nodes with a description longer than eighty columns, never wrapped by rich")
    assert progress.reporter() is before
    assert stream.getvalue().rstrip("\n").endswith("stage: provisioning nodes with a description longer than "
                                                    "eighty columns, never wrapped by rich")


def test_live_shows_the_display_on_a_terminal_with_the_latest_note():
    stream = io.StringIO()
    with progress.live(Console(file=stream, force_terminal=True, width=120)) as current:
        assert isinstance(current, progress.LiveReporter)
        current.stage("building the engine venv")
        current.note("pip: installed 143 packages")
    assert "building the engine venv" in stream.getvalue()
    assert "pip: installed 143 packages" in stream.getvalue()


PIP_LINES = ["Collecting a==1", "  Downloading a-1.whl", "Collecting b", "Collecting c",
             "Installing collected packages: a, b, c", "Successfully installed a-1 b-2 c-3"]
PIP_LIKE = f"print(*{PIP_LINES!r}, sep='\\n')"


def test_a_build_step_streams_to_the_build_log_and_condenses_for_the_reporter(tmp_path):
    notes: list[str] = []
    with open(tmp_path / "build.log", "w") as out:
        code = run_step([sys.executable, "-c", PIP_LIKE], out, notes.append, "install engine packages",
                        time.monotonic())
    assert code == 0
    log = (tmp_path / "build.log").read_text().splitlines()
    assert log[0].startswith("$ ") and log[1:] == PIP_LINES
    assert notes == ["pip: installing 3 packages", "pip: installed 3 packages"]


def test_a_quiet_build_step_sends_heartbeats_with_its_last_output(tmp_path):
    quiet = "import sys, time; print('Collecting torch'); time.sleep(0.7); sys.exit(3)"
    notes: list[str] = []
    with open(tmp_path / "build.log", "w") as out:
        code = run_step([sys.executable, "-c", quiet], out, notes.append, "install engine packages",
                        time.monotonic(), heartbeat=0.2)
    assert code == 3
    assert len(notes) >= 2
    assert all(note.startswith("still building: ") for note in notes)
    assert "(step 'install engine packages', packages collected: 1); last output: Collecting torch" in notes[-1]
