"""End to end: a reduced campaign run as a user runs it, `servebench run` in a session of its own,
with real vLLM, the Prefect flow and DuckDB, at a real model shape, and Ctrl-C'd in its last cell.

Slow (engine build on first use, ~1 min a server start-up); everything is real: the engine venv, the
vLLM servers, the load generator, the warehouse, the report. The campaign is
tests/campaigns/good/e2e-real-shape.yaml, the suite's one real-shape run: the Qwen2.5-0.5B
shape (its dimensions and tied 151,936-token vocabulary) cut to 2 layers, in
bf16, served at TP=1 and at TP=2 on CPU 0, the generator on CPU 1 at nice -10; a closed point of 2
clients and an open one of 4 req/s per mode, with a third point, 8 req/s, during whose load (TP=2's,
the run's last cell) SIGINT goes to the whole process group, as a terminal sends it. Asserted: the
run exits 130 saying it was interrupted and lands as `interrupted`; the cells measured before it
landed complete (every request, exact token counts that equal the server's own counter, the
generator's CPU and priority, valid), TP=2's gate against TP=1 passed or close (bf16: the all-reduce
rounds differently), the servers' rows stopped, telemetry sampled from launch and scraped within the
cells, every cell's decode and prefill at a fraction of the node's roofline in (0, 1] and not clipped,
and the report rendered; the interrupted cell did not land as a measurement; and nothing is left
behind (no engine or generator process, no listener on a server's port, no new /dev/shm entry).

One vLLM campaign proves three things that would each need a server of their own: Ctrl-C stops the
servers and keeps the measured cells, the whole campaign runs in process, and a real shape's TP=1 and
TP=2 stand against the roofline.
"""

import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
import yaml

from servebench import warehouse
from servebench.campaign.loading import load_campaign
from servebench.processes import shm_entries
from tests.support.processes import engine_processes
from tests.support.waiting import wait_until

CAMPAIGN = Path(__file__).parents[1] / "campaigns" / "good" / "e2e-real-shape.yaml"
# the campaign's two points of each mode, measured before the interrupt (the modes run in order)
MEASURED = ["tp1.c2.r0", "tp1.rate4.r0", "tp1.rate8.r0", "tp2.c2.r0", "tp2.rate4.r0"]
INTERRUPTED = "tp2.rate8.r0"                # the point added here, last (rates run low to high): Ctrl-C in its load
pytestmark = [pytest.mark.vllm, pytest.mark.root]  # root: the generator's nice -10


