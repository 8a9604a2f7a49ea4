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

import pytest

from servebench.cli.testbed import add_testbed_parser
from servebench.config.campaign import MAX_LINK_DELAY_MS, LinkSetting
from servebench.devtools.testbed import delay_line, links
from servebench.devtools.testbed.layout import make_layout

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


