"""What a test may leave behind, seen from the host the tests run on: processes, /dev/shm entries, network
namespaces, ssh masters, entries in the temp dirs (a killed engine's sockets, a run's scratch), a CPU's
idle setting (the load generator's idle polling, servebench/load/pinning.py). Only what appeared during
the test counts (a module's fixture, a testbed, may hold things across its tests). `snapshot` before the
test, `leaks_since` after it (waiting a little for what is still ending), `stop_leaked` by PID.

A temp entry is blamed only where the test's own processes made it, since other programs on the
machine write to /tmp too (a compiler's /tmp/cc*.s, another pytest run):
- in the session's own temp dir (tests/conftest.py points TMPDIR at /tmp/sbtests-<pid> and names it in
  SERVEBENCH_TEST_TMPDIR): every process the tests start inherits it and nothing else writes there, so
  every new entry is the test's;
- in /tmp, only a name servebench or its tests make there whatever TMPDIR says (MADE_IN_TMP: a run's
  scratch, Ray's root or an ssh control dir when TMPDIR is too long for their sockets, a test's fixed
  /tmp/sbt-*), unless a process of another session or run names it (command line, working dir or
  TMPDIR): then it is that run's. Ray's own default, /tmp/ray, is not on the list: Ray honours
  RAY_TMPDIR, then TMPDIR on Linux (ray/_private/utils.py get_user_temp_dir), and servebench gives it
  --temp-dir anyway.
Without a session temp dir (this module used elsewhere) every new entry of the temp dir counts.

The session's temp dir (`use_session_temp_dir`) is one per pytest process, not one fixed name: two
sessions at once must not see each other's entries, and a session that was killed leaves a dir the
next one removes (its PID is gone). It is short (at most 20 characters): an engine's Unix sockets
go under it (servebench/providers/this_host.py falls back to /tmp when TMPDIR is longer, the ssh
provider's control dir when longer than 40). It is removed whole at exit, after Prefect's exit hooks
(one removes the harness's database dir, in it), keeping nothing: what is worth keeping across
sessions lives elsewhere. vLLM's compiled kernels are under the build cache
(servebench/engines/vllm/launch.py), the JVM's hsperfdata and the claims dir are always in /tmp, and
pytest's numbered tmp_path dirs stay in the machine's temp dir (PYTEST_DEBUG_TEMPROOT), where a failed
test's files can be read after the run as before.
"""

from __future__ import annotations

import atexit
import fnmatch
import glob
import os
import re
import shutil
import signal
import tempfile
from dataclasses import dataclass, field

import psutil

from servebench.providers import node_tools
from servebench.waiting import poll

HARNESS_MARKERS = ("prefect.server", "prefect/server")  # a Prefect test harness a fixture may keep
# what may appear in the temp dir and stay: pytest's own, caches made once per machine (torch's
# compiled headers, the JVM's), the claims directory (its lock files go on release: claims.py)
KEPT_IN_TMP = ("pytest-of-*", "torchinductor_*", "hsperfdata_*", "servebench-claims", "servebench-claims-*")
SHARED_TMP = "/tmp"
SESSION_TMP_VARIABLE = "SERVEBENCH_TEST_TMPDIR"  # the session's own temp dir (use_session_temp_dir)
SESSION_TMP_PREFIX = "sbtests-"  # + the session's PID: not in MADE_IN_TMP (another session's is not a test's)
# what servebench (and its tests) make in /tmp whatever TMPDIR says: servebench-run-*, servebench-<run id>
# (a node's run dir), sb-ssh-*, sb-ray-*, sb-slurm-*, the tests' sbt-* (servebench-claims: KEPT_IN_TMP)
MADE_IN_TMP = ("servebench-*", "sb-*", "sbt-*")


def use_session_temp_dir(root: str = SHARED_TMP) -> str:
    """Make the session's own temp dir and point TMPDIR, `tempfile` and the leak check at it; removed at
    exit (registered now, so after the exit hooks registered later run: Prefect's removes its
    harness's database dir, in this dir)."""
    os.environ.setdefault("PYTEST_DEBUG_TEMPROOT", tempfile.gettempdir())  # pytest's tmp_path dirs stay
    remove_dead_sessions_temp_dirs(root)
    own = os.path.join(root, f"{SESSION_TMP_PREFIX}{os.getpid()}")
    shutil.rmtree(own, ignore_errors=True)  # a dead session's that had this PID
    os.makedirs(own, mode=0o700)
    os.environ["TMPDIR"] = os.environ[SESSION_TMP_VARIABLE] = own
    tempfile.tempdir = None  # computed again, from TMPDIR
    atexit.register(shutil.rmtree, own, ignore_errors=True)
    return own