def campaign_with_a_last_point(tmp_path: Path) -> Path:
    data = yaml.safe_load(CAMPAIGN.read_text())
    data["load"]["rates"] = [*data["load"]["rates"], 8]
    path = tmp_path / "e2e-real-shape.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_ctrl_c_in_the_last_cell_keeps_the_measured_cells_complete_and_leaves_nothing_behind(isolated, tmp_path):
    from tests.support.prefect_session import session_api_url

    assert engine_processes() == [], "an engine process was already running before the test"
    shm_before = shm_entries()
    campaign_file = campaign_with_a_last_point(tmp_path)
    runs = Path(os.environ["SERVEBENCH_RUNS"])  # the isolated fixture's
    env = {**os.environ, "SERVEBENCH_WAREHOUSE": str(isolated),
           "PREFECT_API_URL": session_api_url()}  # the session's Prefect server, not a temporary one of its own
    out = tmp_path / "servebench-run.out"
    with open(out, "w") as output_file:
        proc = subprocess.Popen([sys.executable, "-m", "servebench", "run", str(campaign_file)], env=env,
                                stdout=output_file, stderr=subprocess.STDOUT, text=True, start_new_session=True)

    def last_cell_under_way() -> list[Path]:
        assert proc.poll() is None, out.read_text()
        return list(runs.glob(f"*/cells/{INTERRUPTED}.progress"))  # its load generator writes it while it runs

    try:
        wait_until(last_cell_under_way, f"{INTERRUPTED}'s load to start", timeout_s=900, poll_s=0.1)
        os.killpg(proc.pid, signal.SIGINT)  # the whole group, as a terminal's Ctrl-C
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    output = out.read_text()
    assert proc.returncode == 130, output
    assert "interrupted" in output, output

    campaign = load_campaign(campaign_file)
    con = warehouse.connect(isolated, read_only=True)
    status, error, spec_hash, build_key = con.execute("select status, error, spec_hash, build_key from runs").fetchone()
    assert status == "interrupted" and "interrupted" in error, (status, error)
    assert spec_hash == campaign.spec_hash() and build_key
    cells = con.execute("select cell_key, status, client_output_tokens, server_output_tokens from cells "
                        "order by cell_key").fetchall()
    # what landed is complete: the two cells measured before, and the interrupted one only if its load
    # had ended, its result written, by the time the signal arrived (then it is a whole measurement too)
    landed = [c[0] for c in cells]
    assert landed in (MEASURED, sorted([*MEASURED, INTERRUPTED])), cells
    print(f"landed: {landed} ({INTERRUPTED} {'ended before' if INTERRUPTED in landed else 'cut by'} the interrupt)")
    assert all(c[1] == "completed" for c in cells), cells
    counts = con.execute("select cell_key, count(*), min(output_tokens), max(output_tokens), "
                         "count(error_kind), min(input_tokens) from requests join cells using (cell_id) "
                         "group by cell_key order by cell_key").fetchall()
    assert [c[0] for c in counts] == landed, counts
    for key, n, lo, hi, errors, input_tokens in counts:
        assert n == campaign.load.requests, key
        assert lo == hi == campaign.load.output_len, key
        assert errors == 0 and input_tokens == campaign.load.input_len, key
    for key, _, client_tokens, server_tokens in cells:
        # the client's usage-based count equals the server's own generation-token counter
        assert client_tokens == server_tokens == campaign.load.requests * campaign.load.output_len, key
    # the server ran on CPU 0, the generator on CPU 1 (its own, at raised priority), and the cells are valid
    placed = con.execute("select cell_key, client_cpus, client_nice, client_cpu_fraction, valid, correctness "
                         "from cells order by cell_key").fetchall()
    for key, cpus, nice, busy, valid, correctness in placed:
        assert (cpus, nice, valid) == ("1", -10, True), placed
        assert correctness == "reference" if key.startswith("tp1.") else correctness in ("passed", "close"), placed
        assert 0 < busy < 0.8, placed
    servers = con.execute("select mode, port, status, ready_seconds, stopped_at, correctness, served_dtype, "
                          "kv_capacity_tokens from servers order by mode").fetchall()
    assert [s[0] for s in servers] == ["tp1", "tp2"], servers
    for mode, _, status, ready, stopped, correctness, dtype, kv_capacity in servers:  # tp2: stopped by the unwinding
        assert status == "ready" and ready > 0 and stopped is not None and dtype == "bfloat16", servers
        assert kv_capacity > 0 and correctness in (("reference",) if mode == "tp1" else ("passed", "close")), servers
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
    # the node's roofline, measured on its servers' CPU, and every completed cell's fractions of it
    roof = con.execute("select mem_bandwidth_gbps, matmul_peak_gflops_bf16, matmul_peak_gflops_fp32, roofline_cpus, "
                       "roofline_emulated from nodes").fetchone()
    assert roof[0] > 0 and roof[1] > 0 and roof[2] > 0 and roof[3] == [0] and roof[4] is False, roof
    fractions = con.execute("select cell_key, decode_fraction, prefill_fraction, judged, above_roofline, note, "
                            "decode_gbps, prefill_gflops from cell_roofline where status = 'completed' "
                            "order by cell_key").fetchall()
    print(f"roofline: {roof}; fractions {fractions}")
    assert [f[0] for f in fractions] == landed, fractions
    for key, decode, prefill, judged, above, note, *_ in fractions:  # never clipped: within the measured roofs
        assert judged and not above and note is None and 0 < decode <= 1 and 0 < prefill <= 1, (key, fractions)
    # every landed cell's prediction beside it, from that roofline (docs/performance-model.md)
    predicted = con.execute("select cell_key, figures_source, throughput_ratio, tpot_p50_ms from cell_predictions "
                            "order by cell_key").fetchall()
    print(f"predictions: {predicted}")
    assert {key for key, *_ in predicted} >= set(landed), predicted
    assert all(source == "the roofline the run landed" and tpot > 0 for _, source, _, tpot in predicted), predicted
    assert all(ratio and ratio > 0 for key, _, ratio, _ in predicted if key in landed), predicted
    con.close()
    reports = list(runs.glob("*/report.html"))  # rendered while the interrupt unwinds, too
    assert len(reports) == 1, output
    assert len(list((reports[0].parent / "charts").glob("*.png"))) >= 5

    # nothing left behind: no engine or generator process, no listener on the server's port, no new /dev/shm entry
    assert engine_processes() == []
    listening = {c.laddr.port for c in psutil.net_connections("tcp") if c.status == psutil.CONN_LISTEN}
    assert not {s[1] for s in servers} & listening
    assert shm_entries() - shm_before == set()
