"""The ssh provider: the nodes are hosts reached with the OpenSSH client (docs/ssh-provider.md).

One master connection per host carries every command of the run (`transport`); processes are
started on the node in their own session, watched and stopped there by PID (`process`,
`node_tools`); ports are chosen, /dev/shm cleaned and the inventory taken on the node, by its
own python3 running source sent over the connection (nothing of servebench is installed there).
A host where the run started a process also gets a warden (`node_tools.start_warden`) that
stops the run's processes there once the orchestrator stops renewing the run's lease: a killed
orchestrator, or a host cut off from it (its sshd gone), leaves nothing running behind.
"""

from __future__ import annotations

import os
import secrets
import shlex
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import ClassVar

from servebench.providers import inventory as inventory_module
from servebench.providers.base import LINK_SHAPING, Node
from servebench.providers.remote import TestbedHostLinks, clock_offset, get_tree, put_tree, under_any
from servebench.providers import node_tools
from servebench.providers.ssh.argv import (
    check_run_id, env_argv, parse_started, pinned_argv, remote_files, remote_run_dir, sh_command, ssh_argv,
    start_script,
)
from servebench.providers.ssh.process import SshProcess
from servebench.providers.ssh.spec import SshHostSpec, SshProviderSpec
from servebench.providers.ssh.transport import SshError, SshTransport

NODE_TOOLS = Path(node_tools.__file__)
INVENTORY = Path(inventory_module.__file__)
LEFTOVER_GRACE_S = 5.0


