"""The testbed's network knob: per-link one-way delay and rate cap.

First the pure parts (settings, the semantics of a delay, names and argv), then a real 2-host
testbed of its own: 5 ms on h1's link adds ~10 ms to a ping between h1 and h2 (4x the delay
with both links delayed), clearing gives the plain link back, a 10 Mbit/s cap holds a TCP
transfer below it in both directions, and `down` leaves no delay line behind.

Bounds are wide on purpose: they must hold on a busy 2-core machine and on a fast one.
The real test needs root and the testbed's Debian packages (it is skipped, saying why, without).
"""

from __future__ import annotations

import argparse
import os
import time

import psutil
import pytest

from servebench.cli.testbed import add_testbed_parser
from servebench.config.campaign import MAX_LINK_DELAY_MS, LinkSetting
from servebench.devtools.testbed import delay_line, links
from servebench.devtools.testbed.layout import make_layout
from servebench.devtools.testbed.machine import Daemon, read_state
from tests.support.testbed import on_the_testbed, own_testbed, run_testbed_cli

PINGS = 30


# ---------------------------------------------------------------------------- pure

def test_settings_are_checked_and_described():
    assert links.setting().plain and links.setting().describe() == "plain"
    assert links.setting(5, 10).describe() == "delay 5 ms each way, rate 10 Mbit/s each way"
    assert links.setting_record(links.setting(0, 100)) == {"delay_ms": 0.0, "rate_mbit": 100.0}
    assert links.recorded_setting({"delay_ms": 1.5, "rate_mbit": None}) == links.setting(1.5)
    assert links.recorded_setting(None).plain
    assert isinstance(links.setting(), LinkSetting)  # one LinkSetting: the campaign's
    for delay, rate in ((-1, None), (1001, None), (0, 0), (0, -5), (0, 1e9), ("x", None)):
        with pytest.raises(ValueError):
            links.setting(delay, rate)


def test_a_delay_counts_once_per_link_crossed_each_way():
    delays = {"h1": 5.0}
    assert links.added_one_way_ms(delays, "h1", "h2") == 5.0
    assert links.added_rtt_ms(delays, "h1", "h2") == links.added_rtt_ms(delays, "h2", "h1") == 10.0  # 2x
    assert links.added_rtt_ms({"h1": 5.0, "h2": 5.0}, "h1", "h2") == 20.0  # both links: 4x
    assert links.added_rtt_ms({"h1": 1.0, "h2": 5.0}, "h1", "h2") == 12.0
    assert links.added_rtt_ms(delays, "machine", "h1") == 10.0  # the machine has no link of its own to delay
    assert links.added_rtt_ms(delays, "machine", "h2") == 0.0
    assert links.added_rtt_ms(delays, "h1", "h1") == 0.0  # never leaves the host
    assert abs(links.payload_share() - 1448 / 1514) < 1e-12


def test_names_and_commands_of_a_delay_line():
    layout = make_layout("lk", 3, 2, 5)
    h2 = layout.host("h2")
    assert links.port_names(h2) == ("h2", "h2b", "h2d")
    assert max(len(n) for n in links.port_names(make_layout("lk", 64, 2, 5).host("h64"))) <= 15
    prepare = links.line_prepare_commands(h2)
    assert prepare[0] == "link add h2b type veth peer name h2d"
    assert "link set h2b addrgenmode none" in prepare and "link set h2d addrgenmode none" in prepare
    assert not any("master" in c for c in prepare)  # joins the bridge only once the line runs
    assert links.line_insert_commands(h2) == ["link set h2 nomaster", "link set h2b master br0"]
    assert links.line_remove_commands(h2) == ["link del h2b", "link set h2 master br0"]
    argv = links.delay_line_argv(layout, h2, 5, layout.logs_dir / "x.json", python="/usr/bin/python3")
    assert argv[:4] == ["nsenter", "--net=/run/netns/lk-sw", "--", "/usr/bin/python3"]
    assert argv[5] == str(links.DELAY_LINE) and argv[5].endswith("servebench/devtools/testbed/delay_line.py")
    assert argv[argv.index("--a") + 1] == "h2" and argv[argv.index("--b") + 1] == "h2d"
    assert float(argv[argv.index("--delay-ms") + 1]) == 5.0
    assert float(argv[argv.index("--max-delay-ms") + 1]) == MAX_LINK_DELAY_MS  # one cap, the setting's
    assert links.line_daemon_name(h2) == "delay-line-h2"
    log, stats = links.line_files(layout, h2)
    assert (log.name, stats.name) == ("switch.delay-line-h2.log", "switch.delay-line-h2.stats.json")


