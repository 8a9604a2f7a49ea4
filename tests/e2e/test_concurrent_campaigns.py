"""Campaigns started at once on one warehouse.

Three `servebench run` processes (the test-only echo engine and plain provider) start within
a second of each other, all landing into one DuckDB file: `a` and `b` want different CPUs of
this host and run side by side, taking turns at the warehouse; `c` wants `a`'s CPU, says it
waits for `a`'s run, and starts serving only after `a` released it. Every cell of all three
lands with all of its requests.
"""

from __future__ import annotations

import re

from servebench import warehouse
from tests.support.campaign_process import cells_of, echo_campaign_dir, finish, servebench

CAMPAIGN = """
name: {name}
provider: {{kind: plain, nodes: [{{name: n, cpus: "{cpu}"}}]}}
engine: {{kind: echo, token_delay_ms: 20}}
model: {{path: model}}
modes: [{{name: single}}]
load: {{clients: [1, 2], rates: [10], requests: 16, input_len: 8, output_len: 8, client: {{cpus: shared}}}}
validity: {{on_invalid: warn}}
"""


def test_three_campaigns_at_once_land_everything_and_never_share_a_cpu(tmp_path):
    names = {"a": 0, "b": 1, "c": 0}
    echo_campaign_dir(tmp_path, {f"{name}.yaml": CAMPAIGN.format(name=name, cpu=cpu) for name, cpu in names.items()})
    db = str(tmp_path / "w.duckdb")
    processes = {name: servebench(tmp_path, "run", f"{name}.yaml", "--warehouse", db) for name in names}
    results = {name: finish(process) for name, process in processes.items()}
    for name, (code, out) in results.items():
        assert code == 0, (name, out)

    con = warehouse.connect(db, read_only=True)
    runs = {campaign: (run_id, started, ended) for campaign, run_id, started, ended in con.execute(
        "select campaign, run_id, started_at, ended_at from runs").fetchall()}
    servers = {run_id: (started, stopped) for run_id, started, stopped in con.execute(
        "select run_id, min(started_at), max(stopped_at) from servers group by run_id").fetchall()}
    con.close()
    assert set(runs) == {"a", "b", "c"}
    for name, (run_id, _, _) in runs.items():
        cells = cells_of(tmp_path / "w.duckdb", run_id)
        assert [key for key, _, _ in cells] == ["single.c1.r0", "single.c2.r0", "single.rate10.r0"], name
        assert all(status == "completed" and n == 16 for _, status, n in cells), (name, cells)

    # c waited for a's CPU 0, naming a's run, and served only once a had released it
    first, second = ("a", "c") if runs["a"][2] <= runs["c"][2] else ("c", "a")
    waited = results[second][1]
    assert re.search(rf"waiting for this-host/cpu0: held by .*{runs[first][0]}", waited), waited
    assert servers[runs[second][0]][0] >= servers[runs[first][0]][1]
    assert "waiting for this-host" not in results["b"][1]  # b's CPU was its own (it may wait for the warehouse)
