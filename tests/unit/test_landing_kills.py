"""A cell's landing and an attempt's supersede killed at each of their steps, then resumed: every cell
once, with all its requests, and every measurement of it in `cell_attempts`.

The kill is real: the landing (or the move of a superseded attempt's files) runs in a forked child
that SIGKILLs itself at the step (`landing.landing_step`, `cells.supersede_step`), so nothing of
Python's unwinding (no rollback, no `finally`) runs, as when the orchestrator is killed. The resume is
what `servebench resume` does for a cell: the run's landed cells read from the warehouse, then
`land_result_file` (a result the killed run left), else the cell measured again (its result written
as the load generator writes it, CSV then JSON, and landed as `run_one_cell` lands it). The warehouse
is a real DuckDB file; the results are a real load generator's against a fake server.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from servebench import warehouse
from servebench.campaign.loading import parse_campaign
from servebench.campaign.outcome import CellOutcome, measured_outcome
from servebench.config.campaign import Campaign
from servebench.config.sweep import Cell, expand
from servebench.load import LoadConfig, run_load_result
from servebench.load.records import write_requests_csv
from servebench.load.result import write_result
from servebench.orchestration import cells
from servebench.orchestration.context import RunContext
from servebench.serving.cell_load import requests_csv_path
from servebench.warehouse import landing
from servebench.warehouse.sink import RunResults
from tests.support.fake_openai_server import FakeServer

CAMPAIGN = """
name: kills
provider: {kind: local, nodes: [{name: n0, cpus: [0]}]}
model: {generate: tiny-llama}
modes: [{name: a}]
load: {clients: [1], requests: 4}
validity: {retries: 2}
"""
REQUESTS = 4
INVALID = CellOutcome(status="completed", error=None, slo_met=None, invalid_reasons=["x"])  # to be measured again
LANDING_STEPS = ["begin", "deleted", "cell", "requests", "attempts", "committed"]
SUPERSEDE_STEPS = ["before", "marked", "csv", "json", "done"]  # before: killed before the supersede began


@dataclass
class Run:
    """What the cell functions read of a RunContext: the campaign, the run's directory, its results
    and the verdicts landed so far."""

    campaign: Campaign
    run_dir: Path
    results: RunResults
    statuses: dict[str, str] = field(default_factory=dict)
    invalid: dict[str, list[str]] = field(default_factory=dict)
    signalled: set[str] = field(default_factory=set)

    def record(self, cell: Cell, outcome: CellOutcome) -> None:
        RunContext.record(self, cell, outcome)


@pytest.fixture(scope="module")
def result() -> dict:
    """A real load generator's result (the JSON form), of REQUESTS requests."""
    config = LoadConfig(base_url="", model="m", clients=1, requests=REQUESTS, input_len=5, output_len=4,
                        vocab_size=100, timeout_s=5, token_counter="",
                        request_extras={"ignore_eos": True, "stream_options": {"include_usage": True}})
    with FakeServer() as server:
        return run_load_result(config.model_copy(update={"base_url": server.url})).model_dump(mode="json")


@pytest.fixture
def run(tmp_path: Path) -> Run:
    campaign = parse_campaign(CAMPAIGN)
    results = RunResults(str(tmp_path / "w.duckdb"), "r1")
    results.started(landing.RunRecord(campaign="kills", spec_hash=campaign.spec_hash(), spec_text=CAMPAIGN,
                                      spec_normalized={}, campaign_file="c.yaml", run_dir=tmp_path))
    (tmp_path / "cells").mkdir()
    return Run(campaign, tmp_path, results)


def the_cell(run: Run) -> Cell:
    return expand(run.campaign)[0]


def measured(run: Run, cell: Cell, result: dict) -> None:
    """The load generator's files for one measurement of the cell: its requests, then its JSON."""
    output = cells.result_file(run, cell)
    write_requests_csv(result["requests"], Path(requests_csv_path(str(output))))
    write_result(result, output)


def killed_at(step: str, hook: str, action: Callable[[], object]) -> None:
    """`action` in a forked child that SIGKILLs itself when `hook` (a module's step hook) reaches
    `step`; the child must die by that signal."""
    module = cells if hook == "supersede_step" else landing
    pid = os.fork()
    if pid == 0:  # the child: no pytest teardown, no unwinding, ever
        try:
            def kill(reached: str) -> None:
                if reached == step:
                    os.kill(os.getpid(), signal.SIGKILL)
            setattr(module, hook, kill)
            action()
        finally:
            os._exit(3)  # the step was never reached
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, f"{step}: child status {status}"


def resumed(run: Run, cell: Cell, result: dict) -> Run:
    """A resume of the run for this cell: what the warehouse holds, the cell's result file landed if
    the killed run left one, else the cell measured again and landed."""
    again = Run(run.campaign, run.run_dir, run.results, statuses=run.results.cell_statuses())
    if not cells.land_result_file(again, cell) and cell.key not in again.statuses:
        cells.superseded_attempts(again, cell)  # as run_one_cell does first: the attempts it numbers after
        measured(again, cell, result)
        outcome = measured_outcome(run.campaign, cell, result["summary"])
        cells.land_measured_cell(again, cell, result, outcome, started=None)
    return again


