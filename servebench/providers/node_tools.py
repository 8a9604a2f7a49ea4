"""What the ssh provider runs ON a node, with the node's python3 and its standard library only.

Its source is sent over the multiplexed connection (`argv.BOOTSTRAP`) and one function is
called, so a node needs no servebench install. The process functions read /proc (Linux),
because a node may lack psutil and procps: they stop a process tree by PID the way
`servebench.processes.ManagedProcess.stop` does on the orchestrator (SIGTERM the group, wait,
SIGKILL the group and every recorded descendant), each PID checked against its start time so a
reused PID is never signalled. Importable on the orchestrator too (the unit tests run it here).
"""

from __future__ import annotations

import hashlib
import os
import signal
import socket
import stat as stat_mode
import time

SHM_DIR = "/dev/shm"
MARK_VARIABLE = "SERVEBENCH_PROCESS"  # <run id>.<sequence>, on every process the provider starts
# on servebench's own measuring processes (load generator, samplers, scraper): never a fault's target
INSTRUMENT_VARIABLE = "SERVEBENCH_INSTRUMENT"
KILL_WAIT_S = 5.0
POLL_S = 0.05


def _stat(pid: int) -> tuple[str, int, int, int] | None:
    """(state, ppid, process group, start ticks) of a process, None if there is none."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[0], int(fields[1]), int(fields[2]), int(fields[19])


def _table() -> dict[int, tuple[str, int, int, int]]:
    table = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and (stat := _stat(int(name))) is not None:
            table[int(name)] = stat
    return table


def _live(pid: int, start: int) -> bool:
    """The same process (PID and start time) is there and not a zombie."""
    stat = _stat(pid)
    return stat is not None and stat[0] not in ("Z", "X") and stat[3] == start


def _tree(table: dict, root: int) -> dict[int, int]:
    """{pid: start ticks} of root's live descendants."""
    children: dict[int, list[int]] = {}
    for pid, (_, ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = {}, list(children.get(root, []))
    while todo:
        pid = todo.pop()
        if pid not in found and table[pid][0] not in ("Z", "X"):
            found[pid] = table[pid][3]
            todo += children.get(pid, [])
    return found


def descendants(pid: int, start: int) -> dict[str, int]:
    """{pid: start ticks} of what the process has spawned (JSON keys are strings)."""
    table = _table()
    if pid not in table or table[pid][3] != start:
        return {}
    return {str(p): s for p, s in _tree(table, pid).items()}


def _marked(table: dict, mark: str, prefix: bool = False) -> dict[int, int]:
    """{pid: start ticks} of live processes whose environment has MARK_VARIABLE=mark (or a value
    starting with it): the provider sets it on every process it starts, and children inherit it,
    so a process that left the group and the tree unrecorded is still found."""
    wanted = f"{MARK_VARIABLE}={mark}".encode()
    found = {}
    for pid, stat in table.items():
        if stat[0] in ("Z", "X"):
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as handle:
                entries = handle.read().split(b"\0")
        except OSError:
            continue
        if any(entry == wanted or (prefix and entry.startswith(wanted)) for entry in entries):
            found[pid] = stat[3]
    return found


def _targets(pid: int, start: int, known: dict[str, int], mark: str = "") -> dict[int, int]:
    """Everything to stop: the leader, its tree, its group, what carries its mark and what was recorded."""
    table = _table()
    targets = {int(p): s for p, s in known.items()}
    if mark:
        targets |= _marked(table, mark)
    if pid in table and table[pid][3] == start:
        targets[pid] = start
        targets |= _tree(table, pid)
    if _group_is_ours(pid, targets):
        targets |= {p: stat[3] for p, stat in table.items() if stat[2] == pid and stat[0] not in ("Z", "X")}
    return targets


def _group_is_ours(pgid: int, targets: dict[int, int]) -> bool:
    """A recorded process (a zombie counts: it still holds its PID) is in the group: then no
    other process can have made a group with that id since."""
    for pid, start in targets.items():
        stat = _stat(pid)
        if stat and stat[2] == pgid and stat[3] == start:
            return True
    return False


def _signal_group(pgid: int, targets: dict[int, int], sig: int) -> None:
    """Signal the group only while it is provably the run's (else its id might be someone else's by now)."""
    if _group_is_ours(pgid, targets):
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _wait(targets: dict[int, int], seconds: float) -> list[int]:
    # servebench.waiting's poll written out: this file runs on nodes with the standard library only
    deadline = time.monotonic() + seconds
    while True:
        left = [p for p, s in targets.items() if _live(p, s)]
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(POLL_S)


def _read_exit(path: str) -> int | None:
    try:
        with open(path) as handle:
            return int(handle.read().strip())
    except (OSError, ValueError):
        return None


def stop_tree(pid: int, start: int, known: dict[str, int], grace_s: float, exit_path: str = "",
              mark: str = "") -> dict:
    """SIGTERM the process group, wait up to grace_s, then SIGKILL the group and every survivor
    by PID; return what was signalled and the recorded exit status."""
    targets = _targets(pid, start, known, mark)
    _signal_group(pid, targets, signal.SIGTERM)
    _signal_group(pid, targets, signal.SIGCONT)  # a stopped (hung) process handles its SIGTERM only once continued
    survivors = _wait(targets, grace_s)
    if survivors:
        _signal_group(pid, targets, signal.SIGKILL)
        for victim in survivors:
            if _live(victim, targets[victim]):
                try:
                    os.kill(victim, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
    left = _wait({p: targets[p] for p in survivors}, KILL_WAIT_S) if survivors else []
    return {"targets": sorted(targets), "killed": sorted(survivors), "left": left,
            "exit_code": _read_exit(exit_path) if exit_path else None}


def stop_marked(prefix: str, grace_s: float) -> list[int]:
    """SIGTERM, then after grace_s SIGKILL, every live process whose mark starts with prefix (the
    run's leftovers on this node, at release); return their PIDs."""
    targets = _marked(_table(), prefix, prefix=True)
    for pid, start in targets.items():
        if _live(pid, start):
            try:
                os.kill(pid, signal.SIGTERM)
                os.kill(pid, signal.SIGCONT)  # a stopped (hung) process handles its SIGTERM only once continued
            except (ProcessLookupError, PermissionError):
                pass
    for pid in _wait(targets, grace_s):
        if _live(pid, targets[pid]):
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
    _wait(targets, KILL_WAIT_S)
    return sorted(targets)


LEASE_NAME = "lease"
WARDEN_POLL_S = 1.0


def start_warden(run_dir: str, prefix: str, lease_s: float, grace_s: float) -> int:
    """Leave a warden of the run on this node and return its PID: a detached process that stops
    every process of the run here (and removes the run's directory) once the orchestrator has
    not renewed the run's lease (`<run_dir>/lease`, touched over ssh) for `lease_s` seconds, so
    a killed or cut-off orchestrator leaves nothing behind. It ends by itself once the run's
    directory is gone (the run released this node)."""
    os.makedirs(run_dir, mode=0o700, exist_ok=True)
    lease = os.path.join(run_dir, LEASE_NAME)
    with open(lease, "a"):
        os.utime(lease)
    pid = os.fork()
    if pid:
        return pid
    try:  # the child: its own session, no tie to the ssh session's pipes (ssh waits for their EOF)
        os.setsid()
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        _warden(run_dir, lease, prefix, lease_s, grace_s)
    finally:
        os._exit(0)


def _warden(run_dir: str, lease: str, prefix: str, lease_s: float, grace_s: float) -> None:
    import shutil

    while True:
        time.sleep(WARDEN_POLL_S)
        try:
            age = time.time() - os.stat(lease).st_mtime
        except FileNotFoundError:
            return  # released: the run's directory is gone
        if age > lease_s:
            stop_marked(prefix, grace_s)
            for _ in range(40):  # the stopped processes' wrappers write their exit files meanwhile
                shutil.rmtree(run_dir, ignore_errors=True)
                if not os.path.exists(run_dir):
                    return
                time.sleep(0.25)
            return


def free_port(address: str) -> int:
    """A TCP port nobody listens on at the node's address right now (the node's kernel picks it)."""
    with socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((address, 0))
        return sock.getsockname()[1]


def shm_entries() -> list[str]:
    try:
        return sorted(os.listdir(SHM_DIR))
    except FileNotFoundError:
        return []


def _identities(names: list[str]) -> dict[tuple[int, int], str]:
    """(device, inode) -> name of /dev/shm entries (regular files only)."""
    found = {}
    for name in names:
        try:
            info = os.lstat(os.path.join(SHM_DIR, name))
        except OSError:
            continue
        if not stat_mode.S_ISDIR(info.st_mode):
            found[(info.st_dev, info.st_ino)] = name
    return found


def _in_use(candidates: dict[tuple[int, int], str]) -> set[str]:
    """Candidates some live process maps or holds open, matched by device and inode: the node's
    /proc may show processes of other mount namespaces, whose paths would mislead."""
    used: set[str] = set()
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            with open(f"/proc/{pid}/maps") as maps:
                for line in maps:
                    fields = line.split(None, 5)
                    if len(fields) >= 5 and fields[4] != "0":
                        major, minor = (int(x, 16) for x in fields[3].split(":"))
                        key = (os.makedev(major, minor), int(fields[4]))
                        if key in candidates:
                            used.add(candidates[key])
            for fd in os.listdir(f"/proc/{pid}/fd"):
                try:
                    info = os.stat(f"/proc/{pid}/fd/{fd}")
                except OSError:
                    continue
                if (info.st_dev, info.st_ino) in candidates:
                    used.add(candidates[(info.st_dev, info.st_ino)])
        except (OSError, ValueError):
            continue
    return used


def remove_shm_created_since(before: list[str]) -> list[str]:
    """Remove /dev/shm entries that appeared since `before` and no live process uses; return their names."""
    candidates = _identities(sorted(set(shm_entries()) - set(before)))
    removed = []
    for name in sorted(set(candidates.values()) - _in_use(candidates)):
        try:
            os.unlink(os.path.join(SHM_DIR, name))
            removed.append(name)
        except OSError:
            continue
    return removed


def free_port_range(address: str, size: int, attempts: int = 50) -> int:
    """The first of `size` consecutive ports free at the node's address now (a kernel-picked base,
    every port of the range checked by binding it)."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    for _ in range(attempts):
        base = free_port(address)
        if base + size > 65535:
            continue
        if all(_bindable(family, address, base + offset) for offset in range(size)):
            return base
    raise RuntimeError(f"no {size} consecutive free ports found at {address}")


def _bindable(family: int, address: str, port: int) -> bool:
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((address, port))
            return True
        except OSError:
            return False


def tree_digest(path: str) -> str | None:
    """sha256 over a directory tree: every entry's relative path and kind, a symlink's target, a
    file's mode bit for execution and its content. None if the path is not a directory. The same
    function runs on the orchestrator and on each node, so equal digests mean equal trees."""
    if not os.path.isdir(path):
        return None
    digest = hashlib.sha256()
    for root, dirs, files in os.walk(path):
        dirs.sort()
        rel_root = os.path.relpath(root, path)
        for name in sorted(files) + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
            full = os.path.join(root, name)
            rel = os.path.normpath(os.path.join(rel_root, name))
            if os.path.islink(full):
                digest.update(b"L" + rel.encode() + b"\0" + os.readlink(full).encode() + b"\0")
                continue
            if "__pycache__" in rel.split(os.sep) or name.endswith(".pyc"):
                continue  # written by whoever runs the tree first: not part of what was built
            info = os.stat(full)
            digest.update(b"F" + rel.encode() + b"\0" + (b"x" if info.st_mode & 0o111 else b"-"))
            with open(full, "rb") as file:
                for block in iter(lambda: file.read(1 << 20), b""):
                    digest.update(block)
            digest.update(b"\0")
    return digest.hexdigest()

