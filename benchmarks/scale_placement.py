"""Placement of one tree on N testbed hosts: copies from the orchestrator against the relay, every link capped.

For each N: brings up a testbed of N hosts (default name `scb`), caps every host's link and the
machine's own (the orchestrator's: `servebench testbed link machine`) at --rate-mbit each way,
allocates an ssh provider over the hosts (and a Slurm allocation of every host of the testbed's
Slurm for `sbcast`), and places a tree of --megabytes of random files by each way of --ways
(`place_on_nodes`: `copies`, the orchestrator sends to every host, four at a time; `relay`, every
host that holds the verified tree sends it on; `sbcast`, Slurm's broadcast through its daemons,
`--sbcast-fanout` wide, its SBCAST_FANOUT), the tree removed from every host between two ways;
then releases the hosts and takes the testbed down. Every copy is verified by its digest on the
host, as a campaign's are.

Prints one row per N and way: seconds, the relay's rounds, the seconds the links alone need (the
orchestrator's link carries every copy of `copies`; a relay needs a hop's time per round), the
machine's CPUs' busy share over the placement (near 100 %: the two cores, not the links, bound it)
and the orchestrator's own CPU seconds (this process and its ssh children). Needs root and the
testbed's Debian packages (docs/testbed.md).

    python benchmarks/scale_placement.py --hosts 4 32 [--megabytes 200] [--rate-mbit 200] [--ways copies relay sbcast]
"""

from __future__ import annotations

import argparse
import os
import resource
import secrets
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil

from servebench.devtools.testbed import down, links, up
from servebench.distribution.distribute import (
    COPIES,
    PLACEMENT_WAYS,
    RELAY,
    SBCAST,
    NodeRefused,
    place_on_nodes,
    tree_bytes,
)
from servebench.distribution.relay_plan import rounds_needed
from servebench.providers import Provider
from servebench.providers.slurm import SlurmProvider
from servebench.providers.slurm.spec import SlurmProviderSpec
from servebench.providers.ssh import SshProvider
from servebench.providers.ssh.spec import SshProviderSpec

FILE_MB = 4


def make_tree(megabytes: int) -> Path:
    """Random files under /root, which every host has its own of (on disk, not in memory as /tmp)."""
    tree = Path("/root") / f"sb-scale-placement-{secrets.token_hex(3)}" / "build"
    (tree / "lib").mkdir(parents=True)
    for index in range(megabytes // FILE_MB):
        (tree / "lib" / f"part{index:03d}.bin").write_bytes(os.urandom(FILE_MB << 20))
    (tree / "bin").mkdir()
    (tree / "bin" / "python").symlink_to("/usr/bin/python3")
    return tree


def provider_for(layout) -> SshProvider:
    hosts = [{"name": h.name, "address": h.address, "key": str(layout.ssh_key), "cpus": "0"} for h in layout.hosts]
    return SshProvider(SshProviderSpec.model_validate({"kind": "ssh", "hosts": hosts,
                                                       "known_hosts": str(layout.known_hosts)}))


def slurm_for(layout, sbcast: dict[str, str]) -> SlurmProvider:
    """Every host of the testbed's Slurm, one CPU each; the broadcast's file lands under /root (on disk);
    `sbcast`: its settings by environment (SBCAST_FANOUT, SBCAST_TIMEOUT)."""
    return SlurmProvider(SlurmProviderSpec.model_validate({
        "kind": "slurm", "nodes": len(layout.hosts), "cpus_per_node": 1, "time_limit": "60",
        "partition": layout.partition, "slurm_conf": str(layout.slurm_conf), "python": "/usr/bin/python3",
        "remote_dir": "/root", "client_env": sbcast}))


def cpu_seconds() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def busy_share(before, after) -> float:
    idle = (after.idle + after.iowait) - (before.idle + before.iowait)
    total = sum(after) - sum(before)
    return 1.0 - idle / total if total > 0 else 0.0


def place(provider: Provider, tree: Path, way: str) -> dict:
    nodes = provider.nodes()
    rounds = set()

    def note(text: str) -> None:
        if "(round " in text:
            rounds.add(text.rsplit("(round ", 1)[1].rstrip(")"))

    cpu_before, orchestrator_before, started = psutil.cpu_times(), cpu_seconds(), time.monotonic()
    placements = place_on_nodes(provider, nodes, {}, {n.name: {"model": tree} for n in nodes}, None,
                                "linux-x86_64", log=note, way=way)
    seconds = time.monotonic() - started
    assert sorted(p.node for p in placements if p.how == "copied") == sorted(n.name for n in nodes), placements
    return {"seconds": seconds, "rounds": len(rounds) if way == RELAY else None,
            "busy": busy_share(cpu_before, psutil.cpu_times()), "orchestrator_cpu": cpu_seconds() - orchestrator_before}


def remove_everywhere(provider: Provider, tree: Path) -> None:
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda n: provider.run(n, ["rm", "-rf", str(tree.parent)]), provider.nodes()))