def landed(run: Run) -> tuple[list[tuple], list[tuple], int]:
    """The run's cells (key, attempts, requests), its attempts (key, attempt, superseded, result file's
    name) and how many request rows it has."""
    con = warehouse.connect(run.results.warehouse, read_only=True)
    try:
        cell_rows = con.execute("select cell_key, attempts, (select count(*) from requests r "
                                "where r.cell_id = c.cell_id) from cells c order by cell_key").fetchall()
        attempt_rows = con.execute("select cell_key, attempt, superseded, result_path from cell_attempts "
                                   "order by cell_key, attempt").fetchall()
        requests = con.execute("select count(*) from requests").fetchone()[0]
    finally:
        con.close()
    return cell_rows, [(k, a, s, Path(p).name) for k, a, s, p in attempt_rows], requests


def no_marker_left(run: Run) -> None:
    assert list((run.run_dir / "cells").glob("*.superseding")) == []


@pytest.mark.parametrize("step", LANDING_STEPS)
def test_a_cell_killed_at_each_step_of_its_landing_is_landed_once_with_its_attempts_by_resume(
        run: Run, result: dict, step: str):
    """The cell measured twice (its first attempt superseded), its result on disk, the orchestrator
    killed while landing it: the resume lands it (or finds it landed) with both attempts."""
    cell = the_cell(run)
    measured(run, cell, result)
    cells.supersede_attempt(run, cell, 0, INVALID)
    measured(run, cell, result)
    outcome = measured_outcome(run.campaign, cell, result["summary"])
    killed_at(step, "landing_step",
              lambda: cells.land_measured_cell(run, cell, result, outcome, started=None))
    before, _, _ = landed(run)
    assert before == ([] if step != "committed" else [(cell.key, 2, REQUESTS)])  # all of the cell or none of it

    again = resumed(run, cell, result)
    key = cell.key
    assert landed(run) == ([(key, 2, REQUESTS)],
                           [(key, 0, True, f"{key}.attempt0.json"), (key, 1, False, f"{key}.json")], REQUESTS)
    assert again.statuses == {key: "completed"}
    no_marker_left(run)


@pytest.mark.parametrize("step", SUPERSEDE_STEPS)
def test_an_attempt_killed_at_each_step_of_its_supersede_leaves_the_old_attempt_or_the_new_state(
        run: Run, result: dict, step: str):
    """The cell's first measurement invalid, the orchestrator killed while moving its files aside:
    killed before the move was recorded, the resume lands that measurement as the cell's (its
    requests with it); killed after, the move is finished and the cell measured again, its first
    measurement a superseded attempt with both its files."""
    cell = the_cell(run)
    key = cell.key
    measured(run, cell, result)
    if step != "before":
        killed_at(step, "supersede_step", lambda: cells.supersede_attempt(run, cell, 0, INVALID))
    resumed(run, cell, result)
    if step == "before":  # the old attempt, complete
        assert landed(run) == ([(key, 1, REQUESTS)], [(key, 0, False, f"{key}.json")], REQUESTS)
        assert not cells.attempt_file(cells.result_file(run, cell), 0).exists()
    else:  # the new state: the first attempt aside with its requests, the cell measured again
        assert landed(run) == ([(key, 2, REQUESTS)],
                               [(key, 0, True, f"{key}.attempt0.json"), (key, 1, False, f"{key}.json")], REQUESTS)
        kept = cells.attempt_file(cells.result_file(run, cell), 0)
        assert kept.exists() and Path(requests_csv_path(str(kept))).exists()
    no_marker_left(run)


def test_a_cell_that_fails_after_a_superseded_attempt_lands_that_attempt_with_it(run: Run, result: dict):
    cell = the_cell(run)
    measured(run, cell, result)
    cells.supersede_attempt(run, cell, 0, INVALID)
    cells.land_failed_cell(run, cell, "server gone")
    assert landed(run) == ([(cell.key, 1, 0)], [(cell.key, 0, True, f"{cell.key}.attempt0.json")], 0)


def test_a_result_whose_requests_csv_is_gone_lands_its_requests_from_the_json(run: Run, result: dict):
    cell = the_cell(run)
    measured(run, cell, result)
    Path(requests_csv_path(str(cells.result_file(run, cell)))).unlink()
    resumed(run, cell, result)
    assert landed(run) == ([(cell.key, 1, REQUESTS)], [(cell.key, 0, False, f"{cell.key}.json")], REQUESTS)


def test_a_superseded_attempt_read_back_is_judged_as_its_cell_was(run: Run, result: dict):
    """Another process's share of the server's cores makes a measurement invalid in the orchestrator,
    not in its file: the attempt read back from its file says so, as the verdict that superseded it did."""
    cell = the_cell(run)
    busy = {**result, "summary": {**result["summary"], "node_cpu": [
        {"node": "n0", "cores": "0", "seconds": 3.0, "server_share": 0.1, "servebench_share": 0.0,
         "foreign_share": 0.9, "top_foreign": "pid 1 (x)"}]}}
    measured(run, cell, busy)
    cells.supersede_attempt(run, cell, 0, INVALID)
    (attempt,) = cells.superseded_attempts(run, cell)
    assert attempt.summary["valid"] is False and any("other processes took 90%" in reason
                                                     for reason in attempt.summary["invalid_reasons"])
