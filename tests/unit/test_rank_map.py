"""Which ranks ran on which node: each server's placement, as the engine lays it out for
`servebench plan`, lands in `server_ranks` beside its `servers` row (`servebench.orchestration.servers`:
`rank_placement`, then `landing.land_server`), and `cell_rank_network` says whose ranks each node's bytes
belong to. And a `replicas` mode's KV failures are counted in every replica's log, not r0's alone. A real
DuckDB warehouse built from the migrations, rows landed through the library; real processes writing logs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from servebench import warehouse
from servebench.campaign.loading import parse_campaign
from servebench.config.node import Node
from servebench.config.sweep import expand
from servebench.engines import get_engine
from servebench.engines.base import ProcessLaunch, ServerLaunch
from servebench.orchestration.cells import api_log_sizes, count_in_logs
from servebench.orchestration.context import EngineRun, RunContext
from servebench.orchestration.servers import rank_placement
from servebench.planning.plan import make_plan
from servebench.serving.deployment import Deployment
from servebench.serving.mode_server import replica_launch
from servebench.serving.server import start_server, stop_server
from servebench.warehouse import landing, reads
from tests.support.waiting import wait_until

HOST_CPUS = {0, 1}
NODES = [Node(name=f"n{i}", address=f"127.0.0.{i + 1}", cpus=[0, 1]) for i in range(4)]
NODE_FACTS = {"hostname": "h", "cpus": [0, 1], "cpu_model": "CPU", "arch": "x86_64", "logical_cores": 2,
              "physical_cores": 2, "numa_nodes": 1, "mem_total_bytes": 2**33, "kernel": "6", "isa_flags": []}

VLLM_CAMPAIGN = """
name: ranks
engine: {kind: vllm}
provider: {kind: local, nodes: [{name: n0, cpus: "0-1"}, {name: n1, cpus: "0-1"}, {name: n2, cpus: "0-1"},
                                {name: n3, cpus: "0-1"}]}
model: {generate: tiny-llama}
modes:
  - {name: tp2pp2, tp: 2, pp: 2, executor: ray, nodes: [n0, n1]}
  - {name: dp2, dp: 2, executor: mp-multinode, nodes: [n2, n3]}
  - {name: r2, tp: 2, replicas: 2, executor: mp, nodes: [n0, n1]}
load: {clients: [1], requests: 4}
"""

RPC_CAMPAIGN = """
name: rpc
engine: {kind: llamacpp}
provider: {kind: local, nodes: [{name: n0, cpus: "0-1"}, {name: n1, cpus: "0-1"}]}
model: {generate: tiny-llama}
modes: [{name: rpc2, executor: rpc, pp: 2}]
load: {clients: [1], requests: 4}
"""


def run_context(text: str, kind: str, tmp_path: Path) -> tuple[RunContext, EngineRun]:
    """The run as `land_mode_server` sees it: the campaign's plan and its engine deployed on NODES (nothing
    started: the placement is arithmetic on the nodes)."""
    campaign = parse_campaign(text, host_cpus=HOST_CPUS)
    engine = get_engine(kind)
    deployment = Deployment(campaign=campaign, engine=engine, spec=campaign.engine, provider=None,  # type: ignore[arg-type]
                            nodes=NODES[:len(campaign.provider.node_specs())], build=None,  # type: ignore[arg-type]
                            model_dir="/m", served_name="m", run_dir=str(tmp_path))
    run = EngineRun(engine=engine, spec=campaign.engine, reference_name="reference-tp1", deployment=deployment)
    ctx = RunContext(plan=make_plan(campaign, HOST_CPUS), engines={kind: run}, provider=None,  # type: ignore[arg-type]
                     warehouse=str(tmp_path / "w.duckdb"), run_id="r1", run_dir=tmp_path, campaign_dir=tmp_path)
    return ctx, run


def land_servers(ctx: RunContext, run: EngineRun, text: str, modes: list[str]):
    """The run and each server's row with its placement, as `land_mode_server` lands them."""
    campaign = ctx.campaign
    con = warehouse.connect(ctx.warehouse)
    landing.insert_run(con, "r1", landing.RunRecord(
        campaign=campaign.name, spec_hash=campaign.spec_hash(), spec_text=text, spec_normalized=campaign.normalized(),
        campaign_file="c.yaml", run_dir=ctx.run_dir))
    served = {mode.name: mode for mode in [*campaign.modes, run.engine.reference_mode("reference-tp1")]}
    for mode in modes:
        spec = served.get(mode)  # None: a server of no mode
        landing.land_server(con, "r1", landing.ServerRecord(
            mode=mode, layout=landing.ServerLayout() if spec is None else landing.ServerLayout.of(spec), pid=1, port=1,
            command=["x"], ready_seconds=1.0, status="ready",
            ranks=None if spec is None else rank_placement(run, spec)))
    return con


