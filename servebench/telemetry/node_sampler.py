"""Sample one node: CPU (total and per core, limited to the node's CPUs), memory, the RSS
of the engine's processes, network bytes/packets per interface, and, when it follows a server's
processes, who used the node's cores (`cpu_ticks`: the cores' ticks since the previous sample, the
server's, servebench's own and everyone else's; `CpuAccount`).

Standard library only (it reads /proc, Linux), so it runs with any node's python3: this
host's, or a remote node's from the node tools tree, whatever the engine build is (a venv,
or static binaries with no python at all): `python -m servebench.telemetry.node_sampler
--node n0 --cpus 0-3 --pids 123 --hz 5 --out samples.jsonl`. It stops on SIGTERM/SIGINT or
when every watched PID is gone. Timestamps are CLOCK_MONOTONIC (the load generator's clock)
plus wall time.
"""

from __future__ import annotations

import argparse
import os
import time

from servebench.telemetry.periodic import run_periodic

PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")
# on servebench's own measuring processes (samplers, scraper, load generator), as the node tools name it
INSTRUMENT_MARK = b"SERVEBENCH_INSTRUMENT=1"
RUN_MARK = "SERVEBENCH_PROCESS"  # <run id>.<sequence>, on every process a run's provider starts
SCAN_S = 1.0      # every process on the node is looked at once a second at most (the named foreign ones)
TOP_FOREIGN = 3   # foreign processes named per scan, the busiest first


def parse_cpus(text: str) -> list[int]:
    cpus: list[int] = []
    for part in text.split(","):
        if "-" in part:
            a, b = part.split("-")
            cpus.extend(range(int(a), int(b) + 1))
        elif part:
            cpus.append(int(part))
    return cpus


def _proc_stat(pid: int) -> tuple[str, int, int] | None:
    """(state, ppid, start ticks) of a process, None if there is none."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[0], int(fields[1]), int(fields[19])


def _rss_bytes(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/statm") as handle:
            return int(handle.read().split()[1]) * PAGE_BYTES
    except (OSError, IndexError, ValueError):
        return None


class EngineProcesses:
    """The watched processes and their descendants, each known by PID and start time (a reused
    PID is another process); the tree is re-walked at most every five seconds (a walk scans all of
    /proc and costs more than everything else in a sample; engine processes appear at start-up,
    not mid-run)."""

    REFRESH_S = 5.0

    def __init__(self, pids: list[int]):
        self.roots = {pid: stat[2] for pid in pids if (stat := _proc_stat(pid)) is not None}
        self.members: dict[int, int] = {}
        self.walked_at = float("-inf")

    def rss(self) -> tuple[int, int]:
        """Resident bytes of the processes and how many there are."""
        if time.monotonic() - self.walked_at >= self.REFRESH_S:
            self._walk()
        total = 0
        for pid in list(self.members):
            rss = _rss_bytes(pid)
            if rss is None or not self._same(pid, self.members[pid]):
                del self.members[pid]
            else:
                total += rss
        return total, len(self.members)

    def alive(self) -> bool:
        return any(self._same(pid, start) for pid, start in self.roots.items())

    @staticmethod
    def _same(pid: int, start: int) -> bool:
        stat = _proc_stat(pid)
        return stat is not None and stat[0] not in ("Z", "X") and stat[2] == start

    def _walk(self) -> None:
        table = {int(name): stat for name in os.listdir("/proc")
                 if name.isdigit() and (stat := _proc_stat(int(name))) is not None}
        children: dict[int, list[int]] = {}
        for pid, (_, ppid, _) in table.items():
            children.setdefault(ppid, []).append(pid)
        members: dict[int, int] = {}
        todo = [pid for pid, start in self.roots.items() if pid in table and table[pid][2] == start]
        while todo:
            pid = todo.pop()
            if pid not in members and table[pid][0] not in ("Z", "X"):
                members[pid] = table[pid][2]
                todo += children.get(pid, [])
        self.members = members
        self.walked_at = time.monotonic()


def _proc_ticks(pid: int) -> tuple[int, int, int, str] | None:
    """(user + system ticks, start ticks, the CPU it last ran on, its name) of a process, None if
    there is none."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            text = handle.read()
        name, rest = text[text.index("(") + 1:text.rindex(")")], text.rsplit(")", 1)[1].split()
        return int(rest[11]) + int(rest[12]), int(rest[19]), int(rest[36]), name
    except (OSError, IndexError, ValueError):
        return None


