"""Every run at a glance (`servebench runs --html`, runs/index.html after each run) and `servebench best` from a
run's cells under its campaign's SLO, on two synthetic nights (tp2-ray a third slower on the second).

Here the tests that start real components (servers, the testbed, qemu, a browser); the logic's own are in
tests/unit/test_runs_index.py."""

from __future__ import annotations

import re
from pathlib import Path

from servebench.cli import main

ECHO_CAMPAIGN = """
name: glance
provider: {kind: plain, nodes: [{name: a, cpus: "0"}]}
engine: {kind: echo, token_delay_ms: 1}
model: {path: model}
modes: [{name: single}]
load: {clients: [1, 2], requests: 6, input_len: 4, output_len: 4, client: {cpus: "1"}}
slo: {ttft_p99_ms: 2000}
validity: {on_invalid: warn}
"""


def test_a_run_writes_the_runs_index_beside_its_directory(isolated, tmp_path, monkeypatch, capsys):
    """Through the real flow (the test-only echo engine): after its report the run writes
    runs/index.html, its row linking the report, and `servebench best` names its mode per load point."""
    from tests.support.campaign_process import run_echo_campaign

    outcome = run_echo_campaign(tmp_path, isolated, monkeypatch, ECHO_CAMPAIGN)
    assert outcome["report"], outcome
    run_dir = Path(outcome["run_dir"])
    page = (run_dir.parent / "index.html").read_text()
    assert f"<td>{outcome['run_id']}</td><td>glance</td>" in page, page
    assert f'<a href="{run_dir.name}/report.html">report</a>' in page and "first run of the campaign" in page
    capsys.readouterr()
    assert main(["best", "--warehouse", str(isolated)]) == 0
    header, *points = capsys.readouterr().out.splitlines()
    assert "SLO ttft_p99_ms 2000" in header and len(points) == 2, (header, points)
    for line in points:  # best, or named as missing the SLO (a repeat the busy client made invalid)
        assert re.search(r"clients?\s+(single  \d|no mode met the SLO; missed the SLO: single \()", line), line