def server_ranks(con, mode: str) -> list[tuple]:
    return con.execute("select replica, rank, label, node, dp_rank, pp_rank, tp_rank, ep_rank from server_ranks "
                       "where run_id = 'r1' and mode = ? order by replica, process", [mode]).fetchall()


def test_each_rank_lands_with_its_node_its_coordinates_and_its_replica(tmp_path):
    ctx, run = run_context(VLLM_CAMPAIGN, "vllm", tmp_path)
    con = land_servers(ctx, run, VLLM_CAMPAIGN, ["tp2pp2", "dp2", "r2", "reference-tp1", "unknown"])
    try:
        # Ray spreads the ranks in order: stage 0's two TP ranks on n0, stage 1's on n1
        assert server_ranks(con, "tp2pp2") == [
            (0, 0, "rank0", "n0", 0, 0, 0, None), (0, 1, "rank1", "n0", 0, 0, 1, None),
            (0, 2, "rank2", "n1", 0, 1, 0, None), (0, 3, "rank3", "n1", 0, 1, 1, None)]
        # one engine a node with vLLM's own launcher across nodes
        assert server_ranks(con, "dp2") == [(0, 0, "dp0.rank0", "n2", 0, 0, 0, None),
                                            (0, 1, "dp1.rank0", "n3", 1, 0, 0, None)]
        # two servers of tp=2, each on its own node
        assert server_ranks(con, "r2") == [(0, 0, "rank0", "n0", 0, 0, 0, None), (0, 1, "rank1", "n0", 0, 0, 1, None),
                                           (1, 0, "rank0", "n1", 0, 0, 0, None), (1, 1, "rank1", "n1", 0, 0, 1, None)]
        # the reference: one worker on the first node; a server of no mode: no placement to land
        assert server_ranks(con, "reference-tp1") == [(0, 0, "rank0", "n0", 0, 0, 0, None)]
        assert server_ranks(con, "unknown") == []
        comments = con.execute("select column_name, comment from duckdb_columns() "
                               "where table_name = 'server_ranks'").fetchall()
        assert len(comments) == 11 and all(comment for _, comment in comments), comments
    finally:
        con.close()


def test_rpc_workers_are_ranks_and_the_server_in_front_of_them_is_not(tmp_path):
    ctx, run = run_context(RPC_CAMPAIGN, "llamacpp", tmp_path)
    con = land_servers(ctx, run, RPC_CAMPAIGN, ["rpc2", "reference-tp1"])
    try:
        assert server_ranks(con, "rpc2") == [(0, None, "server", "n0", None, None, None, None),
                                             (0, 0, "rpc0", "n0", 0, 0, 0, None),
                                             (0, 1, "rpc1", "n1", 0, 1, 0, None)]
        assert server_ranks(con, "reference-tp1") == [(0, 0, "server", "n0", 0, 0, 0, None)]
    finally:
        con.close()


