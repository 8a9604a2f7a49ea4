"""The orchestrator SIGKILLed mid-campaign, then `servebench resume`.

`servebench run` is started as a process of its own (the test-only echo engine and plain
provider come in through SERVEBENCH_PLUGINS), killed with SIGKILL (its whole process group)
once two cells have results, and resumed. Asserted: the killed run left servers running (what
a resume must reclaim), the resumed run's cells are exactly the ones a clean run measures (the
campaign's plan: a clean run of it is every other campaign test's), each once, each with all its
requests and its attempts (`cell_attempts`); nothing of the run is left running; a finished run is
not resumed again, and `resume --failed` measures only failed cells. A capacity search killed midway
is finished by the resume, and the search it lands is the whole search's (the probes as cells, their
verdicts, the capacity). A test that fails before its resume stops what the killed run left
(`nothing_left`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from servebench import warehouse
from servebench.providers import node_tools, run_tag
from tests.support.campaign_process import cells_of, echo_campaign_dir, finish, servebench
from tests.support.resume import nothing_left, results
from tests.support.waiting import wait_until

CAMPAIGN = """
name: resume-me
provider: {kind: plain, nodes: [{name: a, cpus: "0"}, {name: b, cpus: "0"}]}
engine: {kind: echo, token_delay_ms: 40}
model: {path: model}
modes:
  - {name: single}
  - {name: split, pp: 2, executor: split}
load: {clients: [1, 2], rates: [8], requests: 12, input_len: 8, output_len: 8, client: {cpus: "1"}}
validity: {on_invalid: warn}   # timing verdicts depend on the machine; this test is about the plumbing
"""


def under_way(tmp_path: Path) -> list[Path]:
    """Progress files of cells whose load runs now: a load generator's, without a result yet."""
    return [path for path in (tmp_path / "runs").glob("*/cells/*.progress") if not path.with_suffix(".json").exists()]


@pytest.fixture
def campaign(tmp_path) -> Path:
    return echo_campaign_dir(tmp_path, {"campaign.yaml": CAMPAIGN}) / "campaign.yaml"


def test_a_sigkilled_orchestrator_is_resumed_to_a_clean_runs_cells_each_measured_once(campaign, tmp_path):
    with nothing_left(tmp_path) as started:
        sigkilled_and_resumed(campaign, tmp_path, started)


def planned_cells(campaign: Path) -> list[str]:
    """The keys of the cells a clean run of the campaign measures (`servebench plan`'s), sorted; the echo engine
    and the plain provider registered for the call only (a registry left so would show them to later tests)."""
    import servebench.engines
    import servebench.providers
    from servebench.campaign.loading import load_campaign
    from servebench.config.sweep import expand
    from tests.support.echo_engine import EchoEngine
    from tests.support.plain_provider import PlainProvider

    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(servebench.engines._ENGINES, EchoEngine.kind, EchoEngine)
        patch.setitem(servebench.providers._PROVIDERS, PlainProvider.kind, PlainProvider)
        return sorted(cell.key for cell in expand(load_campaign(campaign)))


def sigkilled_and_resumed(campaign: Path, tmp_path: Path, started: list[subprocess.Popen]) -> None:
    """The killed run and its resume (every process started goes in `started`)."""
    clean = planned_cells(campaign)
    assert len(clean) == 6, clean
    started.append(killed := servebench(tmp_path, "run", str(campaign), "--warehouse", str(tmp_path / "w.duckdb")))
    wait_until(lambda: len(results(tmp_path)) >= 2, "two cells of the run to land", timeout_s=300, poll_s=0.05)
    wait_until(lambda: under_way(tmp_path), "the next cell's load to start", timeout_s=300, poll_s=0.05)
    os.killpg(killed.pid, signal.SIGKILL)
    killed.wait(timeout=30)
    run_dirs = sorted((tmp_path / "runs").iterdir(), key=lambda d: d.stat().st_mtime)
    run_id = run_dirs[-1].name
    tag = f"{run_tag(run_id)}."
    left = node_tools._marked(node_tools._table(), tag, prefix=True)
    assert left, "the killed orchestrator left nothing running: nothing for resume to reclaim"

    started.append(resume := servebench(tmp_path, "resume", run_id, "--warehouse", str(tmp_path / "w.duckdb")))
    code, out = finish(resume)
    assert code == 0, out
    assert "reclaimed: this host: stopped" in out, out
    resumed = cells_of(tmp_path / "w.duckdb")
    assert [key for key, _, _ in resumed] == clean  # the cells a clean run measures, each once
    assert all(status == "completed" and n == 12 for _, status, n in resumed), resumed
    con = warehouse.connect(tmp_path / "w.duckdb", read_only=True)
    status, resumes = con.execute("select status, resumes from runs where run_id = ?", [run_id]).fetchone()
    attempts = con.execute("select cell_key, c.attempts, count(a.attempt), count(a.attempt) filter (not a.superseded) "
                           "from cells c left join cell_attempts a using (run_id, cell_key) group by all").fetchall()
    con.close()
    # every cell with its attempts, those landed from the killed run's files too; the last is the cell's
    assert len(attempts) == 6 and all(n == rows and last == 1 for _, n, rows, last in attempts), attempts
    note = json.loads(resumes)[-1]
    assert status == "completed" and note["kind"] == "resume" and note["status_before"] == "running", note
    assert 0 < len(note["measured"]) < 6 and set(note["measured"]).isdisjoint(note["landed_from_run_dir"]), note
    assert node_tools._marked(node_tools._table(), tag, prefix=True) == {}  # nothing of the run left

    started.append(again := servebench(tmp_path, "resume", run_id, "--warehouse", str(tmp_path / "w.duckdb")))
    code, out = finish(again)
    assert code != 0 and "finished (completed): nothing to resume" in out, out
    started.append(rerun := servebench(tmp_path, "resume", "--failed", run_id,
                                       "--warehouse", str(tmp_path / "w.duckdb")))
    code, out = finish(rerun)
    assert code == 0 and "0 to measure" in out, out
    assert cells_of(tmp_path / "w.duckdb") == resumed