def _allowed_cpus(pid: int) -> set[int] | None:
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith("Cpus_allowed_list:"):
                    return set(parse_cpus(line.split(":", 1)[1].strip()))
    except OSError:
        return None
    return None


def _run_of(mark: str) -> str:
    return mark.rsplit(".", 1)[0] if "." in mark else ""


OWN_RUN = _run_of(os.environ.get(RUN_MARK, ""))


def boot_id() -> str:
    """This host's boot id: a PID names the same process only on the host (and boot) that gave it."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as handle:
            return handle.read().strip()
    except OSError:
        return ""


def _descends_from(pid: int, ancestor: int) -> bool:
    """Whether `ancestor` is `pid` or one of its parents (the ppid chain in /proc)."""
    seen = 0
    while pid > 1 and seen < 64:
        if pid == ancestor:
            return True
        stat = _read_stat(pid)
        if stat is None:
            return False
        pid, seen = int(stat[1]), seen + 1
    return False


def _read_stat(pid: int) -> list[str] | None:
    """/proc/<pid>/stat's fields after the command's name (state, ppid, ...), or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _kind_by_mark(pid: int) -> str:
    """servebench (its instrument mark), server (started by this run's provider, but not an
    instrument: another node's server processes on a node sharing these cores, a shared service) or
    foreign (no mark of this run; another user's environment is unreadable: foreign)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            variables = handle.read().split(b"\0")
    except OSError:
        return "foreign"
    if INSTRUMENT_MARK in variables:
        return "servebench"
    prefix = f"{RUN_MARK}=".encode()
    marks = [v[len(prefix):].decode(errors="replace") for v in variables if v.startswith(prefix)]
    return "server" if OWN_RUN and marks and _run_of(marks[0]) == OWN_RUN else "foreign"


def _uptime_ticks() -> float:
    """Clock ticks since boot (what a process's start time counts in)."""
    with open("/proc/uptime") as handle:
        return float(handle.read().split()[0]) * os.sysconf("SC_CLK_TCK")


def core_ticks(cpus: list[int]) -> tuple[int, int]:
    """(user + nice + system ticks, all ticks) summed over these cores, from /proc/stat: the time
    processes ran there, and the cores' whole time. Interrupt and steal time are no process's."""
    busy = everything = 0
    wanted = {f"cpu{c}" for c in cpus}
    with open("/proc/stat") as handle:
        for line in handle:
            name, *values = line.split()
            if name in wanted:
                ticks = [int(v) for v in values[:8]]
                busy += ticks[0] + ticks[1] + ticks[2]
                everything += sum(ticks)
    return busy, everything


class CpuAccount:
    """Who used the node's cores since the previous reading, in clock ticks: the cores' whole time,
    the time processes ran there, the server's processes (`EngineProcesses`, and any other process
    this run's provider started that is no instrument: another node's server on a node that shares
    these cores), servebench's own (its instrument mark) and everyone else's: the time processes ran
    there less the two.

    A process's ticks count on the cores when the CPUs it may run on are all among them, not at all
    when none are, and otherwise when it last ran on one of them (an estimate for a process spread
    over more cores than the server's). The server's processes are read every sample; every other
    process once a second (`SCAN_S`), which also names the busiest foreign ones.
    """

    def __init__(self, cpus: list[int], engine: EngineProcesses, orchestrator: int | None = None):
        self.cpus, self.cores, self.engine = cpus, set(cpus), engine
        self.orchestrator = orchestrator   # on the orchestrator's own host: its process tree is servebench's
        self.last_cores = core_ticks(cpus)
        self.ticks: dict[int, tuple[int, int]] = {}          # pid -> (start, ticks) at its last reading
        self.kind: dict[tuple[int, int], str] = {}           # (pid, start) -> server | servebench | foreign
        self.allowed: dict[tuple[int, int], set[int] | None] = {}
        self.scanned_at = float("-inf")
        self.scanned_uptime = _uptime_ticks()  # a process started after a scan is counted from its start

    def read(self) -> dict:
        busy, everything = core_ticks(self.cpus)
        delta = {"all": everything - self.last_cores[1], "busy": busy - self.last_cores[0],
                 "server": 0, "servebench": 0}
        self.last_cores = (busy, everything)
        server = set(self.engine.members)
        scan = time.monotonic() - self.scanned_at >= SCAN_S
        pids = self._all_pids() if scan else server | {pid for pid in self.ticks
                                                        if self._kind_of(pid) in ("server", "servebench")}
        foreign: dict[str, int] = {}
        for pid in pids:
            kind = "server" if pid in server else None
            used = self._used(pid, kind)
            if used is None:
                continue
            kind, ticks, name = used
            if kind == "foreign":
                if ticks:
                    foreign[f"pid {pid} ({name})"] = ticks
            else:
                delta[kind] += ticks
        if scan:
            self.scanned_at, self.scanned_uptime = time.monotonic(), _uptime_ticks()
            self.ticks = {pid: self.ticks[pid] for pid in pids if pid in self.ticks}
        # foreign: what other processes ran there (read once a scan, their ticks since the last), not the
        # cores' busy time less the server's: the kernel's own (interrupts, softirqs for the server's sockets)
        # is the server's cost, not another user's
        delta["foreign"] = sum(foreign.values())
        top = sorted(foreign.items(), key=lambda item: -item[1])[:TOP_FOREIGN]
        return delta | ({"foreign_top": dict(top)} if top else {})

    def _kind_of(self, pid: int) -> str | None:
        start = self.ticks.get(pid, (None, 0))[0]
        return None if start is None else self.kind.get((pid, start))

    @staticmethod
    def _all_pids() -> set[int]:
        return {int(name) for name in os.listdir("/proc") if name.isdigit()}

    def _used(self, pid: int, kind: str | None) -> tuple[str, int, str] | None:
        """(its kind, its ticks on the cores since its last reading, its name); None if it is gone.
        A process seen for the first time counts from then on."""
        stat = _proc_ticks(pid)
        if stat is None:
            return None
        total, start, last_cpu, name = stat
        key = (pid, start)
        if key not in self.kind:
            own = pid == os.getpid() or (self.orchestrator is not None and _descends_from(pid, self.orchestrator))
            self.kind[key] = kind or ("servebench" if own else _kind_by_mark(pid))
            self.allowed[key] = _allowed_cpus(pid)
        if kind is not None:
            self.kind[key] = kind
        was_start, was_total = self.ticks.get(pid, (None, 0))
        if was_start != start:  # first seen: from its start if that was after the last scan, else from now
            was_total = 0 if start > self.scanned_uptime else total
        self.ticks[pid] = (start, total)
        return self.kind[key], self._on_cores(key, last_cpu) * max(0, total - was_total), name

    def _on_cores(self, key: tuple[int, int], last_cpu: int) -> int:
        allowed = self.allowed.get(key)
        if allowed is not None and allowed <= self.cores:
            return 1
        if allowed is not None and not allowed & self.cores:
            return 0
        return int(last_cpu in self.cores)


def cpu_times() -> dict[int, tuple[int, int]]:
    """{cpu: (busy ticks, all ticks)} from /proc/stat. Idle is idle + iowait; guest time is already
    inside user and nice, so it is not counted twice (what psutil and top do)."""
    times = {}
    with open("/proc/stat") as handle:
        for line in handle:
            name, *values = line.split()
            if not name.startswith("cpu") or name == "cpu":
                continue
            ticks = [int(v) for v in values[:8]]  # user nice system idle iowait irq softirq steal
            everything = sum(ticks)
            times[int(name[3:])] = (everything - ticks[3] - ticks[4], everything)
    return times


class CpuPercent:
    """Per-core busy percent since the previous reading (the first reading is since start-up)."""

    def __init__(self) -> None:
        self.last = cpu_times()

    def read(self) -> dict[int, float]:
        now = cpu_times()
        percent = {}
        for cpu, (busy, everything) in now.items():
            was_busy, was_everything = self.last.get(cpu, (0, 0))
            elapsed = everything - was_everything
            percent[cpu] = round(100.0 * max(0, busy - was_busy) / elapsed, 1) if elapsed > 0 else 0.0
        self.last = now
        return percent


def memory() -> tuple[int, int]:
    """(total, available) bytes from /proc/meminfo."""
    values = {}
    with open("/proc/meminfo") as handle:
        for line in handle:
            name, _, rest = line.partition(":")
            if name in ("MemTotal", "MemAvailable"):
                values[name] = int(rest.split()[0]) * 1024
    return values["MemTotal"], values["MemAvailable"]


def net_counters() -> dict[str, list[int]]:
    """{interface: [bytes sent, bytes received, packets sent, packets received]} of this network
    namespace, from /proc/net/dev."""
    counters = {}
    with open("/proc/net/dev") as handle:
        for line in list(handle)[2:]:
            name, _, rest = line.partition(":")
            fields = [int(v) for v in rest.split()]
            counters[name.strip()] = [fields[8], fields[0], fields[9], fields[1]]
    return counters


def sample(node: str, cpus: list[int], engine: EngineProcesses, cpu: CpuPercent,
           account: CpuAccount | None = None) -> dict:
    per_core = cpu.read()
    mine = [per_core[c] for c in cpus if c in per_core]
    total, available = memory()
    rss, nprocs = engine.rss()
    return {
        "node": node, "t_mono": time.monotonic(), "t_wall": time.time(),
        "cpu_pct": sum(mine) / len(mine) if mine else None,
        "cpu_pct_per_core": {str(c): per_core[c] for c in cpus if c in per_core},
        "mem_used_bytes": total - available, "mem_available_bytes": available,
        "engine_rss_bytes": rss, "engine_processes": nprocs,
        "net": net_counters(),
    } | ({"cpu_ticks": account.read()} if account is not None else {})


def run(node: str, cpus: list[int], pids: list[int], hz: float, out: str, orchestrator: int | None = None) -> int:
    engine = EngineProcesses(pids)
    cpu = CpuPercent()
    account = CpuAccount(cpus, engine, orchestrator) if pids else None  # a client-only node has no server
    return run_periodic(hz, out, lambda: sample(node, cpus, engine, cpu, account),
                        done=lambda: bool(pids) and not engine.alive())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--node", required=True)
    parser.add_argument("--cpus", required=True, help="the node's CPUs, e.g. 0-3,8")
    parser.add_argument("--pids", default="", help="engine processes to follow (with descendants)")
    parser.add_argument("--hz", type=float, default=5.0)
    parser.add_argument("--out", required=True)
    parser.add_argument("--orchestrator", default="", metavar="BOOT_ID:PID",
                        help="the orchestrator's process: on its own host, its process tree (the CLI, its Prefect "
                             "server) is servebench's, not foreign")
    args = parser.parse_args()
    pids = [int(p) for p in args.pids.split(",") if p]
    boot, _, pid = args.orchestrator.partition(":")
    orchestrator = int(pid) if pid.isdigit() and boot == boot_id() else None
    run(args.node, parse_cpus(args.cpus), pids, args.hz, args.out, orchestrator)


if __name__ == "__main__":
    main()
