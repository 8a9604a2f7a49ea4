"""Two synthetic nights of a campaign landed through servebench's own landing code (no engine):
the report and the regression tests read them."""

from __future__ import annotations

import json
import random
from pathlib import Path

from servebench import warehouse
from servebench.analysis.regression.history import analyze_run
from servebench.campaign.loading import parse_campaign
from servebench.config.detection import DetectionSettings
from servebench.config.sweep import expand
from servebench.warehouse import landing

CAMPAIGN = """
name: synthetic
provider: {kind: local, nodes: [{name: node0, cpus: "0-1"}, {name: node1, cpus: "0-1"}]}
model: {generate: tiny-llama}
modes: [{name: tp1}, {name: tp2-ray, tp: 2, executor: ray}]
load: {clients: [1, 4, 8], rates: [2, 8], requests: 8, input_len: 32, output_len: 16, repeats: 5}
"""
NODE = {"hostname": "h", "cpus": [0, 1], "cpu_model": "Synthetic CPU", "arch": "x86_64", "logical_cores": 2,
        "physical_cores": 2, "numa_nodes": 1, "mem_total_bytes": 24 * 2**30, "kernel": "6", "isa_flags": []}


def synthetic_warehouse(path: Path, tmp: Path) -> str:
    """Two nights of the campaign; on the second, tp2-ray is a third slower (a regression)."""
    con = warehouse.connect(path)
    land_night(con, tmp, "r0", tp2_speed=0.6)
    run_id = land_night(con, tmp, "r1", tp2_speed=0.4)
    analyze_run(con, "r0", DetectionSettings())
    analyze_run(con, run_id, DetectionSettings())
    con.close()
    return run_id


def land_night(con, tmp: Path, run_id: str, tp2_speed: float) -> str:
    campaign = parse_campaign(CAMPAIGN)
    rng = random.Random(run_id)
    landing.insert_run(con, run_id, landing.RunRecord(
        campaign="synthetic", spec_hash=campaign.spec_hash(), spec_text=CAMPAIGN, spec_normalized=campaign.normalized(),
        campaign_file="synthetic.yaml", run_dir=tmp))
    for node in ("node0", "node1"):
        landing.land_node(con, run_id, node, "127.0.0.1", NODE)
    t0 = 1000.0
    for cell in expand(campaign):
        n = 8
        speed = 1.0 if cell.mode.name == "tp1" else tp2_speed
        requests = [dict(index=i, warmup=False, client=0, scheduled_s=i * 0.1, sent_s=i * 0.1,
                         first_token_s=i * 0.1 + 0.02 / speed, last_token_s=i * 0.1 + 0.3 / speed, input_tokens=32,
                         output_tokens=16, chunks=16, chunk_times=[], chunk_tokens=[], token_source="usage",
                         http_status=200, error_kind=None, error=None) for i in range(n)]
        jitter = rng.uniform(0.97, 1.03)
        summary = {"completed": n, "failed": 0, "duration_s": 1.0, "output_throughput": 100 * speed * jitter,
                   "request_throughput": 8 * speed * jitter, "ttft_ms": {"p50": 20 / speed, "p99": 40 / speed},
                   "tpot_ms": {"p50": 18 / speed, "p99": 25 / speed}, "valid": True, "invalid_reasons": []}
        landing.land_cell(con, run_id, landing.CellRecord(
            cell=cell, input_len=32, output_len=16, status="completed", correctness="passed",
            measured=landing.CellMeasurement(result={"t0": {"monotonic": t0}, "summary": summary,
                                                     "requests": requests})))
        t0 += 5.0
    for mode in ("tp1", "tp2-ray"):
        landing.land_server(con, run_id, landing.ServerRecord(
            mode=mode, layout=landing.ServerLayout.of(next(m for m in campaign.modes if m.name == mode)), pid=1, port=1,
            command=["x"], ready_seconds=50.0, status="ready", gate=landing.ServerGate(status="passed"),
            kv_capacity_tokens=480))
    node_file, server_file = tmp / "n.jsonl", tmp / "s.jsonl"
    with open(node_file, "w") as nf, open(server_file, "w") as sf:
        for k in range(int((t0 - 1000.0) * 5)):
            t = 1000.0 + k / 5
            for node in ("node0", "node1"):
                nf.write(json.dumps({"node": node, "t_mono": t, "t_wall": t, "cpu_pct": rng.uniform(10, 95),
                                     "cpu_pct_per_core": {"0": 50.0, "1": 50.0}, "mem_used_bytes": 4e9,
                                     "mem_available_bytes": 2e10, "engine_rss_bytes": 2e9, "engine_processes": 4,
                                     "net": {"lo": [k * 1000, k * 1200, k, k]}}) + "\n")
            sf.write(json.dumps({"t_mono": t, "t_wall": t, "kv_usage": min(1.0, k / 200), "running": 4.0,
                                 "waiting": 0.0, "preemptions_total": k // 20, "prompt_tokens_total": k * 10.0,
                                 "generation_tokens_total": k * 5.0}) + "\n")
    for mode in ("tp1", "tp2-ray"):
        landing.land_samples(con, run_id, mode, [node_file], [server_file])
    landing.update_run(con, run_id, landing.RunUpdate(status="completed", ended_at=landing.now()))
    return run_id
