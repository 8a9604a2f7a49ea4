"""What a test may leave behind, seen from this machine: processes, /dev/shm entries, network
namespaces, ssh masters, entries in the temp dir (a killed engine's sockets, a run's scratch), a CPU's idle
setting (the load generator's idle polling, servebench/load/pinning.py). Only what appeared during the test counts (a module's fixture, a
testbed, may hold things across its tests). `snapshot` before the test, `leaks_since` after it (waiting a little
for what is still ending), `stop_leaked` by PID."""

from __future__ import annotations

import fnmatch
import glob
import os
import signal
import tempfile
from dataclasses import dataclass, field

import psutil

from servebench.providers import node_tools
from servebench.waiting import poll

HARNESS_MARKERS = ("prefect.server", "prefect/server")  # a Prefect test harness a fixture may keep
# what may appear in the temp dir and stay: pytest's own, caches made once per machine (torch's
# compiled headers, the JVM's), the claims directory (lock files, kept by design: claims.py)
KEPT_IN_TMP = ("pytest-of-*", "torchinductor_*", "hsperfdata_*", "servebench-claims")


@dataclass(frozen=True)
class Snapshot:
    children: frozenset[int]
    marked: frozenset[int]
    shm: frozenset[str]
    netns: frozenset[str]
    masters: frozenset[int]
    tmp: frozenset[str]
    cpu_idle: frozenset[tuple[str, str]]


@dataclass
class Leaks:
    processes: dict[int, str] = field(default_factory=dict)
    ours: set[int] = field(default_factory=set)     # descendants of this process: stopped after reporting
    shm: list[str] = field(default_factory=list)
    netns: list[str] = field(default_factory=list)
    tmp: list[str] = field(default_factory=list)
    cpu_idle: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.processes or self.shm or self.netns or self.tmp or self.cpu_idle)

    def describe(self) -> list[str]:
        return ([f"process {pid}: {what}" for pid, what in sorted(self.processes.items())]
                + [f"/dev/shm/{name}" for name in self.shm] + [f"network namespace {name}" for name in self.netns]
                + [os.path.join(tempfile.gettempdir(), name) for name in self.tmp]
                + [f"idle setting {what}" for what in self.cpu_idle])


def snapshot() -> Snapshot:
    return Snapshot(frozenset(p.pid for p in psutil.Process().children(recursive=True)), frozenset(_marked()),
                    frozenset(_shm()), frozenset(_netns()), frozenset(_masters()), frozenset(_tmp()),
                    frozenset(_cpu_idle()))


def leaks_since(before: Snapshot, grace_s: float) -> Leaks:
    """What appeared since `before` and is still there after up to `grace_s` of waiting."""
    return poll(lambda: _found(before), grace_s, interval_s=0.25, until=lambda found: not found)


def stop_leaked(found: Leaks) -> None:
    """Kill the leaked descendants of this process; a marked process elsewhere is only reported
    (it may be a campaign someone runs on this machine at the same time: the test's failure says so)."""
    for pid in found.ours:
        try:
            os.killpg(pid, signal.SIGKILL) if os.getpgid(pid) == pid else os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def running_descendants() -> dict[int, str]:
    """This process's descendants still running (not zombies), each described by its command line;
    not the Prefect server of a test harness (the session's: tests/support/prefect_session.py)."""
    found = {}
    for process in psutil.Process().children(recursive=True):
        described = _running(process)
        if described and not any(marker in described for marker in HARNESS_MARKERS):  # on the whole command
            found[process.pid] = described[:160]
    return found


def _found(before: Snapshot) -> Leaks:
    leaks = Leaks()
    for pid, described in running_descendants().items():
        if pid not in before.children:  # a module's fixture (a testbed's daemons) keeps it
            leaks.processes[pid] = described
            leaks.ours.add(pid)
    for pid in set(_marked()) - before.marked:
        described = _running(psutil.Process(pid)) if psutil.pid_exists(pid) else None
        if described:
            leaks.processes[pid] = f"{described[:160]} (carries a run's mark; not stopped here)"
    for pid in set(_masters()) - before.masters:
        leaks.processes[pid] = "ssh master of a run (not stopped here)"
    leaks.shm = sorted(set(_shm()) - before.shm)
    leaks.netns = sorted(set(_netns()) - before.netns)
    leaks.tmp = sorted(set(_tmp()) - before.tmp)
    leaks.cpu_idle = [f"{path} = {value!r}" for path, value in sorted(set(_cpu_idle()) - before.cpu_idle)]
    return leaks


def _running(process: psutil.Process) -> str | None:
    try:
        if process.status() == psutil.STATUS_ZOMBIE:
            return None
        return " ".join(process.cmdline()) or process.name()
    except psutil.NoSuchProcess:
        return None


def _marked() -> list[int]:
    return list(node_tools._marked(node_tools._table(), "", prefix=True))


def _shm() -> list[str]:
    try:
        return os.listdir("/dev/shm")
    except OSError:
        return []


def _netns() -> list[str]:
    try:
        return os.listdir("/run/netns")
    except OSError:
        return []


def _tmp() -> list[str]:
    """The temp dir's entries, less what may stay (KEPT_IN_TMP)."""
    try:
        names = os.listdir(tempfile.gettempdir())
    except OSError:
        return []
    return [name for name in names if not any(fnmatch.fnmatch(name, kept) for kept in KEPT_IN_TMP)
            and not _prefect_harness_db(name)]


def _cpu_idle() -> list[tuple[str, str]]:
    """Each CPU's PM QoS resume latency ('0': the machine's default; 'n/a': polling when idle)."""
    found = []
    for path in sorted(glob.glob("/sys/devices/system/cpu/cpu[0-9]*/power/pm_qos_resume_latency_us")):
        try:
            found.append((path, open(path).read().strip()))
        except OSError:
            pass
    return found


def _prefect_harness_db(name: str) -> bool:
    """prefect_test_harness's database directory (mkdtemp): Prefect removes it at interpreter exit."""
    return os.path.exists(os.path.join(tempfile.gettempdir(), name, "prefect-test.db"))


def _masters() -> list[int]:
    found = []
    for process in psutil.process_iter(["cmdline"]):
        command = " ".join(process.info["cmdline"] or [])
        if command.startswith("ssh") and "/sb-ssh-" in command:
            found.append(process.pid)
    return found
