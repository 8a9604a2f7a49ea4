"""The side effects: bringing a testbed up on the local machine, finding it, and taking it down.

There is no PID namespace: a process on a host is an ordinary process of the machine. So
nothing here stops a process by name. `down` stops the daemons by their recorded PID (checked
against the start time recorded with it, so a reused PID is never hit), then every process
still inside one of the testbed's own namespaces (its jobs, ssh sessions, servers a test
started), found by the namespace each process is in.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import psutil

from servebench.devtools.testbed import configs
from servebench.devtools.testbed.layout import (
    NAME_PATTERN,
    PER_HOST_DIRS,
    STATE_PREFIX,
    Host,
    Layout,
    choose_slot,
    hidden_on_hosts,
    make_layout,
    slot_of,
    state_dir_for,
    state_root,
)
from servebench.logs import tail, tail_text
from servebench.waiting import poll, wait_for

READY_TIMEOUT_S = 40.0
STOP_GRACE_S = 5.0
COMMAND_TIMEOUT_S = 20.0
SETUP_WORKERS = 4  # hosts set up at once: enough to overlap their short processes, few enough for two cores


class TestbedError(RuntimeError):
    """A testbed cannot be brought up, found or taken down; the message says why and what to do."""

    __test__ = False  # not a pytest test class


@dataclass
class Daemon:
    host: str  # a host name, "machine" for the machine's own munged, "switch" for a delay line (links.py)
    name: str  # munged, sshd, slurmctld, slurmd
    pid: int
    started: float  # the process's start time (psutil create_time), to never signal a reused PID
    log: str

    def process(self) -> psutil.Process | None:
        """The live process, or None when it exited (a zombie counts as exited: here PID 1 may
        never reap the orphans a daemon leaves when `up` exits)."""
        try:
            proc = psutil.Process(self.pid)
            if abs(proc.create_time() - self.started) > 0.5 or proc.status() == psutil.STATUS_ZOMBIE:
                return None
            return proc
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return None

    def alive(self) -> bool:
        return self.process() is not None


# ---------------------------------------------------------------------------- state file

def read_state(state_dir: Path) -> tuple[Layout | None, list[Daemon], dict]:
    try:
        data = json.loads((state_dir / "testbed.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None, [], {}
    return Layout.from_json(data["layout"]), [Daemon(**d) for d in data.get("daemons", [])], data


def write_state(layout: Layout, daemons: list[Daemon], phase: str, **extra) -> None:
    data = {"layout": layout.to_json(), "phase": phase, "daemons": [d.__dict__ for d in daemons], **extra}
    tmp = layout.state_file.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    tmp.replace(layout.state_file)


def known_testbeds(root: Path | None = None, with_leftovers: bool = False) -> list[str]:
    """Names of the testbeds with a state directory under the state root; with_leftovers: also
    those of which only a switch namespace is left."""
    base = root or state_root()
    names = {p.name[len(STATE_PREFIX):] for p in base.glob(f"{STATE_PREFIX}*") if p.is_dir()}
    if with_leftovers and Path("/run/netns").is_dir():
        names |= {p.name[:-3] for p in Path("/run/netns").iterdir()
                  if p.name.endswith("-sw") and NAME_PATTERN.match(p.name[:-3])}
    return sorted(names)


def load(name: str) -> Layout:
    """The layout of a testbed that is up (for providers, tests and the CLI)."""
    layout, _, data = read_state(state_dir_for(name))
    if layout is None:
        raise TestbedError(f"no testbed {name!r} (no {state_dir_for(name) / 'testbed.json'}); "
                           f"`servebench testbed up --name {name} --hosts N` first")
    return layout


# ---------------------------------------------------------------------------- small helpers

def run(argv: list[str], check: bool = True, timeout: float = COMMAND_TIMEOUT_S) -> subprocess.CompletedProcess:
    result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    if check and result.returncode != 0:
        raise TestbedError(f"`{' '.join(argv[:8])}{' ...' if len(argv) > 8 else ''}` failed "
                           f"({result.returncode}): {(result.stderr or result.stdout).strip()[-800:]}")
    return result


def missing_binaries() -> dict[str, str]:
    """binary -> Debian package, for each binary the host lacks."""
    search = os.environ.get("PATH", "") + ":" + configs.DAEMON_PATH
    return {b: pkg for b, pkg in configs.REQUIRED_BINARIES.items() if shutil.which(b, path=search) is None}


def require_root() -> None:
    if os.geteuid() != 0:
        raise TestbedError("the testbed needs root (network and mount namespaces, daemons on port 22)")


def preflight() -> None:
    require_root()
    missing = missing_binaries()
    if missing:
        raise TestbedError(missing_text(missing))


def missing_text(missing: dict[str, str]) -> str:
    """`missing X, Y: apt-get install P Q` for binary -> package."""
    packages = sorted({package.split()[0] for package in missing.values()})
    return f"missing {', '.join(sorted(missing))}: apt-get install {' '.join(packages)} (Debian packages)"


def netns_exists(name: str) -> bool:
    return Path("/run/netns", name).exists()


def link_exists(name: str) -> bool:
    return Path("/sys/class/net", name).exists()


def machine_slots() -> set[int]:
    """Slots (/24s of the benchmarking range) the machine already has an address in."""
    taken: set[int] = set()
    for addrs in psutil.net_if_addrs().values():
        for addr in addrs:
            if addr.family == socket.AF_INET and (slot := slot_of(addr.address)) is not None:
                taken.add(slot)
    return taken


def taken_slots(except_name: str) -> set[int]:
    taken = machine_slots()
    for other in known_testbeds():
        if other != except_name:
            layout, _, _ = read_state(state_dir_for(other))
            if layout is not None:
                taken.add(layout.slot)
    return taken


def mounts_under(path: Path) -> list[str]:
    """Mount points at or below path in the machine's mount namespace, deepest first."""
    prefix = str(path).rstrip("/")
    found = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), line.split()[4])
            if point == prefix or point.startswith(prefix + "/"):
                found.append(point)
    return sorted(found, key=len, reverse=True)