def test_expert_parallel_ranks_count_over_dp_x_tp():
    from servebench.engines.base import RankShare

    shares = [RankShare(node=f"n{rank // 2}", label=f"rank{rank}", layers=1, tp=2) for rank in range(4)]
    rows = landing.rank_rows([shares], landing.ServerLayout(tp=2, pp=1, dp=2, ep=True))
    assert [(r["dp_rank"], r["tp_rank"], r["ep_rank"]) for r in rows] == [(0, 0, 0), (0, 1, 1), (1, 0, 2), (1, 1, 3)]
    # a layout that is not dp x pp x tp (a server of no known mode): ranks, but no coordinates
    unknown = landing.rank_rows([shares], landing.ServerLayout())
    assert [(r["rank"], r["dp_rank"], r["tp_rank"]) for r in unknown] == [(i, None, None) for i in range(4)]


def test_landing_a_restarted_server_replaces_its_placement_and_a_failed_one_keeps_it(tmp_path):
    ctx, run = run_context(VLLM_CAMPAIGN, "vllm", tmp_path)
    con = land_servers(ctx, run, VLLM_CAMPAIGN, ["dp2"])
    try:
        dp2 = next(mode for mode in ctx.campaign.modes if mode.name == "dp2")
        landing.land_server(con, "r1", landing.ServerRecord(mode="dp2", layout=landing.ServerLayout.of(dp2), pid=2,
                                                            port=1, command=["x"], ready_seconds=1.0, status="ready",
                                                            ranks=rank_placement(run, dp2)))
        assert len(server_ranks(con, "dp2")) == 2
        landing.land_server(con, "r1", landing.ServerRecord.failed("dp2", landing.ServerLayout.of(dp2),
                                                                   "restart failed"))
        assert [row[2] for row in server_ranks(con, "dp2")] == ["dp0.rank0", "dp1.rank0"]
    finally:
        con.close()


def land_node_samples(con, campaign, tmp_path: Path, mode: str, nodes: list[str], t0: float) -> None:
    """One completed cell of `mode` from t0 to t0 + 2 (its last token) and node samples every 0.5 s around it:
    each node sends 1000 bytes a second on eth0 (and 10**6 on lo, left out)."""
    cell = next(c for c in expand(campaign) if c.mode.name == mode)
    requests = [dict(index=i, warmup=False, client=0, scheduled_s=0.1, sent_s=0.1, first_token_s=0.2,
                     last_token_s=2.0, input_tokens=8, output_tokens=4, chunks=4, chunk_times=[0.2, 2.0],
                     chunk_tokens=[2, 2], token_source="usage", http_status=200, error_kind=None, error=None)
                for i in range(4)]
    landing.land_cell(con, "r1", landing.CellRecord(
        cell=cell, input_len=8, output_len=4, status="completed", measured=landing.CellMeasurement(
            result={"t0": {"monotonic": t0}, "summary": {"completed": 4, "failed": 0}, "requests": requests})))
    path = tmp_path / f"{mode}.nodes.jsonl"
    with open(path, "w") as out:
        for k in range(int(t0 * 2) - 2, int(t0 * 2) + 8):
            t = k / 2
            for node in nodes:
                out.write(json.dumps({"node": node, "t_mono": t, "t_wall": t, "cpu_pct": 1.0,
                                      "net": {"lo": [10**6 * t, 10**6 * t, 0, 0], "eth0": [1000 * t, 0, 0, 0]},
                                      "engine_processes": 2}) + "\n")
    landing.land_samples(con, "r1", mode, [path], [])


