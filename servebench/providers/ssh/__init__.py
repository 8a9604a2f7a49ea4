"""The ssh provider: the nodes are hosts reached with the OpenSSH client (docs/ssh-provider.md).

A channel plus an allocation (`servebench.providers.remote.RemoteNodes` has the node methods):
the channel (`transport.SshChannel`) runs every command of the run over one master connection
per host, shell-quoted; the allocation is the campaign's host list, reached at `allocate`.
Processes are started on the node in their own session, watched and stopped there by PID;
ports are chosen, /dev/shm cleaned and the inventory taken on the node, by its own python3
running source sent over the connection (nothing of servebench is installed there).
Every command that starts a program or the host's python there first sources the run's prelude
(the campaign's `provider.setup` and `provider.env`, a 0600 file of the run's directory written
through ssh's stdin: no value on a command line). A host where the run started a process also
gets a warden (`node_tools.start_warden`) that stops the run's processes there once the
orchestrator stops renewing the run's lease: a killed orchestrator, or a host cut off from it
(its sshd gone), leaves nothing running behind.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import threading
from typing import ClassVar, Sequence, cast

from servebench.config.campaign import ProviderSpecBase
from servebench.providers import node_tools
from servebench.providers.base import Node, node_numa
from servebench.providers.fanout import each_node
from servebench.providers.remote import LEFTOVER_GRACE_S, NODE_TOOLS, RemoteNodes, RemoteProcess
from servebench.providers.ssh.argv import host_key_argv, host_key_fingerprints, host_key_problem
from servebench.providers.ssh.spec import SshHostSpec, SshProviderSpec
from servebench.providers.ssh.transport import SshChannel, SshError, SshTransport

SshProcess = RemoteProcess  # what `start` returns: a process started through the ssh channel


class SshProvider(RemoteNodes):
    kind: ClassVar[str] = "ssh"
    spec_model: ClassVar[type[SshProviderSpec]] = SshProviderSpec
    node_error = (SshError, subprocess.TimeoutExpired)

    def __init__(self, spec: SshProviderSpec, reserved_cpus: Sequence[int] = (), run_id: str | None = None):
        """`reserved_cpus` are the load generator's CPUs on the orchestrator: another host than
        the nodes, so they are not taken from any node."""
        super().__init__(spec, run_id)
        self.transport = SshTransport(spec, self.run_id)
        self._channel = SshChannel(self.transport)
        self._hosts = {host.name: host for host in spec.hosts}
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
    def spec_problems(cls, spec: ProviderSpecBase, host_cpus: set[int]) -> list[tuple[tuple, str]]:
        """Repeated names, and two nodes on one host (address and port) sharing CPUs. The CPUs are
        not checked against this host: the nodes are other machines (`inventory` tells theirs)."""
        # The campaign's provider block is parsed into this class's `spec_model` (campaign_model).
        ssh = cast(SshProviderSpec, spec)
        problems: list[tuple[tuple, str]] = []
        for index, host in enumerate(ssh.hosts):
            earlier = ssh.hosts[:index]
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
        return [Node(name=host.name, address=host.address, cpus=list(host.cpus), emulate=host.emulate,
                     numa=node_numa(host.numa, host.emulate, this_host=False),
                     interpreter=self.spec.interpreter) for host in self.spec.hosts]

    def allocate(self) -> list[Node]:
        """Open each host's master connection (`hosts_at_once` at a time); an unreachable host is named with
        ssh's words."""
        self.transport.prepare()
        results = each_node(self.spec.hosts, lambda host: (host, self.transport.ssh(host.name, "true", timeout=60)),
                            self.spec.hosts_at_once, name=lambda host: host.name)
        failed = [f"{self.transport.describe(host.name)}: "
                  + (host_key_problem(result.stderr, self.transport.known_hosts)
                     or result.stderr.strip() or f"exit {result.returncode}")
                  for host, result in results if result.returncode != 0]
        if failed:
            raise SshError("cannot reach host(s) over ssh:\n  " + "\n  ".join(failed))
        return self.nodes()

    def inventory(self, node: Node) -> dict:
        """The node's facts, with the host key it was reached by (`host_key`, landed in `nodes`): the
        fingerprints known_hosts holds for it, which the connection was just checked against."""
        facts = super().inventory(node)
        host = self.host_spec(node)
        try:
            found = subprocess.run(host_key_argv(self.transport.known_hosts, host.address, host.port),
                                   capture_output=True, text=True, timeout=30)
            facts["host_key"] = host_key_fingerprints(found.stdout)
        except (OSError, subprocess.TimeoutExpired):   # no ssh-keygen: the fact is missing, never invented
            facts["host_key"] = None
        return facts

    def host_spec(self, node: Node) -> SshHostSpec:
        try:
            return self._hosts[node.name]
        except KeyError:
            raise ValueError(f"node {node.name!r} is not a host of this ssh provider") from None

    def channel(self) -> SshChannel:
        return self._channel

    def node_host(self, node: Node) -> str:
        return self.host_spec(node).name

    def claims(self) -> list[str]:
        """Each host's CPUs the run uses (two runs from one machine never share one)."""
        return [f"ssh/{h.user}@{h.address}:{h.port}/cpu{cpu}" for h in self.spec.hosts for cpu in h.cpus]

    def allocation_record(self) -> dict:
        return {"hosts": [{"name": h.name, "address": h.address, "user": h.user, "port": h.port,
                           "cpus": list(h.cpus)} for h in self.spec.hosts]}

    # ------------------------------------------------------------------ the run's lease on each host

    def _before_start(self, host: str) -> None:
        """A warden on the host before the run's first process there, and the lease renewed from
        then on (one thread for every host)."""
        if host in self._warded:
            return
        self._channel.call(host, NODE_TOOLS, "start_warden", self.spec.python,
                           argv_prefix=self.prelude_prefix(host), run_dir=self.run_dir,
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

    def release(self) -> None:
        """Stop what is left (the processes started, then anything on a node that still carries
        the run's mark), remove the run's directory on each host, close the masters."""
        try:
            self.stop_leftovers()
        finally:
            try:
                errors = self._clean_nodes()
                if errors:
                    raise SshError("could not clean every host of the run:\n  " + "\n  ".join(errors))
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
                # node_tools.stop_marked returns the PIDs it stopped: a JSON list of ints.
                found = cast(list[int], self._channel.call(
                    host.name, NODE_TOOLS, "stop_marked", self.spec.python, argv_prefix=self.prelude_prefix(host.name),
                    prefix=f"{self.run_id}.", grace_s=LEFTOVER_GRACE_S))
                self._channel.checked(host.name, ["rm", "-rf", "--", self.run_dir], "removing the run dir")
                if found:
                    done.append(f"{host.name}: stopped {len(found)} process(es) of the run")
            except (SshError, subprocess.TimeoutExpired) as exc:
                done.append(f"{host.name}: not reachable ({str(exc).splitlines()[0]}): its warden stops what the "
                            f"run left there once the lease ({self.spec.lease_s} s) runs out")
        return done


__all__ = ["SshError", "SshProcess", "SshProvider", "SshProviderSpec"]