# ---------------------------------------------------------------------------- up

def up(name: str, hosts: int, cpus: int | None = None, keep_on_failure: bool = False,
       log: Callable[[str], None] = lambda text: None, shared: tuple[str, ...] = ()) -> Layout:
    """Bring the testbed up; on a failure take down what was built (unless keep_on_failure:
    then `status` shows it and its logs stay for a look) and raise."""
    preflight()
    state_dir = state_dir_for(name)
    if hidden_on_hosts(state_dir):
        raise TestbedError(f"state directory {state_dir}: the hosts could not see it (each has its own "
                           f"{', '.join(PER_HOST_DIRS)}); set SERVEBENCH_TESTBED_ROOT elsewhere (default /var/tmp)")
    exists = TestbedError(f"testbed {name!r} already exists ({state_dir}); use it, or take it down first: "
                          f"servebench testbed down --name {name}")
    if state_dir.exists() or netns_exists(f"{name}-sw") or link_exists(f"{name}-tb"):
        raise exists
    state_dir.parent.mkdir(parents=True, exist_ok=True)
    daemons: list[Daemon] = []
    with locked(state_dir.parent):  # two `up`s at once never pick the same /24
        layout = make_layout(name, hosts, cpus or os.cpu_count() or 1, choose_slot(name, taken_slots(name)),
                             shared=shared)
        try:
            state_dir.mkdir(mode=0o755)
        except FileExistsError:
            raise exists from None
        write_state(layout, daemons, "building")
    try:
        started = time.monotonic()
        write_files(layout)
        build_network(layout)
        build_hosts(layout)
        log(f"namespaces, network and files: {time.monotonic() - started:.2f} s")
        start_daemons(layout, daemons)
        wait_ready(layout, daemons)
        log(f"daemons ready: {time.monotonic() - started:.2f} s")
        write_state(layout, daemons, "up")
    except BaseException as exc:
        problem = str(exc)
        write_state(layout, daemons, "failed", error=problem)
        tails = log_tails(layout)
        left = [] if keep_on_failure else down(name)
        message = f"testbed {name} did not come up: {problem}"
        if tails:
            message += "\n" + tails
        if left:
            message += "\nleft behind: " + "; ".join(left)
        elif keep_on_failure:
            message += f"\nkept for a look: {layout.state_dir}; then servebench testbed down --name {name}"
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise TestbedError(message) from exc
    return layout


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive flock on a directory (the state root) while the block runs: no lock file to leave."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def write_files(layout: Layout) -> None:
    for path in (layout.ns_dir, layout.logs_dir, layout.slurm_dir, layout.slurm_state_dir):
        path.mkdir(parents=True, exist_ok=True)
    layout.ssh_dir.mkdir(mode=0o700)
    layout.munge_dir.mkdir(mode=0o700)
    layout.run_dir.mkdir(mode=0o755, exist_ok=True)
    fd = os.open(layout.munge_key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(os.urandom(1024))
    run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"servebench-testbed-{layout.name}",
         "-f", str(layout.ssh_key)])
    def host_files(host: Host) -> str:
        home = layout.home_dir(host)
        (home / ".ssh").mkdir(parents=True, mode=0o700)
        home.chmod(0o700)
        (home / ".cache" / "servebench").mkdir(parents=True)
        layout.spool_dir(host).mkdir(parents=True)
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"{host.name}.{layout.name}",
             "-f", str(layout.host_key(host))])
        layout.sshd_config(host).write_text(configs.sshd_config(layout, host))
        authorized = home / ".ssh" / "authorized_keys"
        authorized.write_text(layout.ssh_key.with_suffix(".pub").read_text())
        authorized.chmod(0o600)
        return layout.host_key(host).with_suffix(".pub").read_text()

    with ThreadPoolExecutor(max_workers=SETUP_WORKERS) as pool:
        public_keys = dict(zip([h.name for h in layout.hosts], pool.map(host_files, layout.hosts)))
    layout.known_hosts.write_text(configs.known_hosts(layout, public_keys))
    for host in layout.hosts:  # the hosts reach each other too (`ssh h3` on h1), as in a cluster
        ssh_dir = layout.home_dir(host) / ".ssh"
        shutil.copy(layout.ssh_key, ssh_dir / "id_ed25519")
        (ssh_dir / "id_ed25519").chmod(0o600)
        shutil.copy(layout.known_hosts, ssh_dir / "known_hosts")
    layout.ssh_config.write_text(configs.ssh_client_config(layout))
    layout.slurm_conf.write_text(configs.slurm_conf(layout))
    layout.hosts_file.write_text(configs.hosts_file(layout))


