"""What the testbed's link knob does, measured: ping RTT and TCP throughput between two hosts
for a few one-way delays on h1's link, both links delayed, and a rate cap.

Brings up a 2-host testbed of its own (default name `lkb`), sets each row's links
(servebench/devtools/testbed/links.py), pings h1 -> h2 (--pings at 5 ms intervals: RTT p50/p99, and
what the setting should add), sends TCP from h1 to h2 for --seconds (the receiver's payload
rate) and reads the delay lines' own counters (how late frames left), then takes the testbed
down. Needs root and the testbed's Debian packages (docs/testbed.md).

    python benchmarks/testbed_link.py [--pings 200] [--seconds 3] [--name lkb]
"""

from __future__ import annotations

import argparse
import sys
import time

from servebench.devtools.testbed import down, links, up

ROWS = [  # (label, {host: (delay_ms, rate_mbit)})
    ("plain", {}),
    ("h1 +1 ms", {"h1": (1.0, None)}),
    ("h1 +5 ms", {"h1": (5.0, None)}),
    ("h1 +5 ms, h2 +5 ms", {"h1": (5.0, None), "h2": (5.0, None)}),
    ("h1 capped 100 Mbit/s", {"h1": (0.0, 100.0)}),
    ("h1 +5 ms, capped 100 Mbit/s", {"h1": (5.0, 100.0)}),
]


def lateness(layout) -> str:
    """The delay lines' counters: mean and max time frames left after their due time."""
    parts = []
    for name, link in links.link_state(layout).items():
        counters = ((link.get("delay_line") or {}).get("counters") or {}).get("directions") or {}
        frames = sum(d["frames"] for d in counters.values())
        if frames:
            mean = sum(d["mean_late_ms"] * d["frames"] for d in counters.values()) / frames
            parts.append(f"{name} {mean:.3f}/{max(d['max_late_ms'] for d in counters.values()):.2f}")
    return ", ".join(parts) or "-"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pings", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--name", default="lkb")
    args = parser.parse_args(argv)
    print(links.offers_text(links.kernel_offers()))
    layout = up(args.name, 2)
    try:
        rows = []
        for label, settings in ROWS:
            for host in ("h1", "h2"):  # plain first: each row's delay lines start afresh (their own counters)
                links.clear_link(layout, host)
            for host in ("h1", "h2"):
                delay, rate = settings.get(host, (0.0, None))
                state = links.set_link(layout, host, delay, rate)
                if state["problems"]:
                    raise SystemExit(f"{label}: {host}: {state['problems']}")
            time.sleep(0.2)
            links.ping_rtts_ms(layout, "h1", "h2", count=3)  # ARP, and the bridge learning the new port
            rtts = links.ping_rtts_ms(layout, "h1", "h2", count=args.pings, interval_s=0.005)
            expected = links.added_rtt_ms({h: s[0] for h, s in settings.items()}, "h1", "h2")
            mbit = links.tcp_throughput_mbit(layout, "h1", "h2", seconds=args.seconds)
            rows.append((label, expected, links.percentile(rtts, 0.5), links.percentile(rtts, 0.99),
                         args.pings - len(rtts), mbit, lateness(layout)))
            print(f"  {label}: done", file=sys.stderr)
        base = rows[0][2]
        print(f"\n{args.pings} pings h1 -> h2 at 5 ms intervals; TCP h1 -> h2 for {args.seconds:g} s (one connection, "
              "Python on both ends)\n")
        print("| links | RTT added, set | RTT p50 | p99 | added p50 (over plain) | lost | TCP Mbit/s "
              "| delay line late, mean/max ms |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- |")
        for label, expected, p50, p99, lost, mbit, late in rows:
            print(f"| {label} | {expected:g} ms | {p50:.3f} ms | {p99:.3f} ms | {p50 - base:+.3f} ms | {lost} "
                  f"| {mbit:.1f} | {late} |")
    finally:
        left = down(args.name)
        print(f"\ntestbed {args.name} down: {'nothing left' if not left else left}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
