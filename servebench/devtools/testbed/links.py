"""A network knob: one-way delay and a bandwidth cap on a testbed host's link.

Host I's link is everything between its `eth0` and the bridge: the veth pair `eth0` (in the
host's namespace) / `hI` (a port of `br0` in the switch namespace). What a setting means
(docs/testbed.md, "Link latency and bandwidth"):

- delay D ms: every frame that crosses the link, in either direction, arrives D ms later than
  it would have. Between hosts A and B a frame crosses A's link and B's link, so one way
  takes d_A + d_B more and a round trip 2 (d_A + d_B) more (`added_rtt_ms`); between the
  machine (the orchestrator, `<subnet>.254`) and host I, 2 d_I more.
- rate R Mbit/s: each direction of the link, on its own, carries at most R Mbit/s, counted
  as the kernel's shaper counts: whole Ethernet frames, 14-byte header included (no preamble
  or gap), so TCP's payload gets at most R x 1448/1514 (95.6%). A frame that would wait more
  than TBF_QUEUE_MS in the shaper's queue is dropped, as by a switch port's full buffer.
- a call sets the whole link: `set_link(layout, "h2", delay_ms=5)` also lifts a rate cap set
  before; `clear_link` (delay 0, no rate) gives the plain link back, exactly as `up` built it.

How: this kernel has `tbf` but no `netem` (`kernel_offers()` probes, in a throw-away network
namespace, which queueing disciplines the kernel has). The rate is a `tbf` on the egress of
both ends of the link: the switch port `hI` (towards the host) and the host's `eth0` (from
the host). The delay is a delay line (`delay_line.py`, a user-space process in the switch
namespace): `hI` leaves the bridge, a new veth pair `hIb` (on the bridge) / `hId` joins, and
the delay line copies every frame between `hI` and `hId` after holding it D ms. The same
mechanism is used whether or not a kernel has netem, so numbers taken on two machines mean
the same thing. The delay line is recorded in the testbed's state like a daemon (PID and
start time, host `switch`), so `down` stops it by PID.

A setting is the campaign's `LinkSetting` (servebench/config/campaign.py: its bounds, the delay
line's cap included). Pure parts (settings, names, argv, the semantics) first, then the side
effects (`set_link`, `clear_link`, `link_state`, `kernel_offers`; `TestbedLinks`, the same as
the link shaper a provider of testbed hosts is handed), then measurements taken between hosts
(`ping_rtts_ms`, `tcp_throughput_mbit`) for tests and benchmarks.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import psutil
from pydantic import ValidationError

from servebench.config.campaign import MAX_LINK_DELAY_MS, LinkSetting
from servebench.config.node import Node
from servebench.devtools.testbed import configs
from servebench.devtools.testbed.layout import Host, Layout
from servebench.devtools.testbed.machine import (
    Daemon,
    TestbedError,
    batch,
    load,
    locked,
    netns_exists,
    read_state,
    require_root,
    run,
    stop_processes,
    write_state,
)
from servebench.providers.base import LinkShaper, Provider
from servebench.waiting import poll

DELAY_LINE = Path(__file__).with_name("delay_line.py")  # run by its path: standard library only
ETH_FRAME = 1514  # the largest frame on a link (MTU 1500 + the Ethernet header), as tbf counts it
TBF_MIN_BURST = 4 * ETH_FRAME  # bytes the shaper may send back to back: a few frames...
TBF_BURST_S = 0.001  # ...or 1 ms worth of the rate, the larger
TBF_QUEUE_MS = 50  # a frame waits at most this long in the shaper's queue, else it is dropped
RT_PRIORITY = 10  # the delay line's SCHED_FIFO priority (see delay_line.py)
LINE_READY_S = 10.0
SWITCH = "switch"  # Daemon.host of a delay line: it runs in the switch's network namespace
HOST_DEV = "eth0"
BRIDGE = "br0"
MACHINE = "machine"  # the machine itself, as an end of a measurement: no link of its own to delay
# qdisc kind -> the arguments that add one (probed on `lo` of a throw-away network namespace)
QDISC_PROBES = {
    "netem": ["netem", "delay", "1ms"],
    "tbf": ["tbf", "rate", "1mbit", "burst", "16kb", "latency", "10ms"],
    "htb": ["htb", "default", "1"],
}


# ---------------------------------------------------------------------------- settings and semantics

def setting(delay_ms: float = 0.0, rate_mbit: float | None = None) -> LinkSetting:
    """A checked setting (the campaign's `LinkSetting`: its bounds; ValueError names the bad value)."""
    try:
        return LinkSetting(delay_ms=float(delay_ms), rate_mbit=None if rate_mbit is None else float(rate_mbit))
    except ValidationError as exc:
        raise ValueError("; ".join(f"{error['loc'][0]} {error['input']!r}: {error['msg'].lower()}"
                                   for error in exc.errors())) from None
    except (TypeError, ValueError) as exc:
        raise ValueError(str(exc)) from None


def setting_record(link: LinkSetting) -> dict:
    """What the testbed's state records of a host's link."""
    return {"delay_ms": link.delay_ms, "rate_mbit": link.rate_mbit}


def recorded_setting(data: dict | None) -> LinkSetting:
    """A host's link as the testbed's state recorded it (nothing recorded: plain)."""
    return setting(**data) if data else setting()


def added_one_way_ms(delays: dict[str, float], src: str, dst: str) -> float:
    """Delay added to a frame from src to dst (host names, or "machine"): the delay of each
    host link it crosses. delays: host name -> its link's delay (missing: 0)."""
    if src == dst:
        return 0.0  # never leaves the host
    return sum(delays.get(end, 0.0) for end in (src, dst) if end != MACHINE)


def added_rtt_ms(delays: dict[str, float], src: str, dst: str) -> float:
    """Round-trip time added between src and dst: twice the one-way delay added."""
    return 2 * added_one_way_ms(delays, src, dst)


def payload_share(mtu: int = 1500) -> float:
    """The share of a capped rate TCP's payload can get: 1448-byte segments (timestamps on) in
    1514-byte frames."""
    return (mtu - 52) / (mtu + 14)


# ---------------------------------------------------------------------------- names and argv

def port_names(host: Host) -> tuple[str, str, str]:
    """In the switch namespace: the host's port (`h2`), the delay line's veth end on the bridge
    (`h2b`) and its other end, the delay line's side (`h2d`)."""
    return host.name, f"{host.name}b", f"{host.name}d"


def line_prepare_commands(host: Host) -> list[str]:
    """`ip -batch` commands (switch namespace): the delay line's veth pair, up, no addresses of
    its own (so nothing but the hosts' frames crosses it), not on the bridge yet."""
    _, bridge_end, line_end = port_names(host)
    return [f"link add {bridge_end} type veth peer name {line_end}",
            f"link set {bridge_end} addrgenmode none", f"link set {line_end} addrgenmode none",
            f"link set {bridge_end} up", f"link set {line_end} up"]


def line_insert_commands(host: Host) -> list[str]:
    """The switch-over, once the delay line runs: the host's port leaves the bridge, the line's
    bridge end joins it."""
    port, bridge_end, _ = port_names(host)
    return [f"link set {port} nomaster", f"link set {bridge_end} master {BRIDGE}"]


def line_remove_commands(host: Host) -> list[str]:
    """Back to the plain link: the line's veth pair goes (both ends), the host's port is a port
    of the bridge again."""
    port, bridge_end, _ = port_names(host)
    return [f"link del {bridge_end}", f"link set {port} master {BRIDGE}"]


def delay_line_argv(layout: Layout, host: Host, delay_ms: float, stats: Path,
                    python: str = sys.executable) -> list[str]:
    """The delay line of a host's link, in the switch's network namespace (and the machine's
    file system: its path and this Python are visible there)."""
    port, _, line_end = port_names(host)
    return ["nsenter", f"--net={switch_netns_file(layout)}", "--", python, "-I", str(DELAY_LINE),
            "--a", port, "--b", line_end, "--delay-ms", repr(float(delay_ms)),
            "--max-delay-ms", repr(MAX_LINK_DELAY_MS), "--rt-priority", str(RT_PRIORITY), "--stats", str(stats)]


def switch_netns_file(layout: Layout) -> Path:
    return Path("/run/netns") / layout.switch_netns


def tbf_burst_bytes(rate_mbit: float) -> int:
    return max(TBF_MIN_BURST, math.ceil(rate_mbit * 1e6 / 8 * TBF_BURST_S))


def shaper_argv(netns: str, dev: str, rate_mbit: float) -> list[str]:
    """A tbf on dev's egress: at most rate_mbit, a short burst, TBF_QUEUE_MS of queue."""
    return ["tc", "-n", netns, "qdisc", "replace", "dev", dev, "root", "tbf", "rate", f"{round(rate_mbit * 1e6)}bit",
            "burst", str(tbf_burst_bytes(rate_mbit)), "latency", f"{TBF_QUEUE_MS}ms"]


def unshaper_argv(netns: str, dev: str) -> list[str]:
    return ["tc", "-n", netns, "qdisc", "del", "dev", dev, "root"]


def shaper_places(layout: Layout, host: Host) -> list[tuple[str, str, str]]:
    """(network namespace, device, direction) of the two shapers of a host's link: each on the
    egress of one end."""
    return [(layout.switch_netns, host.name, "to_host"), (host.netns, HOST_DEV, "from_host")]


def line_daemon_name(host: Host) -> str:
    return f"delay-line-{host.name}"


def line_files(layout: Layout, host: Host) -> tuple[Path, Path]:
    """The delay line's log and counters (JSON) files."""
    base = f"{SWITCH}.{line_daemon_name(host)}"
    return layout.logs_dir / f"{base}.log", layout.logs_dir / f"{base}.stats.json"


def find_line(daemons: list[Daemon], host: Host) -> Daemon | None:
    return next((d for d in daemons if d.host == SWITCH and d.name == line_daemon_name(host)), None)


def offers_text(offers: dict[str, bool]) -> str:
    have = ", ".join(f"{kind} {'yes' if ok else 'no'}" for kind, ok in offers.items())
    return (f"kernel qdiscs: {have}; delay: a user-space delay line (servebench/devtools/testbed/delay_line.py)"
            f"{', netem unused' if offers.get('netem') else ''}; rate: "
            + ("tbf" if offers.get("tbf") else "NONE (no tbf in this kernel: rates cannot be capped)"))


# ---------------------------------------------------------------------------- what the kernel offers

def probe_qdisc(kind: str) -> str | None:
    """None when the kernel has this queueing discipline, else tc's error. Probed on `lo` of a
    network namespace of its own that goes away with the command: nothing is left."""
    require_root()
    result = subprocess.run(["unshare", "--net", "--", "tc", "qdisc", "add", "dev", "lo", "root", *QDISC_PROBES[kind]],
                            capture_output=True, text=True, timeout=10, stdin=subprocess.DEVNULL)
    return None if result.returncode == 0 else (result.stderr or result.stdout).strip() or f"exit {result.returncode}"


def kernel_offers() -> dict[str, bool]:
    """Which of netem, tbf and htb this kernel has (modules it can load included)."""
    return {kind: probe_qdisc(kind) is None for kind in QDISC_PROBES}


# ---------------------------------------------------------------------------- reading the kernel

def switch_links(layout: Layout) -> dict[str, dict]:
    """Interfaces of the switch namespace: name -> `ip -j link` record ({} without the namespace)."""
    if not netns_exists(layout.switch_netns):
        return {}
    result = run(["ip", "-n", layout.switch_netns, "-j", "link", "show"], check=False)
    try:
        return {link["ifname"]: link for link in json.loads(result.stdout or "[]")}
    except (json.JSONDecodeError, KeyError, TypeError):
        return {}


def root_qdiscs(netns: str, dev: str | None = None) -> dict[str | None, dict]:
    """device -> its root qdisc, from `tc -j qdisc show` in a network namespace (an entry without
    a device name is under `dev`)."""
    if not netns_exists(netns):
        return {}
    result = run(["tc", "-n", netns, "-j", "qdisc", "show"] + (["dev", dev] if dev else []), check=False)
    try:
        return {q["dev"] if "dev" in q else dev: q for q in json.loads(result.stdout or "[]") if q.get("root")}
    except (json.JSONDecodeError, KeyError, TypeError):
        return {}


def qdisc_summary(qdisc: dict | None) -> dict | None:
    """{"kind": "tbf", "rate_mbit": 10.0} for a shaper (tc reports a tbf rate in bytes/s), None
    for no shaper (noqueue, or nothing)."""
    if not qdisc or qdisc.get("kind") in (None, "noqueue"):
        return None
    out = {"kind": qdisc["kind"]}
    rate = (qdisc.get("options") or {}).get("rate")
    if isinstance(rate, (int, float)):
        out["rate_mbit"] = round(rate * 8 / 1e6, 6)
    return out


def read_counters(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


# ---------------------------------------------------------------------------- the side effects

def set_link(layout: Layout, host: Host | str, delay_ms: float = 0, rate_mbit: float | None = None) -> dict:
    """Set host's link to delay_ms one way (each way) and rate_mbit each way (None: no cap);
    0 and None give the plain link back. Returns the link's state as `link_state` reads it
    back from the kernel. On a failure the link is made plain again and TestbedError says why."""
    wanted = setting(delay_ms, rate_mbit)
    require_root()
    target = host if isinstance(host, Host) else layout.host(host)
    if wanted.rate_mbit is not None and (missing := probe_qdisc("tbf")) is not None:
        raise TestbedError(f"this kernel has no tbf qdisc ({missing}): a rate cannot be capped; "
                           "the testbed never pretends it is")
    with locked(layout.state_dir):  # one change of this testbed's links at a time
        layout, daemons, data = current_state(layout)
        links = dict(data.get("links") or {})

        def save() -> None:
            extra = {k: v for k, v in data.items() if k not in ("layout", "phase", "daemons", "links")}
            write_state(layout, daemons, data["phase"], links=links, **extra)

        try:
            apply(layout, target, wanted, recorded_setting(links.get(target.name)), daemons, save)
        except BaseException as exc:
            left = make_plain(layout, target, daemons)
            links.pop(target.name, None)
            save()
            message = f"link {target.name}: {exc}; the link is plain again"
            if left:
                message += " except: " + "; ".join(left)
            if isinstance(exc, KeyboardInterrupt):
                raise
            raise TestbedError(message) from exc
        if wanted.plain:
            links.pop(target.name, None)
        else:
            links[target.name] = setting_record(wanted)
        save()
    return link_state(layout, only=[target.name])[target.name]


def connect_host(layout: Layout, host: Host | str, connected: bool) -> str:
    """Cut a host off the testbed's network (its port on the switch down: every frame to and from
    it stops, as a pulled cable would; its processes keep running), or connect it again. Returns
    the port's state as the kernel reads it back ('DOWN', or 'UP' once the link is up again)."""
    require_root()
    target = host if isinstance(host, Host) else layout.host(host)
    port = port_names(target)[0]
    run(["ip", "-n", layout.switch_netns, "link", "set", port, "up" if connected else "down"])
    shown = json.loads(run(["ip", "-n", layout.switch_netns, "-j", "link", "show", port]).stdout)
    return str(shown[0].get("operstate")) if shown else "gone"


def set_machine_rate(layout: Layout, rate_mbit: float | None) -> dict[str, str | None]:
    """Cap the machine's own link into the switch (the orchestrator's, `<name>-tb`) at rate_mbit each
    way, or uncap it (None). A cluster's orchestrator has one link like every node; uncapped, the
    machine's link would let copies from the orchestrator run beside each other at the hosts' full
    rate, which no real login node offers. The shapers go with the link at `down`. Returns each
    end's root qdisc kind as the kernel reads it back (None: no shaper)."""
    require_root()
    ends = {MACHINE: ["tc", "-n", layout.switch_netns], layout.machine_link: ["tc"]}  # to the machine, from it
    kinds: dict[str, str | None] = {}
    for dev, tc in ends.items():
        if rate_mbit is not None:
            run(tc + ["qdisc", "replace", "dev", dev, "root", "tbf", "rate", f"{round(rate_mbit * 1e6)}bit",
                      "burst", str(tbf_burst_bytes(rate_mbit)), "latency", f"{TBF_QUEUE_MS}ms"])
        else:
            run(tc + ["qdisc", "del", "dev", dev, "root"], check=False)  # none there: tc says so, nothing to undo
        shown = json.loads(run(tc + ["-j", "qdisc", "show", "dev", dev]).stdout or "[]")
        kinds[dev] = next((q.get("kind") for q in shown if q.get("root") and q.get("kind") == "tbf"), None)
    return kinds


def clear_link(layout: Layout, host: Host | str) -> dict:
    """The plain link again: no delay line, no shaper."""
    return set_link(layout, host, 0, None)


class TestbedLinks(LinkShaper):
    """The link shaper a provider is handed when its nodes are hosts of the project's testbed (ssh
    and slurm on the testbed): the orchestrator sets the link's delay line and shaper on the
    testbed's switch, or takes the node's switch port down, by the node's address. A node that
    is not a host of that testbed is refused, naming the testbed's hosts."""

    __test__ = False  # not a pytest class (its name begins with Test)

    def shape_link(self, testbed: str, node: Node, delay_ms: float, rate_mbit: float | None) -> dict:
        layout, host = testbed_host(testbed, node)
        return set_link(layout, host, delay_ms, rate_mbit)

    def connect_node(self, testbed: str, node: Node, connected: bool) -> str:
        layout, host = testbed_host(testbed, node)
        return connect_host(layout, host, connected)


def testbed_host(testbed: str, node: Node) -> tuple[Layout, Host]:
    """(the testbed's layout, its host at the node's address)."""
    layout = load(testbed)
    for host in layout.hosts:
        if host.address == node.address:
            return layout, host
    raise ValueError(f"node {node.name} ({node.address or 'no address'}) is not a host of testbed {testbed} "
                     f"(its hosts: {', '.join(f'{h.name} {h.address}' for h in layout.hosts)})")


def with_testbed_links(provider: Provider) -> Provider:
    """The provider, with the testbed's link shaper handed to it unless one was (a test's own):
    what a caller that acts on the links of a campaign's testbed (`network.testbed`, a cut-host
    fault's `testbed`) calls first."""
    if provider.link_shaper is None:
        provider.use_link_shaper(TestbedLinks())
    return provider


def current_state(layout: Layout) -> tuple[Layout, list[Daemon], dict]:
    found, daemons, data = read_state(layout.state_dir)
    if found is None:
        raise TestbedError(f"no testbed {layout.name!r} (no {layout.state_file})")
    if data.get("phase") != "up":
        raise TestbedError(f"testbed {layout.name} is {data.get('phase')!r}, not up: links are set on a testbed "
                           "that is up")
    return found, daemons, data


def apply(layout: Layout, host: Host, wanted: LinkSetting, before: LinkSetting, daemons: list[Daemon],
          save) -> None:
    port, bridge_end, line_end = port_names(host)
    sw = ["ip", "-n", layout.switch_netns, "-batch", "-"]
    present = switch_links(layout)
    if port not in present:
        raise TestbedError(f"no port {port} in {layout.switch_netns}: is the testbed complete?")
    line = find_line(daemons, host)
    if wanted.delay_ms > 0:
        keep = (line is not None and line.alive() and before.delay_ms == wanted.delay_ms
                and present.get(bridge_end, {}).get("master") == BRIDGE and present[port].get("master") != BRIDGE)
        if not keep:
            if line is not None:
                stop_line(daemons, line)
                save()
            if bridge_end not in present or line_end not in present:
                batch(sw, line_prepare_commands(host))
            start_line(layout, host, wanted.delay_ms, daemons)
            save()
            batch(sw, line_insert_commands(host))
    else:
        if line is not None:
            stop_line(daemons, line)
            save()
        commands = [] if bridge_end not in present else [f"link del {bridge_end}"]
        if present[port].get("master") != BRIDGE:
            commands.append(f"link set {port} master {BRIDGE}")
        if commands:
            batch(sw, commands)
    for netns, dev, _ in shaper_places(layout, host):
        if wanted.rate_mbit is not None:
            run(shaper_argv(netns, dev, wanted.rate_mbit))
        else:
            remove_shaper(netns, dev)


def remove_shaper(netns: str, dev: str) -> None:
    """Deletes dev's root qdisc if it is a tbf (ours); anything else is left as it is."""
    if (root_qdiscs(netns, dev).get(dev) or {}).get("kind") == "tbf":
        run(unshaper_argv(netns, dev))


def start_line(layout: Layout, host: Host, delay_ms: float, daemons: list[Daemon]) -> Daemon:
    """Starts the delay line, records it (PID, start time) and waits for its `ready` line."""
    log_path, stats = line_files(layout, host)
    stats.unlink(missing_ok=True)
    offset = log_path.stat().st_size if log_path.exists() else 0
    with open(log_path, "ab") as log_file:
        proc = subprocess.Popen(delay_line_argv(layout, host, delay_ms, stats), stdin=subprocess.DEVNULL,
                                stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True,
                                env=configs.daemon_env(), cwd="/")
    try:
        created = psutil.Process(proc.pid).create_time()
    except psutil.NoSuchProcess:
        created = 0.0
    daemon = Daemon(host=SWITCH, name=line_daemon_name(host), pid=proc.pid, started=created, log=str(log_path))
    daemons.append(daemon)

    def failed() -> TestbedError:
        text = log_path.read_text(errors="replace")[offset:]
        return TestbedError(f"the delay line of {host.name} did not start (see {log_path}): "
                            + (" | ".join(text.strip().splitlines()[-3:]) or "no output"))

    def ready() -> bool:
        if "ready:" in log_path.read_text(errors="replace")[offset:]:
            return True
        if proc.poll() is not None:
            raise failed()
        return False

    if not poll(ready, LINE_READY_S, interval_s=0.02):
        raise failed()
    proc.returncode = proc.returncode or 0  # not waited on here: it outlives this process (no ResourceWarning)
    return daemon


def stop_line(daemons: list[Daemon], line: Daemon) -> None:
    """SIGTERM by its recorded PID (checked against its start time), SIGKILL after a grace."""
    proc = line.process()
    if proc is not None and stop_processes([proc]):
        raise TestbedError(f"the delay line {line.pid} would not stop")
    daemons.remove(line)


def make_plain(layout: Layout, host: Host, daemons: list[Daemon]) -> list[str]:
    """After a failure: no delay line, the port on the bridge, no shaper. Returns what failed."""
    left = []
    line = find_line(daemons, host)
    if line is not None:
        try:
            stop_line(daemons, line)
        except TestbedError as exc:
            left.append(str(exc))
    port, bridge_end, _ = port_names(host)
    present = switch_links(layout)
    commands = [f"link del {bridge_end}"] if bridge_end in present else []
    if port in present and present[port].get("master") != BRIDGE:
        commands.append(f"link set {port} master {BRIDGE}")
    if commands:
        try:
            batch(["ip", "-n", layout.switch_netns, "-batch", "-"], commands)
        except TestbedError as exc:
            left.append(str(exc))
    for netns, dev, _ in shaper_places(layout, host):
        try:
            remove_shaper(netns, dev)
        except TestbedError as exc:
            left.append(str(exc))
    return left


def link_state(layout: Layout, only: list[str] | None = None) -> dict[str, dict]:
    """host name -> its link: what was set (delay_ms, rate_mbit), and what the kernel has, read
    back (the delay line's process and counters, which ports are on the bridge, the shapers);
    `problems` lists every difference between the two (empty: the link is what was set). `only`:
    those hosts' links alone (a `tc` call per host read: setting 32 links one by one must not read
    back 32 x 32)."""
    _, daemons, data = read_state(layout.state_dir)
    recorded = data.get("links") or {}
    present = switch_links(layout)
    switch_qdiscs = root_qdiscs(layout.switch_netns)
    state = {}
    for host in [h for h in layout.hosts if only is None or h.name in only]:
        port, bridge_end, _ = port_names(host)
        wanted = recorded_setting(recorded.get(host.name))
        line = find_line(daemons, host)
        to_host = qdisc_summary(switch_qdiscs.get(port))
        from_host = qdisc_summary(root_qdiscs(host.netns, HOST_DEV).get(HOST_DEV))
        port_on_bridge = present.get(port, {}).get("master") == BRIDGE
        line_on_bridge = present.get(bridge_end, {}).get("master") == BRIDGE
        alive = line is not None and line.alive()
        problems = []
        if wanted.delay_ms > 0:
            if not alive:
                problems.append("its delay line is not running: the link is cut")
            if port_on_bridge or not line_on_bridge:
                problems.append(f"the delay line is not in the path ({port} on the bridge: {port_on_bridge}, "
                                f"{bridge_end} on the bridge: {line_on_bridge})")
        else:
            if line is not None and alive:
                problems.append(f"a delay line runs (pid {line.pid}) though no delay is set")
            if present and not port_on_bridge:
                problems.append(f"{port} is not on the bridge: the link is cut")
        for direction, shaper in (("to_host", to_host), ("from_host", from_host)):
            if wanted.rate_mbit is None and shaper is not None:
                problems.append(f"a {shaper['kind']} shapes {direction} though no rate is set")
            if wanted.rate_mbit is not None and (shaper is None or shaper.get("kind") != "tbf"
                                                 or abs(shaper.get("rate_mbit", 0) - wanted.rate_mbit)
                                                 > 1e-3 * wanted.rate_mbit):
                problems.append(f"{direction}: {shaper or 'no shaper'} instead of tbf at {wanted.rate_mbit:g} Mbit/s")
        counters = read_counters(line_files(layout, host)[1]) if line is not None else None
        state[host.name] = {
            "delay_ms": wanted.delay_ms, "rate_mbit": wanted.rate_mbit, "setting": wanted.describe(),
            "delay_line": None if line is None else {"pid": line.pid, "alive": alive, "log": line.log,
                                                     "counters": counters},
            "port_on_bridge": port_on_bridge, "shaper": {"to_host": to_host, "from_host": from_host},
            "problems": problems,
        }
    return state


def state_lines(state: dict[str, dict]) -> list[str]:
    """Text lines for `status` and `link`: the links that are not plain, and every problem."""
    lines = []
    for name, link in state.items():
        if link["setting"] == "plain" and not link["problems"]:
            continue
        text = f"  link {name}: {link['setting']}"
        line = link["delay_line"]
        if line:
            text += f"; delay line pid {line['pid']} {'alive' if line['alive'] else 'DEAD'}"
            directions = ((line.get("counters") or {}).get("directions") or {}).values()
            frames = sum(d["frames"] for d in directions)
            if frames:
                late = max(d["max_late_ms"] for d in directions)
                mean = sum(d["mean_late_ms"] * d["frames"] for d in directions) / frames
                drops = sum(d["dropped_queue_full"] + d["dropped_refused"] for d in directions)
                text += f", {frames} frames, mean {mean:.3f} / max {late:.3f} ms late, {drops} dropped"
        lines.append(text)
        lines += [f"    PROBLEM: {p}" for p in link["problems"]]
    return lines or ["  links: all plain (no delay, no rate cap)"]


# ---------------------------------------------------------------------------- measurements

def net_prefix(layout: Layout, who: str) -> list[str]:
    """Runs a command in a host's network namespace only (the machine's files: this Python and
    its path are visible), or on the machine itself for "machine"."""
    return [] if who == MACHINE else ["nsenter", f"--net={layout.netns_file(layout.host(who))}", "--"]


def address(layout: Layout, who: str) -> str:
    return layout.machine_address if who == MACHINE else layout.host(who).address


def ping_rtts_ms(layout: Layout, src: str, dst: str, count: int = 50, interval_s: float = 0.01) -> list[float]:
    """Round-trip times (ms) of `count` pings from src to dst (host names or "machine"); a lost
    ping is missing from the list. iputils prints 3 significant digits (10.3 ms)."""
    if not 1 <= count <= 10_000:
        raise ValueError("count: 1 to 10000")
    argv = net_prefix(layout, src) + ["ping", "-n", "-c", str(count), "-i", f"{interval_s:g}", "-W", "2",
                                      address(layout, dst)]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=count * interval_s + 15,
                            stdin=subprocess.DEVNULL)
    return [float(t) for t in re.findall(r"time=([0-9.]+) ms", result.stdout)]


TCP_SERVER = r"""
import socket, sys, time
window, limit = float(sys.argv[2]), float(sys.argv[3])
server = socket.socket()
server.bind((sys.argv[1], 0))
server.listen(1)
server.settimeout(limit)
print(server.getsockname()[1], flush=True)
conn, _ = server.accept()
conn.settimeout(limit)
buf = bytearray(1 << 20)
total = 0
first = last = None
while True:  # counts what arrives within `window` of the first byte, then hangs up: bounded
    n = conn.recv_into(buf)
    now = time.monotonic()
    if not n:
        break
    if first is None:
        first = now  # the first chunk only starts the clock
    elif now - first > window:
        break
    else:
        total, last = total + n, now
conn.close()
print(total, (last - first) if last is not None else 0.0, flush=True)
"""

TCP_CLIENT = r"""
import socket, sys, time
conn = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[4]))
data = bytes(64 * 1024)
end = time.monotonic() + float(sys.argv[3])
try:
    while time.monotonic() < end:
        conn.sendall(data)
except OSError:  # the receiver hung up once its window was over
    pass
conn.close()
"""


def tcp_throughput_mbit(layout: Layout, src: str, dst: str, seconds: float = 2.0) -> float:
    """One TCP connection from src to dst: the payload rate (Mbit/s) the receiver saw within
    `seconds` of its first byte (then it hangs up, so a slow link never makes this run long).
    Python on both ends (one core each at most): a ceiling of its own on a fast path."""
    if not 0 < seconds <= 60:
        raise ValueError("seconds: up to 60")
    limit = seconds + 30
    server = subprocess.Popen(net_prefix(layout, dst) + [sys.executable, "-I", "-c", TCP_SERVER, address(layout, dst),
                                                          str(seconds), str(limit)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    try:
        assert server.stdout is not None and server.stderr is not None  # started with both PIPE
        port = server.stdout.readline().strip()
        if not port.isdigit():
            raise TestbedError(f"the TCP receiver on {dst} did not start: {server.stderr.read()[-500:]}")
        client = subprocess.run(net_prefix(layout, src) + [sys.executable, "-I", "-c", TCP_CLIENT, address(layout, dst),
                                                           port, str(seconds + 1), str(limit)],
                                capture_output=True, text=True, timeout=limit, stdin=subprocess.DEVNULL)
        if client.returncode != 0:
            raise TestbedError(f"the TCP sender on {src} failed: {client.stderr.strip()[-500:]}")
        out, err = server.communicate(timeout=limit)
        fields = out.split()
        if len(fields) != 2 or float(fields[1]) <= 0:
            raise TestbedError(f"the TCP receiver on {dst} reported {out!r} {err[-300:]}")
        return int(fields[0]) * 8 / float(fields[1]) / 1e6
    finally:
        if server.poll() is None:
            server.kill()  # our own child, by its PID
            server.wait(timeout=10)
        for stream in (server.stdout, server.stderr):
            if stream is not None:  # both PIPE: never None
                stream.close()


def percentile(values: list[float], share: float) -> float:
    """Nearest-rank percentile (share 0..1) of a non-empty list."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(share * len(ordered)) - 1))]