def build_network(layout: Layout) -> None:
    """A bridge in the switch namespace; per host a namespace and a veth into the bridge; the
    machine's own veth into the bridge with <subnet>.254: a route to the testbed's /24 only."""
    sw = layout.switch_netns
    run(["ip", "netns", "add", sw])
    for host in layout.hosts:
        run(["ip", "netns", "add", host.netns])
    commands = ["link add br0 type bridge", "link set lo up", "link set br0 up"]
    for host in layout.hosts:  # each host's end is created inside its namespace: no name on the machine
        commands += [f"link add {host.name} type veth peer name eth0 netns {host.netns}",
                     f"link set {host.name} master br0", f"link set {host.name} up"]
    batch(["ip", "-n", sw, "-batch", "-"], commands)
    run(["ip", "link", "add", layout.machine_link, "type", "veth", "peer", "name", "machine", "netns", sw])
    batch(["ip", "-n", sw, "-batch", "-"], ["link set machine master br0", "link set machine up"])
    link = layout.machine_link
    batch(["ip", "-batch", "-"], [f"addr add {layout.machine_address}/{layout.subnet.prefixlen} dev {link}",
                                   f"link set {link} up"])


def batch(argv: list[str], commands: list[str]) -> None:
    result = subprocess.run(argv, input="\n".join(commands) + "\n", capture_output=True, text=True,
                            timeout=COMMAND_TIMEOUT_S)
    if result.returncode != 0:
        raise TestbedError(f"`{' '.join(argv)}` failed: {(result.stderr or result.stdout).strip()[-800:]}")


def build_hosts(layout: Layout) -> None:
    """The namespace files live in a private bind mount of their directory (a namespace file
    may only be bound where mounts do not propagate); each host's mount, UTS and IPC
    namespaces are made by `unshare` inside its network namespace and bound to those files."""
    run(["mount", "--bind", str(layout.ns_dir), str(layout.ns_dir)])
    run(["mount", "--make-private", str(layout.ns_dir)])

    def create(host: Host) -> None:
        for kind in configs.MOUNT_KINDS:
            layout.ns_file(host, kind).touch()
        run(configs.create_host_argv(layout, host))

    with ThreadPoolExecutor(max_workers=SETUP_WORKERS) as pool:  # a host's set-up is a dozen short processes
        list(pool.map(create, layout.hosts))


