"""TP=2 and PP=2 across two hosts at 0, 1 and 5 ms added link latency and a 100 Mbit/s cap:
output throughput and TPOT p50, measured by a real campaign (campaigns/network-testbed.yaml).

Brings up a 2-host testbed of its own (default name `netb`), points the shipped campaign at its
hosts, runs `servebench run` (real vLLM, Ray, sshd; the links set between cells by the
campaign's network axis), prints one row per mode, link setting and load point from the
warehouse, and takes the testbed down. Needs root, the testbed's Debian packages and the
engine build (cached after the first campaign). About 15 minutes on a 2-core machine.

    python benchmarks/network_across_hosts.py [--name netb] [--keep-warehouse PATH] [--campaign PATH]

`--campaign` runs another campaign of the same testbed's two hosts instead, e.g.
campaigns/network-remeasure.yaml (the first setting measured again after the others, 3 repeats).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import duckdb
import yaml

from servebench.devtools.testbed import down, load, point_campaign, up

CAMPAIGN = Path(__file__).resolve().parent.parent / "campaigns" / "network-testbed.yaml"


def pointed_at(layout, out: Path, campaign: Path = CAMPAIGN) -> Path:
    """The campaign with this testbed's addresses, key, known hosts and name."""
    out.write_text(yaml.safe_dump(point_campaign(yaml.safe_load(campaign.read_text()), layout), sort_keys=False))
    return out


def table(db: Path) -> str:
    con = duckdb.connect(str(db), read_only=True)  # (benchmarks/warehouse.py shadows the package here)
    rows = con.execute("""
        select mode, link, coalesce(link_delay_ms, 0), link_rate_mbit, clients, status, output_throughput,
               tpot_p50_ms, ttft_p50_ms
        from cells order by mode desc, clients, link_rate_mbit nulls first, link_delay_ms, link, cell_id""").fetchall()
    con.close()
    lines = ["| mode | link (h2) | clients | status | output tok/s | TPOT p50 ms | TTFT p50 ms |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for mode, link, delay, rate, clients, status, tput, tpot, ttft in rows:
        what = f"+{delay:g} ms" + (f", {rate:g} Mbit/s" if rate else "") if (delay or rate) else "plain"
        what += f" ({link})" if not (delay or rate) and link != "plain" else ""  # a named setting, e.g. plain-again
        lines.append(f"| {mode} | {what} | {clients} | {status} | "
                     f"{tput or 0:.1f} | {tpot or 0:.1f} | {ttft or 0:.1f} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", default="netb")
    parser.add_argument("--keep-warehouse", type=Path, help="write the warehouse here (default: a temporary file)")
    parser.add_argument("--campaign", type=Path, default=CAMPAIGN, help="a campaign of two testbed hosts")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir="/var/tmp") as scratch:
        db = args.keep_warehouse or Path(scratch) / "network.duckdb"
        up(args.name, hosts=2)
        try:
            campaign = pointed_at(load(args.name), Path(scratch) / args.campaign.name, args.campaign.resolve())
            done = subprocess.run([sys.executable, "-m", "servebench", "run", str(campaign), "--warehouse", str(db)],
                                  stdin=subprocess.DEVNULL)
            print(f"servebench run exit {done.returncode}")
        finally:
            print("testbed down: " + ("; ".join(down(args.name)) or "nothing left"))
        print(table(db))
    return 0


if __name__ == "__main__":
    sys.exit(main())
