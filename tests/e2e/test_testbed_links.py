"""The testbed's network knob: per-link one-way delay and rate cap.

Here the tests that start real components (servers, the testbed, qemu, a browser); the logic's own are in
tests/unit/test_testbed_links.py."""

from __future__ import annotations

import os
import time

import psutil
import pytest

from servebench.devtools.testbed import links
from servebench.devtools.testbed.machine import Daemon, read_state
from tests.support.testbed import on_the_testbed, own_testbed, run_testbed_cli

PINGS = 30


@pytest.fixture(scope="module")
def testbed():
    with own_testbed("lk", 2) as layout:
        yield layout


def rtt_p50(layout, src: str = "h1", dst: str = "h2") -> float:
    links.ping_rtts_ms(layout, src, dst, count=2)  # ARP, and the bridge learning where a host now is
    rtts = links.ping_rtts_ms(layout, src, dst, count=PINGS)
    assert len(rtts) >= PINGS - 2, f"pings lost {src} -> {dst}: {len(rtts)} of {PINGS}"
    return links.percentile(rtts, 0.5)


def assert_honest(layout, host: str, delay_ms: float, rate_mbit: float | None) -> dict:
    state = links.link_state(layout)[host]
    assert state["problems"] == [], state
    assert (state["delay_ms"], state["rate_mbit"]) == (delay_ms, rate_mbit)
    if delay_ms:
        assert state["delay_line"]["alive"] and not state["port_on_bridge"]
    else:
        assert state["delay_line"] is None and state["port_on_bridge"]
    expected = None if rate_mbit is None else {"kind": "tbf", "rate_mbit": rate_mbit}
    assert state["shaper"] == {"to_host": expected, "from_host": expected}
    return state


@on_the_testbed
def test_kernel_offers_tbf_and_says_whether_it_has_netem(testbed):
    offers = links.kernel_offers()
    assert set(offers) == {"netem", "tbf", "htb"} and offers["tbf"]
    print(links.offers_text(offers))
    if not offers["netem"]:
        assert "unknown" in (links.probe_qdisc("netem") or "").lower()


@on_the_testbed
def test_a_delay_adds_twice_itself_per_link_to_a_round_trip(testbed):
    layout = testbed
    base = rtt_p50(layout)
    started = time.monotonic()
    links.set_link(layout, "h1", delay_ms=5)
    print(f"set_link: {time.monotonic() - started:.2f} s")
    line = assert_honest(layout, "h1", 5.0, None)["delay_line"]
    one = rtt_p50(layout) - base
    back = rtt_p50(layout, "h2", "h1") - base
    from_machine = rtt_p50(layout, "machine", "h1") - rtt_p50(layout, "machine", "h2")
    links.set_link(layout, "h1", delay_ms=5)  # the same again: the same delay line, not restarted
    assert links.link_state(layout)["h1"]["delay_line"]["pid"] == line["pid"]
    links.set_link(layout, "h2", delay_ms=5)
    both = rtt_p50(layout) - base
    links.set_link(layout, "h2", delay_ms=1, rate_mbit=50)  # another delay: a new delay line on the same ports
    assert_honest(layout, "h2", 1.0, 50.0)
    print(f"base {base:.3f} ms; added: h1 5 ms {one:.3f}, h2->h1 {back:.3f}, machine->h1 {from_machine:.3f}, "
          f"both 5 ms {both:.3f}")
    assert 8 <= one <= 20 and 8 <= back <= 20 and 8 <= from_machine <= 20  # 2 x 5 ms
    assert 16 <= both <= 32  # 4 x 5 ms
    counters = links.read_counters(links.line_files(layout, layout.host("h1"))[1])
    assert counters is not None and counters["delay_ms"] == 5.0 and counters["running"]
    status = run_testbed_cli("status", "--name", layout.name)
    assert "link h1: delay 5 ms each way; delay line pid" in status.stdout and "PROBLEM" not in status.stdout
    for host in ("h1", "h2"):
        links.clear_link(layout, host)
        assert_honest(layout, host, 0.0, None)
    assert not psutil.pid_exists(line["pid"]) or psutil.Process(line["pid"]).status() == psutil.STATUS_ZOMBIE
    stopped = links.line_files(layout, layout.host("h1"))[0].read_text()
    assert "stopped: h1->h1d:" in stopped  # SIGTERM: a clean exit, its counters printed
    cleared = rtt_p50(layout) - base
    print(f"cleared: {cleared:+.3f} ms")
    assert cleared < 1.0


@on_the_testbed
def test_a_rate_cap_holds_tcp_below_it_both_ways(testbed):
    layout = testbed
    links.set_link(layout, "h1", rate_mbit=10)
    assert_honest(layout, "h1", 0.0, 10.0)
    up = links.tcp_throughput_mbit(layout, "h1", "h2", seconds=2)  # from h1: its eth0's shaper
    down = links.tcp_throughput_mbit(layout, "h2", "h1", seconds=2)  # to h1: its switch port's shaper
    print(f"10 Mbit/s cap: from h1 {up:.2f}, to h1 {down:.2f} Mbit/s")
    assert 3 < up < 15 and 3 < down < 15
    links.clear_link(layout, "h1")
    assert_honest(layout, "h1", 0.0, None)


@on_the_testbed
def test_down_stops_the_delay_lines_and_leaves_nothing(testbed):
    """Last: takes the module's testbed down, with a delay line running (set from the CLI, as a
    person would)."""
    layout = testbed
    result = run_testbed_cli("link", "--name", layout.name, "h2", "--delay-ms", "1", "--rate-mbit", "100")
    assert result.returncode == 0 and "delay 1 ms each way, rate 100 Mbit/s each way" in result.stdout, result.stderr
    _, daemons, _ = read_state(layout.state_dir)
    lines = [d for d in daemons if d.host == links.SWITCH]
    assert [d.name for d in lines] == ["delay-line-h2"] and lines[0].alive()
    result = run_testbed_cli("down", "--name", layout.name)
    assert result.returncode == 0 and "nothing left" in result.stdout, result.stderr
    assert not Daemon(**lines[0].__dict__).alive()
    netns = os.listdir("/run/netns") if os.path.isdir("/run/netns") else []
    assert [ns for ns in netns if ns.startswith(layout.name + "-")] == []
    assert not [link for link in os.listdir("/sys/class/net") if link.startswith(layout.name + "-")]
    assert not layout.state_dir.exists()
    left = [p.pid for p in psutil.process_iter(["cmdline", "status"]) if p.info["status"] != psutil.STATUS_ZOMBIE
            and str(links.DELAY_LINE) in (argv := " ".join(p.info["cmdline"] or [])) and str(layout.state_dir) in argv]
    assert left == []  # no delay line of this testbed runs