def remove_dead_sessions_temp_dirs(root: str) -> None:
    """The temp dirs of sessions whose process is gone (killed before their exit hook ran)."""
    for entry in glob.glob(os.path.join(root, f"{SESSION_TMP_PREFIX}*")):
        pid = os.path.basename(entry).removeprefix(SESSION_TMP_PREFIX)
        if pid.isdigit() and not psutil.pid_exists(int(pid)):
            shutil.rmtree(entry, ignore_errors=True)


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
    tmp: list[str] = field(default_factory=list)    # paths
    cpu_idle: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.processes or self.shm or self.netns or self.tmp or self.cpu_idle)

    def describe(self) -> list[str]:
        return ([f"process {pid}: {what}" for pid, what in sorted(self.processes.items())]
                + [f"/dev/shm/{name}" for name in self.shm] + [f"network namespace {name}" for name in self.netns]
                + self.tmp
                + [f"idle setting {what}" for what in self.cpu_idle])


def snapshot() -> Snapshot:
    return Snapshot(frozenset(p.pid for p in psutil.Process().children(recursive=True)), frozenset(_marked()),
                    frozenset(_shm()), frozenset(_netns()), frozenset(_masters()), frozenset(_temp_entries()),
                    frozenset(_cpu_idle()))


def leaks_since(before: Snapshot, grace_s: float) -> Leaks:
    """What appeared since `before` and is still there after up to `grace_s` of waiting."""
    return poll(lambda: _found(before), grace_s, interval_s=0.25, until=lambda found: not found)


def stop_leaked(found: Leaks) -> None:
    """Kill the leaked descendants of this process; a marked process elsewhere is only reported
    (it may be a campaign someone runs on the same host at the same time: the test's failure says so)."""
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
    leaks.tmp = _not_another_sessions(set(_temp_entries()) - before.tmp)
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


def session_temp_dir() -> str:
    """The current session's own temp dir, or the temp dir when no session set one up."""
    return os.environ.get(SESSION_TMP_VARIABLE) or tempfile.gettempdir()


def _temp_entries() -> list[str]:
    """Paths a test may have left: every entry of the session's temp dir, and those of /tmp with a
    name servebench makes there; less what may stay (KEPT_IN_TMP)."""
    own = session_temp_dir()
    found = _entries(own)
    if os.path.realpath(own) != SHARED_TMP:
        found += [path for path in _entries(SHARED_TMP) if _made_in_tmp(os.path.basename(path))]
    return [path for path in found if not _kept(path)]


def _entries(directory: str) -> list[str]:
    try:
        return [os.path.join(directory, name) for name in os.listdir(directory)]
    except OSError:
        return []


def _made_in_tmp(name: str) -> bool:
    return any(fnmatch.fnmatch(name, made) for made in MADE_IN_TMP)


def _kept(path: str) -> bool:
    return any(fnmatch.fnmatch(os.path.basename(path), kept) for kept in KEPT_IN_TMP) or _prefect_harness_db(path)


def _not_another_sessions(paths: set[str]) -> list[str]:
    """`paths` less the /tmp entries a process of another session or run uses (a campaign or test
    session running at the same time makes the same names there)."""
    in_shared = {path for path in paths if os.path.dirname(path) == SHARED_TMP}
    if os.path.realpath(session_temp_dir()) == SHARED_TMP or not in_shared:
        return sorted(paths)
    return sorted(paths - _used_by_other_sessions(in_shared))


def _used_by_other_sessions(paths: set[str]) -> set[str]:
    """Those of `paths` named in the command line, working dir or TMPDIR of a process that is neither
    this process's descendant nor started by the current session (which passes SESSION_TMP_VARIABLE on,
    to daemons such as ssh masters too)."""
    ours = {os.getpid(), *(process.pid for process in psutil.Process().children(recursive=True))}
    session = session_temp_dir()
    used: set[str] = set()
    for process in psutil.process_iter(["cmdline", "cwd", "environ"]):
        environ = process.info["environ"] or {}
        if process.pid in ours or environ.get(SESSION_TMP_VARIABLE) == session:
            continue
        refers = "\0".join([*(process.info["cmdline"] or []), process.info["cwd"] or "", environ.get("TMPDIR", "")])
        used |= {path for path in paths if re.search(re.escape(path) + r"(?![\w.-])", refers)}
    return used


def _cpu_idle() -> list[tuple[str, str]]:
    """Each CPU's PM QoS resume latency ('0': the machine's default; 'n/a': polling when idle)."""
    found = []
    for path in sorted(glob.glob("/sys/devices/system/cpu/cpu[0-9]*/power/pm_qos_resume_latency_us")):
        try:
            found.append((path, open(path).read().strip()))
        except OSError:
            pass
    return found


def _prefect_harness_db(path: str) -> bool:
    """prefect_test_harness's database directory (mkdtemp): Prefect removes it at interpreter exit."""
    return os.path.exists(os.path.join(path, "prefect-test.db"))


def _masters() -> list[int]:
    found = []
    for process in psutil.process_iter(["cmdline"]):
        command = " ".join(process.info["cmdline"] or [])
        if command.startswith("ssh") and "/sb-ssh-" in command:
            found.append(process.pid)
    return found