class SshProvider(TestbedHostLinks):
    kind: ClassVar[str] = "ssh"
    spec_model: ClassVar[type[SshProviderSpec]] = SshProviderSpec
    capabilities: ClassVar[frozenset[str]] = frozenset({LINK_SHAPING})  # testbed hosts' links

    def __init__(self, spec: SshProviderSpec, reserved_cpus: list[int] = (), run_id: str | None = None):
        """`reserved_cpus` are the load generator's CPUs on the orchestrator: another host than
        the nodes, so they are not taken from any node."""
        self.spec = spec
        self.run_id = check_run_id(run_id or secrets.token_hex(4))
        self.transport = SshTransport(spec, self.run_id)
        self.run_dir = remote_run_dir(spec.remote_dir, self.run_id)
        self._hosts = {host.name: host for host in spec.hosts}
        self._started: list[SshProcess] = []
        self._touched: set[str] = set()  # hosts where the run dir may exist
        self._warded: set[str] = set()   # hosts with a warden of the run, whose lease is renewed
        self._renewing = threading.Event()
        self._released = threading.Event()
        self._lease_lock = threading.Lock()  # a renewal never runs while the release closes the masters

    # ------------------------------------------------------------------ the campaign's block

    @classmethod
    def host_cpus(cls) -> set[int]:
        """The orchestrator's CPUs: the load generator runs here, not on a node."""
        return set(os.sched_getaffinity(0))

    @classmethod
    def spec_problems(cls, spec: SshProviderSpec, host_cpus: set[int]) -> list[tuple[tuple, str]]:
        """Repeated names, and two nodes on one host (address and port) sharing CPUs. The CPUs are
        not checked against this host: the nodes are other machines (`inventory` tells theirs)."""
        problems: list[tuple[tuple, str]] = []
        for index, host in enumerate(spec.hosts):
            if host.emulate is not None:
                problems.append((("provider", "hosts", index, "emulate"), "emulated nodes are local provider "
                                 "nodes (qemu-user on this host); an SSH host runs its own CPU"))
            earlier = spec.hosts[:index]
            if any(other.name == host.name for other in earlier):
                problems.append((("provider", "hosts", index, "name"), f"host name {host.name!r} is used "
                                 "more than once"))
            for other in earlier:
                shared = sorted(set(host.cpus) & set(other.cpus))
                if (other.address, other.port) == (host.address, host.port) and shared:
                    problems.append((("provider", "hosts", index, "address"), f"{host.name} and {other.name} are "
                                     f"the same host ({host.address}) and share CPUs {shared}"))
        return problems

    # ------------------------------------------------------------------ nodes

    def nodes(self) -> list[Node]:
        return [Node(name=host.name, address=host.address, cpus=list(host.cpus)) for host in self.spec.hosts]

    def allocate(self) -> list[Node]:
        """Open each host's master connection (in parallel); an unreachable host is named with ssh's words."""
        self.transport.prepare()
        with ThreadPoolExecutor(max_workers=min(8, len(self.spec.hosts))) as pool:
            results = list(pool.map(lambda host: (host, self.transport.ssh(host.name, "true", timeout=60)),
                                    self.spec.hosts))
        failed = [f"{self.transport.describe(host.name)}: {result.stderr.strip() or f'exit {result.returncode}'}"
                  for host, result in results if result.returncode != 0]
        if failed:
            raise SshError("cannot reach host(s) over ssh:\n  " + "\n  ".join(failed))
        return self.nodes()

    def host_spec(self, node: Node) -> SshHostSpec:
        try:
            return self._hosts[node.name]
        except KeyError:
            raise ValueError(f"node {node.name!r} is not a host of this ssh provider") from None

    # ------------------------------------------------------------------ commands on a node

    def run(self, node: Node, argv: list[str], timeout: float | None = None) -> subprocess.CompletedProcess:
        """argv, shell-quoted, on the node; the remote exit code (255: ssh itself failed)."""
        self.host_spec(node)
        return self.transport.ssh(node.name, shlex.join(argv), timeout=timeout)

    def inventory(self, node: Node) -> dict:
        """servebench.providers.inventory.collect, run by the node's python3 (its source sent over)."""
        return self.transport.call(node.name, INVENTORY, "collect", self.spec.python, cpus=node.cpus)

    def free_port(self, node: Node) -> int:
        """A port the node's kernel picks on the node's address (free there, not here)."""
        return int(self.transport.call(node.name, NODE_TOOLS, "free_port", self.spec.python, address=node.address))

    def shm_entries(self, node: Node) -> set[str]:
        return set(self.transport.call(node.name, NODE_TOOLS, "shm_entries", self.spec.python))

    def remove_shm_created_since(self, node: Node, before: set[str]) -> list[str]:
        return self.transport.call(node.name, NODE_TOOLS, "remove_shm_created_since", self.spec.python,
                                   before=sorted(before))

    def free_port_range(self, node: Node, size: int) -> int:
        return int(self.transport.call(node.name, NODE_TOOLS, "free_port_range", self.spec.python,
                                       address=node.address, size=size))

    def claims(self) -> list[str]:
        """Each host's CPUs the run uses (two runs from this machine never share one)."""
        return [f"ssh/{h.user}@{h.address}:{h.port}/cpu{cpu}" for h in self.spec.hosts for cpu in h.cpus]

    def allocation_record(self) -> dict:
        return {"hosts": [{"name": h.name, "address": h.address, "user": h.user, "port": h.port,
                           "cpus": list(h.cpus)} for h in self.spec.hosts]}

    # ------------------------------------------------------------------ files and clocks

    def shares(self, path: str) -> bool:
        """Only under the campaign's `shared_paths` (an NFS home, a parallel file system)."""
        return under_any(path, self.spec.shared_paths)

    def _pipe(self, node: Node):
        self.host_spec(node)
        return lambda argv: ssh_argv(self.transport.config, node.name, shlex.join(argv))

    def put_tree(self, node: Node, local: Path, remote: str) -> None:
        self._touched.add(node.name)
        put_tree(self._pipe(node), local, remote, self.run_id)

    def get_tree(self, node: Node, remote: str, local: Path) -> bool:
        return get_tree(self._pipe(node), remote, local)

    def tree_digest(self, node: Node, path: str) -> str | None:
        return self.transport.call(node.name, NODE_TOOLS, "tree_digest", self.spec.python, timeout=1800, path=path)

    def scratch_dir(self, node: Node) -> str:
        """The run's directory on every node (removed at release)."""
        return self.run_dir

    def node_python(self, node: Node) -> str:
        return self.spec.python

    def clock_offset(self, node: Node) -> float:
        """`date` over the master (~10 ms a round trip: the offset is known within ~5 ms)."""
        return clock_offset(lambda: float(self.transport.checked(node.name, "date +%s.%N", "reading the clock")))

    # ------------------------------------------------------------------ long-lived processes

    def command(self, node: Node, argv: list[str]) -> list[str]:
        """The ssh command line `start` runs for argv (environment aside), as `plan` prints it."""
        return ssh_argv(self.transport.config, node.name, self._start_command(node, argv, {}, (), "process.log", 0))

    def _start_command(self, node: Node, argv: list[str], env: dict[str, str], unset, log_name: str,
                       sequence: int) -> str:
        files = remote_files(self.run_dir, sequence, log_name)
        marked = {"TMPDIR": self.run_dir, **env, node_tools.MARK_VARIABLE: self._mark(sequence)}
        full = env_argv(marked, list(unset)) + pinned_argv(self.host_spec(node).cpus, list(argv))
        return sh_command(start_script(self.run_dir, files, full))

    def _mark(self, sequence: int) -> str:
        """What every process of this start (and all it spawns) carries in its environment."""
        return f"{self.run_id}.{sequence}"

    def start(self, node: Node, argv: list[str], env: dict[str, str], log_path: Path,
              unset: list[str] = ()) -> SshProcess:
        """Start argv on the node in its own session, env added and unset removed from the login
        environment, output to a log in the run's directory there (copied to log_path)."""
        sequence = len(self._started) + 1
        remote = self._start_command(node, argv, env, unset, Path(log_path).name, sequence)
        self._touched.add(node.name)
        self._ward(node.name)
        pid, ticks = parse_started(self.transport.checked(node.name, remote, f"starting {argv[:1]}"))
        process = SshProcess(node=node.name, pid=pid, start_ticks=ticks, log_path=Path(log_path),
                             files=remote_files(self.run_dir, sequence, Path(log_path).name), argv=list(argv),
                             transport=self.transport, python=self.spec.python, mark=self._mark(sequence))
        self._started.append(process)
        return process

    def stop(self, process: SshProcess, grace_s: float = 20.0) -> int | None:
        return process.stop(grace_s=grace_s)

    # ------------------------------------------------------------------ the run's lease on each host

    def _ward(self, host: str) -> None:
        """A warden on the host before the run's first process there, and the lease renewed from
        then on (one thread for every host)."""
        if host in self._warded:
            return
        self.transport.call(host, NODE_TOOLS, "start_warden", self.spec.python, run_dir=self.run_dir,
                            prefix=f"{self.run_id}.", lease_s=self.spec.lease_s, grace_s=LEFTOVER_GRACE_S)
        self._warded.add(host)
        if not self._renewing.is_set():
            self._renewing.set()
            threading.Thread(target=self._renew_leases, name=f"ssh-lease-{self.run_id}", daemon=True).start()

    def _renew_leases(self) -> None:
        """Touch each warded host's lease every lease_s/5 s until release; a host that cannot be
        reached is tried again next time (its warden acts once the lease is lease_s old)."""
        interval = self.spec.lease_s / 5
        lease = shlex.quote(f"{self.run_dir}/{node_tools.LEASE_NAME}")
        while not self._released.wait(interval):
            for host in sorted(self._warded):
                with self._lease_lock:
                    if self._released.is_set():
                        return
                    try:
                        self.transport.ssh(host, f"touch -c {lease}", timeout=interval)
                    except (SshError, subprocess.TimeoutExpired):
                        pass

    # ------------------------------------------------------------------ the end of the run

    def stop_leftovers(self) -> int:
        """Stop every process of this run not yet stopped; return how many there were."""
        left = [p for p in self._started if not p.stopped]
        errors = []
        for process in left:
            try:
                process.stop(grace_s=LEFTOVER_GRACE_S)
            except (SshError, subprocess.TimeoutExpired) as exc:
                errors.append(f"{process.node} pid {process.pid}: {exc}")
        self._started.clear()
        if errors:
            raise SshError("could not stop every process of the run:\n  " + "\n  ".join(errors))
        return len(left)

    def release(self) -> None:
        """Stop what is left (the processes started, then anything on a node that still carries
        the run's mark), remove the run's directory on each host, close the masters."""
        try:
            self.stop_leftovers()
        finally:
            try:
                self._clean_hosts()
            finally:
                with self._lease_lock:
                    self._released.set()  # a host not cleaned (unreachable) is left to its warden
                self.transport.close()

    def reclaim(self, record: dict) -> list[str]:
        """On every host reachable now: stop the run's marked processes and remove its directory
        (its warden then ends). An unreachable host is left to its warden."""
        done = []
        for host in self.spec.hosts:
            try:
                found = self.transport.call(host.name, NODE_TOOLS, "stop_marked", self.spec.python,
                                            prefix=f"{self.run_id}.", grace_s=LEFTOVER_GRACE_S)
                self.transport.checked(host.name, shlex.join(["rm", "-rf", "--", self.run_dir]), "removing the run dir")
                if found:
                    done.append(f"{host.name}: stopped {len(found)} process(es) of the run")
            except (SshError, subprocess.TimeoutExpired) as exc:
                done.append(f"{host.name}: not reachable ({str(exc).splitlines()[0]}): its warden stops what the "
                            f"run left there once the lease ({self.spec.lease_s} s) runs out")
        return done

    def _clean_hosts(self) -> None:
        errors = []
        for name in sorted(self._touched):
            try:
                self.transport.call(name, NODE_TOOLS, "stop_marked", self.spec.python, prefix=f"{self.run_id}.",
                                    grace_s=LEFTOVER_GRACE_S)
                self.transport.checked(name, shlex.join(["rm", "-rf", "--", self.run_dir]), "removing the run dir")
            except (SshError, subprocess.TimeoutExpired) as exc:
                errors.append(str(exc))
        self._touched.clear()
        if errors:
            raise SshError("could not clean every host of the run:\n  " + "\n  ".join(errors))


__all__ = ["SshError", "SshProcess", "SshProvider", "SshProviderSpec"]