def test_cell_rank_network_names_the_ranks_whose_bytes_each_node_carried(tmp_path):
    ctx, run = run_context(VLLM_CAMPAIGN, "vllm", tmp_path)
    con = land_servers(ctx, run, VLLM_CAMPAIGN, ["tp2pp2", "dp2", "r2"])
    try:
        for node in NODES:
            landing.land_node(con, "r1", node.name, node.address, NODE_FACTS)
        land_node_samples(con, ctx.campaign, tmp_path, "tp2pp2", ["n0", "n1"], 10.0)
        # n0 sampled during dp2's cell too, holding none of its ranks
        land_node_samples(con, ctx.campaign, tmp_path, "dp2", ["n2", "n3", "n0"], 20.0)
        land_node_samples(con, ctx.campaign, tmp_path, "r2", ["n0", "n1"], 30.0)
        network = {(row["mode"], row["node"]): row for row in reads.rank_network_cells(con, "r1")}
        assert network[("tp2pp2", "n0")]["ranks"] == ["rank0", "rank1"]
        assert network[("tp2pp2", "n1")]["ranks"] == ["rank2", "rank3"]
        assert (network[("tp2pp2", "n1")]["bytes_sent"], network[("tp2pp2", "n1")]["replica"]) == (2000.0, 0)
        assert network[("dp2", "n2")]["ranks"] == ["dp0.rank0"] and network[("dp2", "n3")]["ranks"] == ["dp1.rank0"]
        assert (network[("dp2", "n0")]["ranks"], network[("dp2", "n0")]["replica"]) == (None, None)
        # a replicas mode: each node's ranks named with their replica
        assert (network[("r2", "n0")]["ranks"], network[("r2", "n0")]["replica"]) == (["r0.rank0", "r0.rank1"], 0)
        assert (network[("r2", "n1")]["ranks"], network[("r2", "n1")]["replica"]) == (["r1.rank0", "r1.rank1"], 1)
        comments = dict(con.execute("select column_name, comment from duckdb_columns() where table_name = "
                                    "'cell_rank_network' and column_name in ('ranks', 'replica')").fetchall())
        assert set(comments) == {"ranks", "replica"} and all(comments.values()), comments
    finally:
        con.close()


# --- KV failures: every replica's log


KV_FULL = "failed to find a memory slot for batch"
WRITER = """
import sys, time
from pathlib import Path
before, after, go = int(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
for _ in range(before):
    print("KV_FULL", flush=True)
print("ready", flush=True)
while not go.exists():
    time.sleep(0.02)
for _ in range(after):
    print("KV_FULL", flush=True)
print("done", flush=True)
time.sleep(60)
""".replace("KV_FULL", KV_FULL)


@pytest.fixture
def plain_nodes():
    from tests.support.plain_provider import PlainProvider, PlainProviderSpec

    provider = PlainProvider(PlainProviderSpec(nodes=[{"name": "a", "cpus": "0"}, {"name": "b", "cpus": "0"}]),
                             run_id="rank-map-test")
    nodes = provider.allocate()
    yield provider, nodes
    provider.release()


def test_kv_failures_are_counted_in_every_replicas_log_since_the_cell_began(tmp_path, plain_nodes):
    """Two replicas, each an API process writing KV-full lines before the cell (not counted) and during it
    (r0 two, r1 three), and r0 with a worker beside it whose log says the same (not the server's: not counted)."""
    provider, nodes = plain_nodes
    go = tmp_path / "go"

    def writer(node: str, before: int, after: int, api: bool, label: str = "") -> ProcessLaunch:
        return ProcessLaunch(node=node, argv=[sys.executable, "-c", WRITER, str(before), str(after), str(go)],
                             env={}, api=api, label=label)

    launches = [ServerLaunch(processes=[writer("a", 5, 4, False, "worker"), writer("a", 1, 2, True)], port=1),
                ServerLaunch(processes=[writer("b", 3, 3, True)], port=2)]
    server = start_server(provider, nodes, replica_launch(launches), "r2", tmp_path / "servers", 30)
    try:
        def logs_say(word: str) -> bool:
            return all(word in r.log_path.read_text() for r in server.processes if r.log_path.exists()) and \
                all(r.log_path.exists() for r in server.processes)

        wait_until(lambda: logs_say("ready"), "every process to write its lines before the cell", timeout_s=20)
        starts = api_log_sizes(server)
        assert sorted(path.name for path in starts) == ["r2.r0.log", "r2.r1.log"]
        go.touch()
        wait_until(lambda: logs_say("done"), "every process to write its lines during the cell", timeout_s=20)
        assert count_in_logs(starts, KV_FULL) == 2 + 3
        assert count_in_logs(starts, None) is None   # an engine without such a line
        assert count_in_logs({tmp_path / "absent.log": 0}, KV_FULL) is None
    finally:
        stop_server(provider, server)
