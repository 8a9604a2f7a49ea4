"""What makes a cell not judged or not alone: a hang watch that broke (the cell is invalid saying so),
the node sampler's count of who used the server's cores (real processes on a real core), the cell
window's shares from a samples file, the verdict on them; and a node's roofline measured again when
its cached figures are old or were taken on busy cores, landed with when and whether cached."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from servebench import warehouse
from servebench.builds.venv import EngineBuild
from servebench.campaign.outcome import foreign_cpu_reasons, judge_foreign_cpu
from servebench.load import LoadConfig, run_load
from servebench.load.result import LoadResult
from servebench.providers import Node
from servebench.roofline import benchmark as roofline
from servebench.roofline import nodes as node_roofline
from servebench.serving.cell_load import node_cpu_in_window
from servebench.telemetry.node_sampler import CpuAccount, EngineProcesses
from servebench.warehouse import landing, reads
from tests.support.fake_openai_server import FakeServer


def config(url: str, **overrides) -> LoadConfig:
    base = dict(base_url=url, model="m", clients=2, requests=6, input_len=5, output_len=4, vocab_size=100,
                timeout_s=5, request_extras={"ignore_eos": True, "stream_options": {"include_usage": True,
                                                                               "continuous_usage_stats": True}})
    return LoadConfig(**{**base, **overrides})


# the hang watch

def test_a_hang_watch_that_breaks_leaves_the_load_running_and_the_cell_invalid_saying_so():
    with FakeServer() as server:  # a port no socket can have: the watch's first probe raises
        result = run_load(config(server.url, health_url="http://127.0.0.1:99999/health", hang_after_s=1.0))
    summary = result["summary"]
    assert summary["completed"] == 6 and "hung" not in summary
    assert not summary["valid"] and summary["invalid_reasons"][-1].startswith("not checked for hangs: the hang "
                                                                               "watchdog broke")
    assert "ValueError" in summary["hang_watch_error"]
    LoadResult.model_validate(result)  # the key is part of the result file
    with FakeServer() as server:  # a watch that works adds no key
        assert "hang_watch_error" not in run_load(config(server.url, health_url=server.url + "/health",
                                                         hang_after_s=1.0))["summary"]


# who used the server's cores

SPIN = "import os, time; os.sched_setaffinity(0, {%d}); end = time.monotonic() + 3\nwhile time.monotonic() < end: pass"
IDLE = "import os, time; os.sched_setaffinity(0, {%d}); time.sleep(3)"


def test_the_sampler_counts_a_spinning_stranger_on_the_servers_core_as_foreign_and_names_it():
    core = max(os.sched_getaffinity(0))
    server = subprocess.Popen([sys.executable, "-c", IDLE % core])
    stranger = subprocess.Popen([sys.executable, "-c", SPIN % core])
    try:
        engine = EngineProcesses([server.pid])
        engine.rss()
        account = CpuAccount([core], engine)
        totals: dict[str, int] = {}
        named: dict[str, int] = {}
        for _ in range(8):
            time.sleep(0.25)
            engine.rss()
            ticks = account.read()
            for key in ("all", "server", "servebench", "foreign"):
                totals[key] = totals.get(key, 0) + ticks[key]
            for name, used in ticks.get("foreign_top", {}).items():
                named[name] = named.get(name, 0) + used
    finally:
        for process in (server, stranger):
            process.kill()
            process.wait()
    # the stranger had a good share of the core (most of it on a quiet host; a fifth on a host loaded seven-fold)
    assert totals["foreign"] > 0.2 * totals["all"], totals
    assert totals["server"] < 0.1 * totals["all"], totals         # the sleeping server next to nothing
    busiest = max(named, key=named.__getitem__)
    assert busiest.startswith(f"pid {stranger.pid} (python"), named


def test_the_orchestrators_own_process_tree_on_its_host_is_servebench_not_foreign():
    """On the orchestrator's host its CLI, its Prefect server and their children run beside the server: they are
    servebench's cost, counted apart from other users' processes (the sampler is told the orchestrator's PID)."""
    core = max(os.sched_getaffinity(0))
    server = subprocess.Popen([sys.executable, "-c", IDLE % core])
    helper = subprocess.Popen([sys.executable, "-c", SPIN % core])          # a child of this (orchestrating) process
    try:
        engine = EngineProcesses([server.pid])
        engine.rss()
        account = CpuAccount([core], engine, orchestrator=os.getpid())
        totals = {"all": 0, "servebench": 0, "foreign": 0}
        for _ in range(8):
            time.sleep(0.25)
            engine.rss()
            ticks = account.read()
            for key in totals:
                totals[key] += ticks[key]
    finally:
        for process in (server, helper):
            process.kill()
            process.wait()
    assert totals["servebench"] > 0.2 * totals["all"] and totals["foreign"] < 0.1 * totals["all"], totals


def samples(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def row(t, all_, server, foreign, top=None, node="a"):
    ticks = {"all": all_, "busy": server + foreign, "server": server, "servebench": 0, "foreign": foreign}
    return {"node": node, "t_mono": t, "cpu_pct_per_core": {"0": 1.0, "1": 1.0},
            "cpu_ticks": ticks | ({"foreign_top": top} if top else {})}


def test_the_window_takes_the_samples_inside_it_and_skips_files_of_no_server(tmp_path):
    now = time.monotonic()
    served = samples(tmp_path / "m.node.a.jsonl", [
        row(now - 10, 40, 0, 40), row(now - 9.8, 40, 0, 40),                        # before the window
        row(now - 9.6, 40, 20, 20, {"pid 7 (spin)": 20}), row(now - 9.4, 40, 30, 10, {"pid 7 (spin)": 10}),
        row(now - 9.2, 40, 0, 40)])                                                   # after it
    client = tmp_path / "m.node.client.jsonl"
    client.write_text(json.dumps({"node": "client", "t_mono": now - 9.5, "cpu_pct_per_core": {}}) + "\n")
    found = node_cpu_in_window([served, client], now - 9.75, now - 9.4, wait_s=0.2)
    assert found == [{"node": "a", "cores": "0-1", "seconds": 0.4, "server_share": 0.625, "servebench_share": 0.0,
                      "foreign_share": 0.375, "top_foreign": "pid 7 (spin): 0.38"}]


def test_a_cell_over_the_foreign_limit_is_invalid_once_with_the_node_cores_share_and_process():
    summary = {"valid": True, "invalid_reasons": [], "node_cpu": [
        {"node": "a", "cores": "0", "seconds": 3.0, "server_share": 0.2, "servebench_share": 0.0,
         "foreign_share": 0.45, "top_foreign": "pid 7 (spin): 0.44"},
        {"node": "b", "cores": "1", "seconds": 3.0, "server_share": 0.9, "servebench_share": 0.0,
         "foreign_share": 0.02, "top_foreign": None}]}
    judge_foreign_cpu(summary, 0.1)
    judge_foreign_cpu(summary, 0.1)  # judged again (a resumed run): the same verdict
    assert summary["valid"] is False and summary["invalid_reasons"] == [
        "other processes took 45% of the server's cores on node a (cores 0, 3.0 s; limit 10% of their time); "
        "the busiest of them: pid 7 (spin): 0.44"]
    assert foreign_cpu_reasons(summary["node_cpu"], 0.5) == []


def test_the_cells_row_lands_the_largest_foreign_share_and_the_broken_watch(tmp_path):
    nodes = [{"node": "a", "cores": "0", "seconds": 3.0, "server_share": 0.2, "servebench_share": 0.0,
              "foreign_share": 0.45, "top_foreign": None},
             {"node": "b", "cores": "1", "seconds": 3.0, "server_share": 0.9, "servebench_share": 0.0,
              "foreign_share": 0.02, "top_foreign": None}]
    columns = landing._node_cpu_columns({"node_cpu": nodes, "hang_watch_error": "it broke"})
    assert (columns["foreign_cpu_share"], columns["server_cpu_share"], columns["hang_watch_error"]) == (0.45, 0.2,
                                                                                                        "it broke")
    assert json.loads(columns["node_cpu"]) == nodes
    assert set(landing._node_cpu_columns({}).values()) == {None}


# the roofline's age and load

def build(key="k1"):
    return EngineBuild(key=key, engine="vllm", engine_version="0", packages=[], python_version="3.11",
                       platform="linux-x86_64", venv_path="/venv", pip_freeze="", build_seconds=None,
                       created_at="2026-01-01T00:00:00", inputs={}, tool_version="0")


class BusyProvider:
    """Answers the program with figures measured on cores `busy` busy."""

    def __init__(self, busy=0.0):
        self.argvs, self.busy = [], busy

    def run(self, node, argv, timeout=None):
        self.argvs.append(argv)
        out = "ROOFLINE " + json.dumps({"cpus": [0], "library": "torch", "mem_bandwidth_gbps": 10.0,
                                        "matmul_peak_gflops_fp32": 50.0, "busy_before": self.busy,
                                        "load_avg_1m": 1.5})
        return subprocess.CompletedProcess(argv, 0, out, "")

    def node_python(self, node):
        return "/usr/bin/python3"


NODE = Node(name="n0", address="127.0.0.1", cpus=[0])
FACTS = {"n0": {"hostname": "h", "cpu_model": "cpu", "arch": "x86_64"}}


def measure(provider, limits=node_roofline.DEFAULT_LIMITS, lines=None):
    log = [].append if lines is None else lines.append
    return node_roofline.measure_nodes(provider, [NODE], FACTS, build(), log=log, limits=limits)["n0"]


def test_cached_figures_older_than_the_campaigns_age_are_measured_again(tmp_path, monkeypatch):
    monkeypatch.setenv("SERVEBENCH_CACHE", str(tmp_path))
    provider = BusyProvider()
    first = measure(provider)
    assert not first["cached"] and abs(first["measured_at"] - time.time()) < 60 and first["busy_before"] == 0.0
    assert measure(provider)["cached"] and len(provider.argvs) == 1
    path = next((tmp_path / "roofline").glob("*.json"))
    kept = json.loads(path.read_text())
    path.write_text(json.dumps(kept | {"measured_at": time.time() - 8 * 86400}))
    lines: list[str] = []
    again = measure(provider, lines=lines)
    assert not again["cached"] and len(provider.argvs) == 2 and "measured 8.0 days ago (at most 7)" in lines[0]
    path.write_text(json.dumps(kept | {"measured_at": time.time() - 2 * 86400}))
    assert measure(provider, node_roofline.CacheLimits(max_age_days=1))["cached"] is False  # the campaign's age


def test_figures_measured_on_busy_cores_are_used_once_and_measured_again_at_once(tmp_path, monkeypatch):
    monkeypatch.setenv("SERVEBENCH_CACHE", str(tmp_path))
    busy = BusyProvider(busy=0.6)
    lines: list[str] = []
    first = measure(busy, lines=lines)
    assert not first["cached"] and first["busy_before"] == 0.6 and "others kept its cores 60% busy" in lines[0]
    quiet = BusyProvider(busy=0.05)
    second = measure(quiet, lines=lines)
    assert not second["cached"] and len(quiet.argvs) == 1 and "60% busy (at most 25%)" in lines[1]
    assert measure(quiet)["cached"] and len(quiet.argvs) == 1


def test_figures_kept_before_their_time_was_recorded_are_as_old_as_their_file(tmp_path):
    folder = tmp_path / "roofline"
    folder.mkdir()
    (folder / "k.json").write_text(json.dumps({"mem_bandwidth_gbps": 1.0}))
    old = time.time() - 30 * 86400
    os.utime(folder / "k.json", (old, old))
    kept = roofline.cached(tmp_path, "k")
    assert kept is not None and abs(kept["measured_at"] - old) < 1
    assert roofline.stale(kept, time.time(), 7 * 86400, 0.25).startswith("measured 30.0 days ago")


def test_the_program_records_how_busy_its_cores_were_before_it_measured():
    argv = [sys.executable, "-c", roofline.PROGRAM, json.dumps(
        {"cpus": sorted(os.sched_getaffinity(0)), "buffer_mib": 1, "matmul_shapes": [[8, 8, 8]], "budget_s": 0.2})]
    figures = roofline.parse(subprocess.run(argv, capture_output=True, text=True, timeout=120).stdout)
    assert 0.0 <= figures["busy_before"] <= 1.0 and figures["load_avg_1m"] >= 0.0


@pytest.fixture
def con(tmp_path):
    con = warehouse.connect(tmp_path / "wh.duckdb")
    yield con
    con.close()


def test_the_nodes_row_lands_when_the_roofline_was_measured_and_whether_it_was_cached(con):
    landing.insert_row(con, "nodes", dict(run_id="r", node="n0", hostname="h", address="a", cpus=[0], role="server"))
    landing.land_roofline(con, "r", {"n0": {"mem_bandwidth_gbps": 12.0, "cpus": [0], "emulated": False,
                                            "measured_at": 1_700_000_000.0, "cached": True, "busy_before": 0.3,
                                            "load_avg_1m": 2.5}})
    node = reads.rows(con, "select * from nodes")[0]
    assert node["roofline_measured_at"].timestamp() == 1_700_000_000.0 and node["roofline_cached"] is True
    assert (node["roofline_busy"], node["roofline_load_avg"]) == (0.3, 2.5)