def start(layout: Layout, daemons: list[Daemon], host: Host | None, name: str, argv: list[str]) -> Daemon:
    label = host.name if host else "machine"
    log_path = layout.logs_dir / f"{label}.{name}.log"
    prefix = configs.enter_argv(layout, host) if host else []
    with open(log_path, "ab") as log_file:
        proc = subprocess.Popen(prefix + argv, stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT,
                                start_new_session=True, env=configs.daemon_env(), cwd="/")
    try:
        created = psutil.Process(proc.pid).create_time()
    except psutil.NoSuchProcess:
        created = 0.0
    daemon = Daemon(host=label, name=name, pid=proc.pid, started=created, log=str(log_path))
    daemons.append(daemon)
    write_state(layout, daemons, "building")
    proc.returncode = 0  # never waited on here: the daemon outlives this process (no ResourceWarning)
    return daemon


def start_daemons(layout: Layout, daemons: list[Daemon]) -> None:
    first = layout.hosts[0]
    mungeds = [start(layout, daemons, None, "munged", configs.munged_argv(layout, "machine", layout.machine_address))]
    for host in layout.hosts:
        mungeds.append(start(layout, daemons, host, "munged", configs.munged_argv(layout, host.name, host.address)))
    wait_for(lambda: all(Path(f"/proc/{d.pid}/root{layout.munge_socket}").exists() or not d.alive()
                         for d in mungeds), "munged sockets", 10.0, error=TestbedError)
    check_alive(daemons)
    ctld = start(layout, daemons, first, "slurmctld", configs.slurmctld_argv(layout))
    for host in layout.hosts:
        start(layout, daemons, host, "sshd", configs.sshd_argv(layout, host))
    wait_for(lambda: listening(ctld.pid, layout.slurmctld_port) or not daemons_alive(daemons),
             "slurmctld listening", 20.0, error=TestbedError)
    check_alive(daemons)
    for host in layout.hosts:
        start(layout, daemons, host, "slurmd", configs.slurmd_argv(layout, host))


def daemons_alive(daemons: list[Daemon]) -> bool:
    return all(d.alive() for d in daemons)


def check_alive(daemons: list[Daemon]) -> None:
    dead = [d for d in daemons if not d.alive()]
    if dead:
        raise TestbedError("exited at start: " + "; ".join(f"{d.name} on {d.host}: {last_lines(d.log)}" for d in dead))


def last_lines(path: str, count: int = 5) -> str:
    """A dead daemon's last words on one line (Slurm's PMIx plugin complains on every start: left out)."""
    return tail_text(path, count, keep=_not_pmix, sep=" | ")


def _not_pmix(line: str) -> bool:
    return "pmix" not in line.lower()


def _error_line(line: str) -> bool:
    return bool(re.search(r"\b(error|fatal)\b", line, re.IGNORECASE)) and _not_pmix(line)


def listening(pid: int, port: int) -> bool:
    """Whether a TCP socket listens on port in the network namespace of process pid (read from
    its /proc/PID/net/tcp: no connection is made, so no daemon logs a probe)."""
    try:
        with open(f"/proc/{pid}/net/tcp") as f:
            next(f)
            for line in f:
                fields = line.split()
                if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                    return True
    except (OSError, StopIteration, IndexError, ValueError):
        pass
    return False