def test_rate_caps_are_tbf_on_both_ends_of_the_link():
    layout = make_layout("lk", 2, 2, 5)
    h1 = layout.host("h1")
    assert links.shaper_places(layout, h1) == [("lk-sw", "h1", "to_host"), ("lk-h1", "eth0", "from_host")]
    argv = links.shaper_argv("lk-sw", "h1", 10)
    assert argv[:9] == ["tc", "-n", "lk-sw", "qdisc", "replace", "dev", "h1", "root", "tbf"]
    assert argv[argv.index("rate") + 1] == "10000000bit" and argv[argv.index("latency") + 1] == "50ms"
    assert links.tbf_burst_bytes(10) == links.TBF_MIN_BURST  # a few frames at low rates
    assert links.tbf_burst_bytes(1000) == 125_000  # 1 ms at high ones
    assert links.shaper_argv("lk-sw", "h1", 0.5)[10] == "500000bit"
    assert links.unshaper_argv("lk-h1", "eth0") == ["tc", "-n", "lk-h1", "qdisc", "del", "dev", "eth0", "root"]
    assert links.qdisc_summary({"kind": "tbf", "options": {"rate": 1250000}}) == {"kind": "tbf", "rate_mbit": 10.0}
    assert links.qdisc_summary({"kind": "noqueue"}) is None and links.qdisc_summary(None) is None


def test_kernel_offers_are_said_plainly():
    text = links.offers_text({"netem": False, "tbf": True, "htb": True})
    assert "netem no" in text and "tbf yes" in text and "user-space delay line" in text and "rate: tbf" in text
    assert "cannot be capped" in links.offers_text({"netem": False, "tbf": False, "htb": False})


def test_delay_line_arguments_and_cli():
    cap = ["--max-delay-ms", repr(MAX_LINK_DELAY_MS)]
    args = delay_line.parse_args(["--a", "h1", "--b", "h1d", "--delay-ms", "1.5", *cap])
    assert (args.a, args.b, args.delay_ms, args.rt_priority) == ("h1", "h1d", 1.5, 10)
    too_long = ["--delay-ms", f"{MAX_LINK_DELAY_MS + 1:g}", *cap]
    for bad in (["--delay-ms", "-1", *cap], too_long, ["--delay-ms", "1", "--rt-priority", "100", *cap],
                ["--delay-ms", "1"]):
        with pytest.raises(SystemExit):
            delay_line.parse_args(["--a", "h1", "--b", "h1d", *bad])
    with pytest.raises(SystemExit):
        delay_line.parse_args(["--a", "h1", "--b", "h1", "--delay-ms", "1", *cap])
    parser = argparse.ArgumentParser()
    add_testbed_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["testbed", "link", "h2", "--delay-ms", "5", "--rate-mbit", "10", "--name", "lk1"])
    assert (args.action, args.host, args.delay_ms, args.rate_mbit, args.clear) == ("link", "h2", 5.0, 10.0, False)
    assert parser.parse_args(["testbed", "link", "h2", "--clear"]).clear


def test_percentile():
    assert links.percentile([3.0, 1.0, 2.0], 0.5) == 2.0
    assert links.percentile(list(map(float, range(1, 101))), 0.99) == 99.0


# ---------------------------------------------------------------------------- a real 2-host testbed

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
