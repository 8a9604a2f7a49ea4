"""Faults injected into a running server's processes, on their node (campaign `faults:`).

The signal is sent on the node by a short script run through the provider (`Provider.run`),
to the processes of this run there whose command line matches the fault's regex: only
processes carrying the run's mark (`SERVEBENCH_PROCESS=<tag>.`) are candidates, so a fault
never touches anything else on a shared node. What was hit (PIDs, command lines, the time)
is returned for the `faults` table; the cell's own verdict comes from the usual checks (the
server's processes and health after the cell), which name the cause.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from servebench.config.campaign import FaultSpec
from servebench.devtools.testbed.links import with_testbed_links
from servebench.providers import Node, Provider

SIGNALS = {"kill": signal.SIGKILL, "stop": signal.SIGSTOP}

# argv: mark prefix, regex, signal number, node name. Prints [[pid, command], ...] of the processes
# signalled. Left alone: servebench's own measuring processes (SERVEBENCH_INSTRUMENT: the load
# generator, samplers, scraper: a fault is the deployment's, never the instrument's), and a process
# that belongs to another node (SERVEBENCH_NODE_NAME, set for a Ray node's daemons and workers and
# for vLLM's ranks): nodes simulated on one host (the local provider) each lose only their own
# processes. Each variable is read from the process's environment or, failing that, from its
# nearest ancestor's: a process that sets its title (setproctitle: Ray's `ray::DashboardAgent`,
# `ray::RuntimeEnvAgent`, workers) may overwrite the start of what /proc shows of its environment,
# and a CI run lost the head's agents (and so the head) to a fault aimed at the other node that way.
SIGNAL_SCRIPT = r"""
import json, os, re, sys
prefix, pattern, number, node = sys.argv[1].encode(), re.compile(sys.argv[2]), int(sys.argv[3]), sys.argv[4].encode()
KEYS = (b"SERVEBENCH_PROCESS", b"SERVEBENCH_NODE_NAME", b"SERVEBENCH_INSTRUMENT")
processes = {}
for name in os.listdir("/proc"):
    if not name.isdigit() or int(name) == os.getpid():
        continue
    try:
        environ = open(f"/proc/{name}/environ", "rb").read().split(b"\0")
        command = open(f"/proc/{name}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace").strip()
        parent = int(open(f"/proc/{name}/stat", "rb").read().rsplit(b")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        continue
    found = {key: value for key, _, value in (entry.partition(b"=") for entry in environ) if key in KEYS}
    processes[int(name)] = (parent, command, found)

def inherited(pid, key):
    seen = set()
    while pid in processes and pid not in seen:
        seen.add(pid)
        parent, _, found = processes[pid]
        if key in found:
            return found[key]
        pid = parent
    return None

hit = []
for pid, (_, command, _) in processes.items():
    owner, mark = inherited(pid, b"SERVEBENCH_NODE_NAME"), inherited(pid, b"SERVEBENCH_PROCESS")
    if inherited(pid, b"SERVEBENCH_INSTRUMENT") == b"1" or (owner is not None and owner != node):
        continue
    if mark is not None and mark.startswith(prefix) and pattern.search(command):
        try:
            os.kill(pid, number)
            hit.append([pid, command if len(command) <= 200 else command[:120] + " ... " + command[-77:]])
        except OSError:
            pass
print(json.dumps(hit))
"""


# argv: file path, MiB. Fills /dev/shm with a file of that many MiB, or until it is full; prints
# [[bytes written, path, bytes still free]].
FILL_SCRIPT = r"""
import json, os, sys
path, wanted = sys.argv[1], int(sys.argv[2]) << 20
block, written = b"\0" * (1 << 20), 0
with open(path, "wb") as out:
    try:
        while written < wanted:
            written += out.write(block)
            out.flush()
    except OSError:
        pass
stat = os.statvfs(os.path.dirname(path))
print(json.dumps([[written, path, stat.f_bavail * stat.f_frsize]]))
"""


@dataclass
class InjectedFault:
    """One fault as it happened (or why it did not)."""

    spec: FaultSpec
    node: str
    at: datetime | None = None
    t_mono: float | None = None
    hit: list[list] = field(default_factory=list)   # [[pid, command], ...]
    error: str | None = None

    fired_s: float | None = None                      # seconds after the cell's start it was injected
    undo: Callable[[], list] | None = field(default=None, repr=False)  # ends a fault that lasts: a hit entry
    lasts_s: float | None = None                      # when to undo it (None: when the cell ends)

    def describe(self) -> str:
        if self.error:
            return f"fault {self.spec.action} on {self.node} not injected: {self.error}"
        if self.spec.action in ("kill", "stop"):
            pids = ", ".join(str(pid) for pid, _ in self.hit) or "no process matched"
        else:
            pids = "; ".join(str(what) for _, what in self.hit)
        seconds = f"{self.fired_s if self.fired_s is not None else self.spec.at_s:.1f} s"
        when = f"after {self.spec.after_requests} requests ({seconds})" if self.spec.after_requests else f"at {seconds}"
        return f"fault {self.spec.action} on {self.node} {when}: {pids}"


def inject(provider: Provider, node: Node, fault: FaultSpec) -> InjectedFault:
    """Inject the fault now, on the node: a signal to this run's processes matching its regex, or one
    of the actions below. A fault that lasts (a cut host, a full /dev/shm) comes back with its
    `undo`, which the timer runs after `lasts_s` or when the cell ends, whichever is first."""
    done = InjectedFault(spec=fault, node=node.name, at=datetime.now(timezone.utc), t_mono=time.monotonic())
    ACTIONS.get(fault.action, _signal)(provider, node, fault, done)
    return done


def _signal(provider: Provider, node: Node, fault: FaultSpec, done: InjectedFault) -> None:
    result = provider.run(node, ["python3", "-c", SIGNAL_SCRIPT, f"{provider.run_id}.", fault.match,
                                 str(int(SIGNALS[fault.action])), node.name], timeout=60)
    if result.returncode != 0:
        done.error = f"exit {result.returncode}: {(result.stderr or '').strip()[-300:]}"
        return
    done.hit = json.loads(result.stdout.strip().splitlines()[-1])


def _cancel_allocation(provider: Provider, node: Node, fault: FaultSpec, done: InjectedFault) -> None:
    """The run's allocation cancelled through its provider (CANCEL_ALLOCATION, checked with the
    campaign); hit: [[job id, what was done]]."""
    done.hit = provider.cancel_allocation()


def _fill_shm(provider: Provider, node: Node, fault: FaultSpec, done: InjectedFault) -> None:
    path = f"/dev/shm/servebench-fill.{provider.run_id}.{os.getpid()}.{time.monotonic_ns()}"
    try:
        result = provider.run(node, ["python3", "-c", FILL_SCRIPT, path, str(fault.size_mb)], timeout=120)
    except BaseException:
        provider.run(node, ["rm", "-f", path], timeout=60)
        raise
    if result.returncode != 0:
        provider.run(node, ["rm", "-f", path], timeout=60)
        done.error = f"exit {result.returncode}: {(result.stderr or '').strip()[-300:]}"
        return
    written, _, free = json.loads(result.stdout.strip().splitlines()[-1])[0]
    done.hit = [[path, f"/dev/shm filled with {written >> 20} MiB ({free >> 20} MiB left free)"]]

    def remove() -> list:
        removed = provider.run(node, ["rm", "-f", path], timeout=60)
        if removed.returncode != 0:
            raise RuntimeError(f"could not remove {path}: {(removed.stderr or '').strip()[-200:]}")
        return [path, "removed when the cell ended"]
    done.undo = remove


def _cut_host(provider: Provider, node: Node, fault: FaultSpec, done: InjectedFault) -> None:
    """The node cut off the network through its provider (LINK_SHAPING, checked with the campaign),
    on the switch of the fault's testbed."""
    provider = with_testbed_links(provider)
    try:
        state = provider.connect_node(fault.testbed or "", node, False)
    except BaseException:
        provider.connect_node(fault.testbed or "", node, True)  # whatever failed after the port went down: up again
        raise
    done.hit = [[node.name, f"cut off: its port on testbed {fault.testbed}'s switch {state}"]]

    def reconnect() -> list:
        cut_for = time.monotonic() - (done.t_mono or time.monotonic())
        state = provider.connect_node(fault.testbed or "", node, True)
        return [node.name, f"connected again after {cut_for:.1f} s ({state})"]
    done.undo, done.lasts_s = reconnect, fault.duration_s


ACTIONS = {"cancel-allocation": _cancel_allocation, "fill-shm": _fill_shm, "cut-host": _cut_host}


def finished_requests(progress: Path) -> int:
    """Requests the load generator has finished (answered or failed), from its progress file."""
    try:
        counts = json.loads(progress.read_text())
    except (OSError, ValueError):
        return 0
    return int(counts.get("done", 0)) + int(counts.get("failed", 0))


class FaultTimer:
    """Injects one fault `at_s` seconds after `start` (or once `after_requests` requests of the cell
    have finished, by the load generator's progress file), from a thread; `finish` cancels it if the
    cell ended first and returns what happened."""

    POLL_S = 0.05

    def __init__(self, provider: Provider, node: Node, fault: FaultSpec, progress: Path | None = None):
        self._cancel = threading.Event()
        self._result = InjectedFault(spec=fault, node=node.name)
        self._progress = progress
        self._started = time.monotonic()
        self._thread = threading.Thread(target=self._run, args=(provider, node, fault), daemon=True,
                                        name=f"fault-{fault.action}-{node.name}")

    def start(self) -> "FaultTimer":
        self._thread.start()
        return self

    def _run(self, provider: Provider, node: Node, fault: FaultSpec) -> None:
        if fault.after_requests is not None:
            if self._progress is None:
                self._result.error = "no progress of the load to wait on (a load generator on a client node)"
                return
            while finished_requests(self._progress) < fault.after_requests:
                if self._cancel.wait(self.POLL_S):
                    self._result.error = (f"the cell ended before {fault.after_requests} requests had finished "
                                          f"({finished_requests(self._progress)} had)")
                    return
        elif self._cancel.wait(fault.at_s):
            self._result.error = f"the cell ended before {fault.at_s:g} s"
            return
        try:
            self._result = inject(provider, node, fault)
            self._result.fired_s = round(time.monotonic() - self._started, 3)
        except Exception as exc:
            self._result.error = f"{type(exc).__name__}: {exc}"
        if self._result.undo is not None:
            self._cancel.wait(self._result.lasts_s)  # None: until the cell ends
            self._undo()

    def _undo(self) -> None:
        """A fault that lasts is undone however the cell ends: a host never stays cut off."""
        undo = self._result.undo
        assert undo is not None  # called only for a fault that has an undo (see above)
        try:
            self._result.hit.append(undo())
        except Exception as exc:
            self._result.error = f"could not undo {self._result.spec.action} on {self._result.node}: " \
                                 f"{type(exc).__name__}: {exc}"

    def finish(self) -> InjectedFault:
        self._cancel.set()
        self._thread.join(timeout=120)
        return self._result