def slurm_client(layout: Layout, argv: list[str], timeout: float = COMMAND_TIMEOUT_S) -> subprocess.CompletedProcess:
    """A Slurm client command from the machine itself, against the testbed's controller."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env.update(configs.slurm_client_env(layout))
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL)


def node_states(layout: Layout) -> dict[str, str]:
    """Slurm node name -> state (idle, alloc, down...), as `sinfo` on the machine reports them."""
    try:
        result = slurm_client(layout, ["sinfo", "-h", "-N", "-o", "%N %T"], timeout=10)
    except subprocess.TimeoutExpired:
        return {}
    if result.returncode != 0:
        return {}
    return dict(line.split(None, 1) for line in result.stdout.splitlines() if line.strip())


def wait_ready(layout: Layout, daemons: list[Daemon]) -> None:
    sshds = [d for d in daemons if d.name == "sshd"]

    def ready() -> bool:
        check_alive(daemons)
        if not all(listening(d.pid, 22) for d in sshds):
            return False
        states = node_states(layout)
        return all(states.get(h.name, "").rstrip("*") == "idle" for h in layout.hosts)

    wait_for(ready, "sshd on every host and every Slurm node idle", READY_TIMEOUT_S, interval_s=0.2,
             error=TestbedError)


def log_tails(layout: Layout, lines: int = 4) -> str:
    """The last error lines of each daemon's log (Slurm's PMIx plugin complains on every start:
    left out)."""
    out = []
    for path in sorted(layout.logs_dir.glob("*.log")) if layout.logs_dir.exists() else []:
        errors = tail(path, lines, keep=_error_line)
        if errors:
            out.append(f"--- {path}\n" + "\n".join(errors))
    return "\n".join(out)


# ---------------------------------------------------------------------------- down

def namespace_ids(layout: Layout) -> set[str]:
    """`net:[inode]`-style ids of the testbed's namespaces, as /proc/PID/ns/* links show them:
    its network namespaces, and every namespace bound to a file in its namespace directory."""
    files = [(Path("/run/netns") / ns, "net") for ns in layout.netns_names + extra_netns(layout.name, layout)]
    if layout.ns_dir.exists():
        files += [(path, path.suffix[1:]) for path in layout.ns_dir.iterdir() if path.suffix[1:] in configs.MOUNT_KINDS]
    ids = set()
    for path, kind in files:
        try:
            if os.stat(path).st_dev != os.stat(path.parent).st_dev:  # bound, not an empty placeholder file
                ids.add(f"{kind}:[{os.stat(path).st_ino}]")
        except OSError:
            continue
    return ids


def processes_inside(ids: set[str]) -> list[psutil.Process]:
    """Every live process in one of these namespaces (never this process)."""
    found = []
    for pid in psutil.pids():
        if pid == os.getpid():
            continue
        for kind in ("net", "mnt", "uts", "ipc"):
            try:
                if os.readlink(f"/proc/{pid}/ns/{kind}") in ids:
                    proc = psutil.Process(pid)
                    if proc.status() != psutil.STATUS_ZOMBIE:
                        found.append(proc)
                    break
            except (OSError, psutil.Error):
                break
    return found


def pid_file_process(path: Path, must_contain: str) -> psutil.Process | None:
    try:
        proc = psutil.Process(int(path.read_text().split()[0]))
        if any(must_contain in arg for arg in proc.cmdline()) and proc.status() != psutil.STATUS_ZOMBIE:
            return proc
    except (OSError, ValueError, IndexError, psutil.Error):
        pass
    return None


def stop_processes(procs: list[psutil.Process], grace: float = STOP_GRACE_S) -> list[psutil.Process]:
    """SIGTERM, wait up to grace, SIGKILL; returns those still alive after that."""
    for proc in procs:
        try:
            proc.send_signal(signal.SIGTERM)
        except psutil.Error:
            pass

    def alive(proc: psutil.Process) -> bool:
        try:
            return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False

    def all_gone() -> bool:
        return not any(alive(p) for p in procs)

    poll(all_gone, grace, interval_s=0.05)
    for proc in procs:
        if alive(proc):
            try:
                proc.send_signal(signal.SIGKILL)
            except psutil.Error:
                pass
    poll(all_gone, 2.0, interval_s=0.05)
    for proc in procs:  # reaped when this process started it (`up` called in-process): no zombie left
        try:
            os.waitpid(proc.pid, os.WNOHANG)
        except ChildProcessError:
            pass
    return [p for p in procs if alive(p)]


def down(name: str, log: Callable[[str], None] = lambda text: None) -> list[str]:
    """Take down whatever exists of testbed `name` (complete, half-built or already gone).
    Returns what could not be removed (empty: nothing is left)."""
    state_dir = state_dir_for(name)
    layout, daemons, _ = read_state(state_dir)
    if layout is None:  # no state file (a crash before it was written): what the name alone tells
        layout = make_layout(name, 1, 1, 0)  # host namespaces beyond h1: extra_netns
    left: list[str] = []

    # 0. ssh connection masters the testbed's ssh config started on the machine (their control
    #    sockets are in its state directory): asked to exit, as `ssh -O exit` does
    for sock in sorted(layout.ssh_dir.glob("*")) if layout.ssh_dir.exists() else []:
        if sock.is_socket():
            run(["ssh", "-o", f"ControlPath={sock}", "-O", "exit", "testbed"], check=False, timeout=5)
    # 1. daemons by recorded PID (and start time), and the machine's munged by its PID file
    #    (started but not yet recorded when `up` died): its command line names this testbed's socket
    procs = [p for d in daemons if (p := d.process()) is not None]
    if (machine_munged := pid_file_process(layout.run_dir / "munged.pid", str(layout.munge_socket))) is not None:
        procs += [machine_munged] if machine_munged.pid not in {p.pid for p in procs} else []
    for proc in stop_processes(procs):
        left.append(f"process {proc.pid} would not die")
    # 2. anything else still inside the testbed's namespaces: jobs, ssh sessions, servers
    ids = namespace_ids(layout)
    for _ in range(3):
        inside = processes_inside(ids) if ids else []
        if not inside:
            break
        log(f"stopping {len(inside)} process(es) left inside the testbed: "
            + ", ".join(f"{p.pid}" for p in inside[:10]))
        stop_processes(inside, grace=2.0)
    else:
        left += [f"process {p.pid} inside the testbed" for p in processes_inside(ids)]
    # 3. the namespace files and their private mount
    for point in mounts_under(layout.ns_dir):
        result = run(["umount", point], check=False)
        if result.returncode != 0:
            result = run(["umount", "-l", point], check=False)
            if result.returncode != 0:
                left.append(f"mount {point}: {result.stderr.strip()}")
    # 4. network namespaces (their veths go with them) and the machine's veth
    for ns in layout.netns_names + extra_netns(name, layout):
        if netns_exists(ns):
            result = run(["ip", "netns", "del", ns], check=False)
            if result.returncode != 0:
                left.append(f"netns {ns}: {result.stderr.strip()}")
    if link_exists(layout.machine_link):
        run(["ip", "link", "del", layout.machine_link], check=False)
    try:
        wait_for(lambda: not link_exists(layout.machine_link), f"{layout.machine_link} to go", 5.0, interval_s=0.05,
                 error=TestbedError)
    except TestbedError as exc:
        left.append(str(exc))
    # 5. files: the machine's run directory and the state directory
    shutil.rmtree(layout.run_dir, ignore_errors=True)
    remaining = mounts_under(state_dir)
    if remaining:
        left.append(f"mounts under {state_dir}: {', '.join(remaining)}; state directory kept")
    elif state_dir.exists():
        shutil.rmtree(state_dir, ignore_errors=True)
        if state_dir.exists():
            left.append(f"could not remove {state_dir}")
    return left


def extra_netns(name: str, layout: Layout) -> list[str]:
    """Host namespaces of this testbed not in its layout (a state file written before they were)."""
    if not Path("/run/netns").exists():
        return []
    known = set(layout.netns_names)
    prefix = f"{name}-h"
    return sorted(p.name for p in Path("/run/netns").iterdir()
                  if p.name.startswith(prefix) and p.name[len(prefix):].isdigit() and p.name not in known)


# ---------------------------------------------------------------------------- status

def status(name: str) -> dict:
    """What exists of a testbed: hosts, addresses, namespaces, daemons alive, Slurm node states."""
    state_dir = state_dir_for(name)
    layout, daemons, data = read_state(state_dir)
    if layout is None:
        guess = make_layout(name, 1, 1, 0)
        leftovers = [ns for ns in guess.netns_names + extra_netns(name, guess) if netns_exists(ns)]
        if link_exists(f"{name}-tb"):
            leftovers.append(f"link {name}-tb")
        return {"name": name, "exists": bool(leftovers or state_dir.exists()), "phase": None,
                "leftovers": leftovers, "state_dir": str(state_dir)}
    alive = {(d.host, d.name): d.alive() for d in daemons}
    pids = {(d.host, d.name): d.pid for d in daemons}
    states = node_states(layout) if any(alive.values()) else {}
    hosts = []
    for host in layout.hosts:
        hosts.append({"name": host.name, "address": host.address, "netns": netns_exists(host.netns),
                      "slurm": states.get(host.name),
                      "daemons": {n: {"pid": pids[(host.name, n)], "alive": alive[(host.name, n)]}
                                  for (h, n) in pids if h == host.name}})
    return {"name": name, "exists": True, "phase": data.get("phase"), "error": data.get("error"),
            "state_dir": str(layout.state_dir), "subnet": str(layout.subnet),
            "machine_address": layout.machine_address, "machine_link": layout.machine_link,
            "machine_link_up": link_exists(layout.machine_link),
            "slurm_conf": str(layout.slurm_conf), "ssh_config": str(layout.ssh_config),
            "ssh_key": str(layout.ssh_key),
            "machine_daemons": {n: {"pid": pids[(h, n)], "alive": alive[(h, n)]} for (h, n) in pids if h == "machine"},
            "hosts": hosts}