def cap_every_link(layout, rate_mbit: float | None) -> None:
    """Each host's link and the machine's at rate_mbit each way (None: every link plain)."""
    for host in layout.hosts:
        state = links.set_link(layout, host, 0.0, rate_mbit)
        if state["problems"]:
            raise SystemExit(f"{host.name}: {state['problems']}")
    kinds = links.set_machine_rate(layout, rate_mbit)
    if set(kinds.values()) != ({"tbf"} if rate_mbit is not None else {None}):
        raise SystemExit(f"the machine's link: {kinds}")


def one_size(name: str, hosts: int, tree: Path, rates: list[float | None], ways: list[str],
             sbcast: dict[str, str]) -> list[dict]:
    """Each way at each rate (None: links plain, the machine's CPUs the only bound) on one testbed."""
    started = time.monotonic()
    layout = up(name, hosts)
    rows: list[dict] = []
    try:
        up_s = time.monotonic() - started
        providers = {way: slurm_for(layout, sbcast) if way == SBCAST else provider_for(layout) for way in ways}
        try:
            for provider in providers.values():
                provider.allocate()
            for rate in rates:
                cap_every_link(layout, rate)
                for way, provider in providers.items():
                    print(f"  {hosts} hosts, {way}, links {rate or 'plain'} ...", file=sys.stderr)
                    row = {"hosts": hosts, "way": way, "rate": rate, "up_s": up_s}
                    try:
                        row |= place(provider, tree, way)
                    except NodeRefused as exc:  # a row of its own: the other ways and sizes still run
                        row["error"] = " | ".join(str(exc).splitlines())[:700]
                    rows.append(row)
                    remove_everywhere(provider, tree)
        finally:
            for provider in providers.values():
                provider.release()
    finally:
        began = time.monotonic()
        left = down(name)
        for row in rows:
            row["down_s"] = time.monotonic() - began
        print(f"  testbed {name} ({hosts} hosts) down: {'nothing left' if not left else left}", file=sys.stderr)
    return rows


def link_seconds(row: dict, size_bytes: int) -> str:
    """What the capped links alone need: every copy through the orchestrator's link, or a hop per round."""
    if row["rate"] is None or row["way"] == SBCAST:
        return "-"
    hop = size_bytes * 8 / (row["rate"] * 1e6 * links.payload_share())
    return f"{hop * (row['hosts'] if row['way'] == COPIES else rounds_needed(row['hosts'])):.1f}"


def print_table(rows: list[dict], size: int, sbcast: dict[str, str]) -> None:
    print(f"\na tree of {size / 1e6:.0f} MB; links: each host's and the orchestrator's capped each way, or plain; "
          f"ssh provider (sbcast: slurm, {sbcast}); machine CPUs busy counts every process of the machine\n")
    print("| hosts | way | links, Mbit/s | seconds | relay rounds | links alone, s | machine CPUs busy "
          "| orchestrator CPU s | testbed up, s | down, s |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for row in rows:
        if "error" in row:
            print(f"| {row['hosts']} | {row['way']} | {row['rate'] or 'plain'} | failed: {row['error']} "
                  f"| | | | | {row['up_s']:.1f} | {row.get('down_s', 0):.1f} |")
            continue
        print(f"| {row['hosts']} | {row['way']} | {row['rate'] or 'plain'} | {row['seconds']:.1f} "
              f"| {row['rounds'] or '-'} | {link_seconds(row, size)} | {row['busy'] * 100:.0f} % "
              f"| {row['orchestrator_cpu']:.1f} | {row['up_s']:.1f} | {row.get('down_s', 0):.1f} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, nargs="+", default=[4, 32])
    parser.add_argument("--megabytes", type=int, default=200)
    parser.add_argument("--rate-mbit", type=float, default=200.0)
    parser.add_argument("--ways", nargs="+", choices=PLACEMENT_WAYS, default=list(PLACEMENT_WAYS))
    parser.add_argument("--sbcast-fanout", type=int, default=2, help="sbcast's fanout (SBCAST_FANOUT, at most 8)")
    parser.add_argument("--sbcast-timeout", type=int, default=120,
                        help="seconds sbcast and the slurmd daemons forwarding a block wait for an answer "
                             "(SBCAST_TIMEOUT; the testbed's MessageTimeout, 10 s, is too short for a block "
                             "through several capped links)")
    parser.add_argument("--plain-too", action="store_true",
                        help="each way again with every link plain: what the machine's CPUs alone allow")
    parser.add_argument("--name", default="scb")
    args = parser.parse_args(argv)
    tree = make_tree(args.megabytes)
    size = tree_bytes(tree)
    rates: list[float | None] = [args.rate_mbit] + ([None] if args.plain_too else [])
    sbcast = {"SBCAST_FANOUT": str(args.sbcast_fanout), "SBCAST_TIMEOUT": str(args.sbcast_timeout)}
    rows: list[dict] = []
    try:
        for hosts in args.hosts:
            rows += one_size(args.name, hosts, tree, rates, args.ways, sbcast)
    finally:
        shutil.rmtree(tree.parent, ignore_errors=True)
        print_table(rows, size, sbcast)
    return 0


if __name__ == "__main__":
    sys.exit(main())
