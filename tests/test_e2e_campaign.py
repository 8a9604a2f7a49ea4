"""End to end: a reduced campaign through the Prefect flow with real vLLM and DuckDB.

Slow (engine build on first use, ~1 min server start-up); everything is real: the engine
venv, the vLLM server, the Prefect test server, the load generator and the warehouse.
"""

from pathlib import Path

import psutil
import pytest

from servebench import warehouse
from servebench.processes import shm_entries
from tests.support.processes import engine_processes
from servebench.campaign.loading import load_campaign

CAMPAIGN = Path(__file__).parent / "campaigns" / "good" / "e2e.yaml"
pytestmark = [pytest.mark.e2e, pytest.mark.vllm, pytest.mark.root]  # root: the generator's nice -10


def test_campaign_lands_every_cell_and_leaves_nothing_behind(isolated):
    from tests.support.prefect_session import session_api_url

    from servebench.flows.campaign import campaign_run

    assert engine_processes() == [], "an engine process was already running before the test"
    shm_before = shm_entries()
    session_api_url()  # the flow reports to the session's Prefect server
    outcome = campaign_run(campaign_file=str(CAMPAIGN), warehouse_path=str(isolated))
    assert outcome["status"] == "completed", outcome

    campaign = load_campaign(CAMPAIGN)
    con = warehouse.connect(isolated, read_only=True)
    cells = con.execute("select cell_key, status, client_output_tokens, server_output_tokens from cells "
                        "where run_id = ? order by cell_key", [outcome["run_id"]]).fetchall()
    assert [c[0] for c in cells] == ["tp1.c2.r0", "tp1.rate4.r0"]
    assert all(c[1] == "completed" for c in cells)
    counts = con.execute("select cell_key, count(*), min(output_tokens), max(output_tokens), "
                         "count(error_kind), min(input_tokens) from requests join cells using (cell_id) "
                         "group by cell_key order by cell_key").fetchall()
    for key, n, lo, hi, errors, input_tokens in counts:
        assert n == campaign.load.requests, key
        assert lo == hi == campaign.load.output_len, key
        assert errors == 0 and input_tokens == campaign.load.input_len, key
    for key, status, client_tokens, server_tokens in cells:
        # the client's usage-based count equals the server's own generation-token counter
        assert client_tokens == server_tokens == campaign.load.requests * campaign.load.output_len, key
    # the server ran on CPU 0, the generator on CPU 1 (its own, at raised priority), and both cells are valid
    placed = con.execute("select cell_key, client_cpus, client_nice, client_cpu_fraction, valid, correctness "
                         "from cells order by cell_key").fetchall()
    for key, cpus, nice, busy, valid, correctness in placed:
        assert (cpus, nice, valid, correctness) == ("1", -10, True, "reference"), placed
        assert 0 < busy < 0.8, placed
    server = con.execute("select port, status, ready_seconds, stopped_at from servers").fetchone()
    assert server[1] == "ready" and server[2] > 0 and server[3] is not None
    run = con.execute("select status, spec_hash, build_key from runs").fetchone()
    assert run[0] == "completed" and run[1] == campaign.spec_hash() and run[2]
    assert con.execute("select count(*) from nodes").fetchone()[0] == 1
    assert con.execute("select count(*) from builds").fetchone()[0] == 1
    # telemetry: the node sampled from launch (model load included), scrapes placed in cells
    first_sample, cpu = con.execute("select min(t_mono), avg(cpu_pct) from node_samples").fetchone()
    first_cell = con.execute("select min(t0_monotonic) from cells").fetchone()[0]
    assert first_sample < first_cell - 10 and 0 < cpu <= 100
    # a cell longer than the scrape period (1 s) holds scrapes; a shorter one may not
    kv = con.execute("select k.cell_key, k.samples, c.t_end_monotonic - c.t0_monotonic from cell_kv k "
                     "join cells c using (cell_id)").fetchall()
    assert kv and all(samples >= 1 for _, samples, seconds in kv if seconds > 2.0), kv
    assert sum(samples for _, samples, _ in kv) >= 1, kv
    assert con.execute("select kv_capacity_tokens from servers").fetchone()[0] > 0
    con.close()
    assert Path(outcome["report"]).exists()
    assert len(list((Path(outcome["report"]).parent / "charts").glob("*.png"))) >= 5

    # nothing left behind: no engine process, no listener on the server's port, no new /dev/shm entry
    assert engine_processes() == []
    listening = {c.laddr.port for c in psutil.net_connections("tcp") if c.status == psutil.CONN_LISTEN}
    assert server[0] not in listening
    assert shm_entries() - shm_before == set()
