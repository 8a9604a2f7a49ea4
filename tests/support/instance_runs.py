"""A run of a data-parallel mode landed through servebench's own landing code (no engine): server samples
with per-instance columns (dp0, dp1) and node samples with network counters, for the views that read them
(cell_balance, cell_rank_network) and the report's charts of them."""

from __future__ import annotations

import json
from pathlib import Path

from servebench.campaign.loading import parse_campaign
from servebench.config.sweep import expand
from servebench.warehouse import landing

BALANCE_CAMPAIGN = """
name: t
provider: {kind: local, nodes: [{name: n0, cpus: "0-1"}, {name: n1, cpus: "0-1"}]}
model: {generate: tiny-llama}
modes: [{name: dp2, dp: 2, executor: mp-multinode}]
load: {clients: [2], requests: 4}
"""


NODE_FACTS = {"hostname": "h", "cpus": [0, 1], "cpu_model": "CPU", "arch": "x86_64", "logical_cores": 2,
              "physical_cores": 2, "numa_nodes": 1, "mem_total_bytes": 2**33, "kernel": "6", "isa_flags": []}


def land_instances_run(con, tmp_path: Path) -> None:
    """One cell from t=10 to t=12.5 (its last token), server samples every second from t=8 (dp0 finishes
    one request a second, dp1 one every two; dp1 has a queue), node samples every 0.5 s: n0 sends 1000
    bytes a second on eth0 and 10**6 on lo, n1 receives 500 a second on eth0 and 300 on eth1."""
    campaign = parse_campaign(BALANCE_CAMPAIGN)
    landing.insert_run(con, "r1", landing.RunRecord(
        campaign="t", spec_hash=campaign.spec_hash(), spec_text=BALANCE_CAMPAIGN, spec_normalized=campaign.normalized(),
        campaign_file="t.yaml", run_dir=tmp_path))
    for node in ("n0", "n1"):
        landing.land_node(con, "r1", node, "127.0.0.1", NODE_FACTS)
    requests = [dict(index=i, warmup=False, client=0, scheduled_s=0.1, sent_s=0.1, first_token_s=0.2,
                     last_token_s=2.5, input_tokens=8, output_tokens=4, chunks=4, chunk_times=[0.2, 2.5],
                     chunk_tokens=[2, 2], token_source="usage", http_status=200, error_kind=None, error=None)
                for i in range(4)]
    result = {"t0": {"monotonic": 10.0}, "summary": {"completed": 4, "failed": 0}, "requests": requests}
    landing.land_cell(con, "r1", landing.CellRecord(cell=expand(campaign)[0], input_len=8, output_len=4,
                                                    status="completed",
                                                    measured=landing.CellMeasurement(result=result)))
    landing.land_server(con, "r1", landing.ServerRecord(
        mode="dp2", layout=landing.ServerLayout.of(campaign.modes[0]), pid=1, port=1, command=["x"],
        ready_seconds=1.0, status="ready"))
    server, node = tmp_path / "s.jsonl", tmp_path / "n.jsonl"
    with open(server, "w") as out:
        for t in range(8, 16):
            instances = {"dp0": {"requests_total": t, "waiting": 0.0, "running": 1.0, "kv_usage": 0.2,
                                 "generation_tokens_total": 4.0 * t},
                         "dp1": {"requests_total": t // 2, "waiting": 2.0 if t % 2 else 0.0, "running": 1.0,
                                 "kv_usage": 0.4, "generation_tokens_total": 4.0 * (t // 2)}}
            out.write(json.dumps({"t_mono": t, "t_wall": t, "kv_usage": 0.3, "running": 2.0, "waiting": t % 2 * 2.0,
                                  "requests_total": t + t // 2, "instances": instances}) + "\n")
        out.write(json.dumps({"t_mono": 16, "t_wall": 16, "kv_usage": 0.0}) + "\n")  # an older row: no instances
    with open(node, "w") as out:
        for k in range(14, 34):
            t = k / 2
            for name, net in (("n0", {"lo": [10**6 * t, 10**6 * t, 0, 0], "eth0": [1000 * t, 0, 0, 0]}),
                              ("n1", {"lo": [0, 0, 0, 0], "eth0": [0, 500 * t, 0, 0], "eth1": [0, 300 * t, 0, 0]})):
                out.write(json.dumps({"node": name, "t_mono": t, "t_wall": t, "cpu_pct": 1.0, "net": net,
                                      "mem_used_bytes": 2e9, "engine_rss_bytes": 1e9,
                                      "engine_processes": 3}) + "\n")
    landing.land_samples(con, "r1", "dp2", [node], [server])
