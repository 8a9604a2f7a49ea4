"""A Ray cluster over the provisioned nodes: started once per campaign, stopped by PID.

Each node runs `ray start --block` from the engine venv, so the process servebench
starts is the node's Ray for its whole life; every daemon it spawns is its descendant
and is stopped by PID with it (never `ray stop`, which would stop other users' Ray on a
shared host). Every port is chosen free, the dashboard is off, and each node's CPU count
is the number of vLLM workers it may take. Each node has a Ray temp dir of its own
(`--temp-dir` <root>/<index>.<attempt>, under a short /tmp/sb-ray-* root), so its logs are
its own and never another Ray's /tmp/ray; on stop the logs are copied to the run's
ray/ray-logs/ and the temp root is removed.

Ray's own start-up and health timeouts serve hosts with cores to spare. When the plan knows a host is
oversubscribed (`host_loads`: the ranks' OpenMP threads, its node samplers, Ray's daemons and the API
server and, on the orchestrator's host, the load generator outnumber its cores), every node of the
cluster gets longer ones (`BUSY_HOST_TIMEOUTS`: a node waits on the others, so one slow host slows them
all), as it does when the campaign says so (`engine.ray_timeouts`); the plan says which and why
(`timeouts_note`). Every `ray start` turns off the drain Ray waits out on SIGTERM (`STOP_ENV`). The head
starts first; then the workers side by side in waves of one, two, four nodes and so on up to the campaign's
`hosts_at_once` (half the last after a wave with a failed node), one driver on the head asking each second
which of them the GCS lists as alive; a node whose `ray start` fails is
stopped by PID and started again with fresh ports and a fresh temp dir, up to `START_ATTEMPTS` times
(each retry is said: `RayCluster.notes`, which the run prints); and a node that still fails raises an
error naming the node, each attempt, its exit code, and the end of its `ray start` output and of its
raylet and GCS logs.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import secrets
import socket
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from servebench.engines.base import PortSource
from servebench.logs import tail
from servebench.providers import Node, NodeProcess, Provider
from servebench.providers.fanout import hosts_at_once, outcomes
from servebench.waiting import poll

OBJECT_STORE_BYTES = 300 * 1024 * 1024  # vLLM passes little through it; Ray's default is 30% of RAM
WORKER_PORTS = 100
START_ATTEMPTS = 3
NODE_START_TIMEOUT_S = 300.0  # one attempt; more than RAY_raylet_start_wait_time_s, so Ray gives up first
TAIL_LINES = 15
POLL_S = 1.0

# Ray's start-up timeouts, raised for a host whose cores are all busy (Ray 2.60; the names
# are Ray's own: RayConfig reads RAY_<name> for each RAY_CONFIG item of
# src/ray/common/ray_config_def.h, and the Python side reads the rest from the
# environment). A variable already set in servebench's environment wins over these, and
# a campaign's `engine.env` over both.
BUSY_HOST_TIMEOUTS = {
    # `ray start` waits for the GCS to list its node: ray/_private/node.py retries
    # services.get_node() for a fixed 30 s, and each call (GlobalStateAccessor::GetNode)
    # polls the GCS for up to raylet_start_wait_time_s. The timeout behind "The current
    # node timed out during startup ... the GCS has become overloaded".
    "RAY_raylet_start_wait_time_s": "180",
    # every synchronous GCS request, Python's GCS_SERVER_REQUEST_TIMEOUT_SECONDS included
    # (a joining node's look-up of the head) (default 60)
    "RAY_gcs_server_request_timeout_seconds": "120",
    # the head's wait for the GCS port file, and the number of ~1 s tries every node makes
    # to connect its GCS client (defaults 30 s and 20 tries)
    "RAY_gcs_server_port_wait_time_s": "120",
    # tries (2 s apart) to read the session name and the head's node info from the GCS (default 20)
    "RAY_NUM_REDIS_GET_RETRIES": "60",
    # the raylet exits when its runtime-env / dashboard agent (Python processes, slow to
    # import on a busy host) has not answered in this long (default 30 000)
    "RAY_agent_register_timeout_ms": "180000",
    # a raylet's (or worker's) GCS client: connect timeout, and how long it may be cut off
    # from the GCS before it exits (defaults 5 and 60)
    "RAY_gcs_rpc_server_connect_timeout_s": "60",
    "RAY_gcs_rpc_server_reconnect_timeout_s": "300",
    # tries (1 s each) a worker or the plasma client makes to reach its raylet (default 10)
    "RAY_raylet_client_num_connect_attempts": "60",
    # a Ray worker process (a vLLM worker, importing torch) must register within this (default 60)
    "RAY_worker_register_timeout_seconds": "300",
    # the GCS marks a raylet dead after this many failed health checks of this timeout
    # (defaults 5 and 10 000): a starved raylet answers late, not never
    "RAY_health_check_failure_threshold": "10",
    "RAY_health_check_timeout_ms": "30000",
}
STOP_ENV = {
    # Not a start-up timeout but the stop's, for every cluster: on SIGTERM `ray start --block` first marks its node
    # draining and waits up to this long for the raylet to go idle and exit (for Ray Serve's
    # proxies; default 30), longer than servebench's stop grace (20 s), so every stop of a
    # cluster waited out the grace and ended in SIGKILL. Nothing here serves through Ray Serve:
    # the node is torn down at once, each daemon SIGTERMed by its `ray start`.
    "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0",
}
RAY_STARTUP_ENV = {**BUSY_HOST_TIMEOUTS, **STOP_ENV}   # what a busy host's `ray start` gets
# engine.ray_timeouts: 'auto' (the longer ones where a host is oversubscribed), 'ray' (Ray's own), 'busy-host'
TIMEOUT_SETTINGS = ("auto", "ray", "busy-host")

# `ray start` output that a second attempt with the same venv would print again
PORT_TRIES = 100  # kernel-picked ports tried before giving up on one clear of the others
PERMANENT_FAILURES = ("ModuleNotFoundError", "ImportError", "No such option", "Invalid value for")
CLICK_USAGE_ERROR = 2
# A Unix socket path (session dir + "/sockets/plasma_store") may be 107 bytes at most;
# Ray names the session "session_<date>_<time>_<microseconds>_<pid>", at most 42 characters.
SOCKET_PATH_MAX = 107
SOCKET_SUFFIX = len("/session_2026-01-01_00-00-00_000000_4194304/sockets/plasma_store")


class RayClusterError(Exception):
    pass


@dataclass(frozen=True)
class StartSettings:
    """What every node's `ray start` of one cluster shares: the venv's `ray`, the CPUs each node offers
    (its vLLM worker slots), the environment the node's own names are added to, the head's GCS address
    (host:port) and the root under which each attempt gets its temp dir."""

    ray_bin: str
    slots: int
    base_env: dict[str, str]
    head_address: str
    temp_root: str


@dataclass
class RayNodePlan:
    node: Node
    head: bool
    argv: list[str]
    env: dict[str, str]
    gcs_address: str                   # the head's GCS, host:port
    temp_dir: str = ""                 # this attempt's --temp-dir (its logs: session_latest/logs)
    attempt: int = 1
    timeouts_note: str | None = None   # why the cluster has the busy host's timeouts (None: Ray's own)

    @property
    def node_manager_port(self) -> int:
        return int(_flag_value(self.argv, "--node-manager-port"))


@dataclass
class RayCluster:
    address: str                       # GCS address, what RAY_ADDRESS is set to
    head: Node
    plans: list[RayNodePlan]
    processes: list[NodeProcess] = field(default_factory=list)
    shm_before: dict[str, set[str]] = field(default_factory=dict)    # node name -> its /dev/shm before
    ready_seconds: float | None = None
    log_dir: Path | None = None        # the run's ray/ directory: the nodes' Ray logs land here on stop
    engine_python: str = ""            # the engine venv's python (asks the GCS which nodes are alive)
    notes: list[str] = field(default_factory=list)  # a start attempt that failed and was retried, a line each

    @property
    def slots_per_node(self) -> int:
        """Each node's --num-cpus: the most vLLM workers a mode of the campaign puts on one node."""
        return int(_flag_value(self.plans[0].argv, "--num-cpus"))

    def repair(self, provider: Provider) -> list[str]:
        """Start again the nodes that were lost (a fault, an OOM kill): what was done, one line each
        (a retried start among them)."""
        noted = len(self.notes)
        said = restart_lost_nodes(provider, self)
        return said + self.notes[noted:]

    def pids_by_node(self) -> dict[str, list[int]]:
        """Each node's `ray start --block` process, for that node's sampler to follow."""
        pids: dict[str, list[int]] = {}
        for plan, process in zip(self.plans, self.processes):
            pids.setdefault(plan.node.name, []).append(process.pid)
        return pids


@dataclass
class NodeStartFailure:
    """One failed `ray start` of one node, with what it and its Ray logs said."""

    node: str
    attempt: int
    exit_code: int | None              # None: still running, but not alive in the GCS in time
    waited_s: float
    output_path: str                   # the `ray start` output
    output_tail: list[str]
    log_tails: dict[str, list[str]]    # Ray log file -> its last lines (missing files left out)

    @property
    def what(self) -> str:
        if self.exit_code is None:
            return f"not alive in the GCS after {self.waited_s:.0f} s"
        return f"`ray start` exited with code {self.exit_code} after {self.waited_s:.0f} s"


def node_key(node: Node) -> str:
    """Distinct for every node, simulated ones on one host included: the plugin's guard
    against shared memory between nodes keys on it."""
    return f"{node.name}@{socket.gethostname()}"


def ray_auth_env(token_path: str | None) -> dict[str, str]:
    """Ray's token authentication (Ray 2.52+, off unless asked for): every `ray start`, raylet, GCS and driver
    with `RAY_AUTH_MODE=token` checks the token read from the file `RAY_AUTH_TOKEN_PATH` names (Ray 2.60's
    `ray._private.authentication` and its C++ token loader; a token in `RAY_AUTH_TOKEN` would put it in the
    environment of every process, and on a remote provider's command line). Nothing without a token file."""
    return {} if token_path is None else {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": token_path}


def _auth_kwargs(cluster: RayCluster) -> dict[str, str]:
    """The token file a driver of this cluster reads (none: a cluster started without one)."""
    path = cluster.plans[0].env.get("RAY_AUTH_TOKEN_PATH") if cluster.plans else None
    return {"token_path": path} if path else {}


def ray_startup_env(inherited: Mapping[str, str], busy: bool = True) -> dict[str, str]:
    """What a `ray start` (or a driver) is given on top of its environment: the longer timeouts on a busy
    host (`busy`), the stop's setting always, less what the inherited environment already sets."""
    chosen = RAY_STARTUP_ENV if busy else STOP_ENV
    return {name: value for name, value in chosen.items() if name not in inherited}


@dataclass(frozen=True)
class HostLoad:
    """What runs at once on one host while a Ray mode serves, against the host's cores: the ranks' OpenMP
    threads of its nodes, and beside them on each node a node sampler and Ray's own daemons (raylet and
    agents, the GCS on the head: what the timeouts wait for), the API server on the head node, the load
    generator on the orchestrator's host."""

    host: str
    nodes: tuple[str, ...]
    rank_threads: int
    others: int                        # samplers, Ray's daemons, the API server, the load generator
    cores: int

    @property
    def oversubscribed(self) -> bool:
        return self.rank_threads + self.others > self.cores

    def text(self) -> str:
        return (f"host {self.host} (node {', '.join(self.nodes)}): {self.rank_threads} rank threads and "
                f"{self.others} other processes (node samplers, Ray's daemons, the API server, the load "
                f"generator) on {self.cores} cores")


def is_local_address(address: str) -> bool:
    """A loopback address (the local provider's nodes): the orchestrator's own host."""
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def host_loads(nodes: list[Node], rank_threads: Mapping[str, int], facts: Mapping[str, dict] | None = None,
               local_cores: int | None = None) -> list[HostLoad]:
    """Each host's load (`rank_threads`: the OpenMP threads a mode's ranks run on each node, by name).

    With the nodes' inventories (`facts`, by node name: a run) the nodes of one hostname are one host, of its
    `logical_cores`. Without them (the plan, before any node is reached) nodes at loopback addresses are the
    orchestrator's host, of its cores (`local_cores`, else os.cpu_count()), and any other address is a host
    of its own, whose cores are as far as the plan knows the CPUs the campaign gives its nodes. The load
    generator is counted on the orchestrator's host (where it runs unless the campaign names a client node),
    the API server on the first node's (the head's)."""
    facts = facts or {}
    hosts: dict[str, list[Node]] = {}
    cores: dict[str, int] = {}
    orchestrators: set[str] = set()
    for node in nodes:
        fact = facts.get(node.name) or {}
        hostname = fact.get("hostname")
        local = hostname == socket.gethostname() if hostname else is_local_address(node.address)
        host = str(hostname or (socket.gethostname() if local else node.address))
        hosts.setdefault(host, []).append(node)
        known = fact.get("logical_cores") or ((local_cores or os.cpu_count()) if local else None)
        cores[host] = int(known) if known else len({cpu for member in hosts[host] for cpu in member.cpus})
        if local:
            orchestrators.add(host)
    return [HostLoad(host=host, nodes=tuple(n.name for n in members),
                     rank_threads=sum(rank_threads.get(n.name, 0) for n in members),
                     others=2 * len(members) + (1 if nodes[0] in members else 0) + (1 if host in orchestrators else 0),
                     cores=cores[host])
            for host, members in hosts.items()]


def busy_timeouts(setting: str, loads: list[HostLoad]) -> bool:
    """Whether the cluster's nodes get BUSY_HOST_TIMEOUTS: the campaign's `engine.ray_timeouts`, and with
    'auto' (the default) only where a host is oversubscribed."""
    if setting not in TIMEOUT_SETTINGS:
        raise ValueError(f"ray_timeouts {setting!r}: one of {', '.join(TIMEOUT_SETTINGS)}")
    return setting == "busy-host" or (setting == "auto" and any(load.oversubscribed for load in loads))


def timeouts_note(setting: str, loads: list[HostLoad]) -> str | None:
    """What the plan says when Ray's own timeouts are not the ones used (None: they are, and only then)."""
    if not busy_timeouts(setting, loads):
        return None
    if setting == "busy-host":
        return "Ray's start-up and health timeouts: the longer ones for a busy host (engine.ray_timeouts: busy-host)"
    why = "; ".join(load.text() for load in loads if load.oversubscribed)
    return (f"Ray's start-up and health timeouts: the longer ones for a busy host, as {why} "
            "(engine.ray_timeouts: ray keeps Ray's own)")


def cluster_loads(nodes: list[Node], slots_per_node: int, facts: Mapping[str, dict] | None = None,
                  local_cores: int | None = None) -> list[HostLoad]:
    """The hosts' loads while a mode of the cluster serves: on each node the most OpenMP threads its ranks
    run, a slot's ranks splitting the node's CPUs, one core each at least."""
    threads = {node.name: max(slots_per_node, len(node.cpus)) for node in nodes}
    return host_loads(nodes, threads, facts, local_cores)


@dataclass(frozen=True)
class TimeoutChoice:
    """How a cluster's timeouts are chosen: the campaign's `engine.ray_timeouts` and the nodes' inventories
    (by node name) its hosts are judged by. The default, a busy host's, is for a caller that says nothing."""

    setting: str = "busy-host"
    facts: Mapping[str, dict] | None = None


def inventories(provider: Provider, nodes: list[Node]) -> dict[str, dict]:
    """Each node's hardware facts (hostname, logical cores) by name; a node that cannot say is judged
    without them (by its address and the CPUs the campaign gives it)."""
    found = {}
    for node in nodes:
        try:
            found[node.name] = provider.inventory(node)
        except Exception:  # the choice of timeouts is never a reason for a cluster not to start
            continue
    return found


def plan_cluster(nodes: list[Node], ray_bin: str, slots_per_node: int, engine_env: dict[str, str],
                 ports: PortSource, temp_root: str | None = None, token_path: str | None = None,
                 timeouts: TimeoutChoice = TimeoutChoice()) -> list[RayNodePlan]:
    """The `ray start` command and environment of every node (the first is the head).

    Each node's Ray temp dir is `<temp_root>/<index>.<attempt>` on that node; temp_root is a
    new short name in the node's own /tmp by default (Ray's Unix socket paths must stay short; `ray
    start` makes the directories; the orchestrator's TMPDIR names nothing on another host). Every port
    is picked on the node that binds it (`ports`). With `token_path` (the run's token file, at that path on
    every node) the cluster asks for it (`ray_auth_env`); a campaign's `engine.env` may override that by name.
    `timeouts`: the campaign's `engine.ray_timeouts` ('auto': the longer ones if a host is oversubscribed,
    judged with the nodes' inventories); the plans carry the note that says so (`timeouts_note`).
    """
    root = temp_root or f"/tmp/sb-ray-{secrets.token_hex(4)}"
    _check_socket_path_length(root)
    head_address = f"{nodes[0].address}:{ports.free_port(nodes[0])}"
    note = timeouts_note(timeouts.setting, cluster_loads(nodes, slots_per_node, timeouts.facts))
    base_env = {**ray_startup_env(os.environ, busy=note is not None), **ray_auth_env(token_path), **engine_env}
    settings = StartSettings(ray_bin, slots_per_node, base_env, head_address, temp_root=root)
    return [replace(_plan_node(node, index, 1, settings, ports), timeouts_note=note)
            for index, node in enumerate(nodes)]


def replan_node(plans: list[RayNodePlan], index: int, ports: PortSource) -> list[RayNodePlan]:
    """The plans for node `index`'s next attempt: fresh ports and temp dir for it.

    A new head has a new GCS port, and every other node joins it there.
    """
    old = plans[index]
    host = old.gcs_address.rsplit(":", 1)[0]
    head_address = f"{host}:{ports.free_port(old.node)}" if old.head else old.gcs_address
    settings = StartSettings(ray_bin=old.argv[0], slots=int(_flag_value(old.argv, "--num-cpus")), base_env=old.env,
                             head_address=head_address, temp_root=str(Path(old.temp_dir).parent))
    new = list(plans)
    new[index] = replace(_plan_node(old.node, index, old.attempt + 1, settings, ports), timeouts_note=old.timeouts_note)
    if old.head:
        for other, plan in enumerate(new):
            if other != index:
                new[other] = replace(plan, gcs_address=head_address,
                                     argv=_with_flag_value(plan.argv, "--address", head_address))
    return new


def _plan_node(node: Node, index: int, attempt: int, settings: StartSettings, ports: PortSource) -> RayNodePlan:
    head = index == 0
    head_address = settings.head_address
    temp_dir = f"{settings.temp_root}/{index}.{attempt}"
    taken = {int(head_address.rsplit(":", 1)[1])} if head else set()
    worker_base = _worker_range(ports, node, taken)
    taken |= set(range(worker_base, worker_base + WORKER_PORTS))

    def free_port() -> int:
        """A free port outside the worker range and unlike the others picked: the kernel picks each
        anew, and Ray refuses to start when one falls in its own worker range (seen: 'worker_ports is
        trying to use a port number ... that is used by other components')."""
        for _ in range(PORT_TRIES):
            port = ports.free_port(node)
            if port not in taken:
                taken.add(port)
                return port
        raise RuntimeError(f"node {node.name}: no free port outside Ray's worker range in {PORT_TRIES} tries")

    argv = [settings.ray_bin, "start", "--block", "--num-cpus", str(settings.slots), "--num-gpus", "0",
            "--node-ip-address", node.address, "--object-store-memory", str(OBJECT_STORE_BYTES),
            "--node-manager-port", str(free_port()), "--object-manager-port", str(free_port()),
            "--min-worker-port", str(worker_base), "--max-worker-port", str(worker_base + WORKER_PORTS - 1),
            "--dashboard-agent-listen-port", str(free_port()), "--dashboard-agent-grpc-port", str(free_port()),
            "--runtime-env-agent-port", str(free_port()), "--metrics-export-port", str(free_port()),
            "--temp-dir", temp_dir, "--disable-usage-stats"]
    if head:
        argv += ["--head", "--port", head_address.rsplit(":", 1)[1], "--include-dashboard", "false",
                 "--ray-client-server-port", str(free_port())]
    else:
        argv += ["--address", head_address]
    env = {**settings.base_env, "SERVEBENCH_NODE_NAME": node.name, "SERVEBENCH_NODE_KEY": node_key(node),
           "RAY_USAGE_STATS_ENABLED": "0", "HF_HUB_OFFLINE": "1"}
    return RayNodePlan(node=node, head=head, argv=argv, env=env, gcs_address=head_address, temp_dir=temp_dir,
                       attempt=attempt)


def _worker_range(ports: PortSource, node: Node, taken: set[int]) -> int:
    """The base of WORKER_PORTS free ports none of which is taken already (the head's GCS port)."""
    for _ in range(PORT_TRIES):
        base = ports.free_port_range(node, WORKER_PORTS)
        if not taken & set(range(base, base + WORKER_PORTS)):
            return base
    raise RuntimeError(f"node {node.name}: no worker port range clear of {sorted(taken)} in {PORT_TRIES} tries")


def start_cluster(provider: Provider, plans: list[RayNodePlan], engine_python: str, log_dir: Path,
                  timeout_s: float = NODE_START_TIMEOUT_S, attempts: int = START_ATTEMPTS) -> RayCluster:
    """Start the head, then the workers side by side in growing waves, until the GCS lists them alive.

    `timeout_s` is what one `ray start` attempt has to show its node alive.
    """
    cluster = RayCluster(address=plans[0].gcs_address, head=plans[0].node, plans=list(plans),
                         shm_before={node.name: provider.shm_entries(node) for node in _nodes(plans)},
                         engine_python=engine_python)
    started = time.monotonic()
    log_dir.mkdir(parents=True, exist_ok=True)
    cluster.log_dir = log_dir
    try:
        _start_in_waves(provider, cluster, list(range(len(cluster.plans))), engine_python, log_dir, timeout_s,
                        attempts)
    except BaseException:
        stop_cluster(provider, cluster)
        raise
    cluster.ready_seconds = round(time.monotonic() - started, 1)
    return cluster


def restart_lost_nodes(provider: Provider, cluster: RayCluster, timeout_s: float = NODE_START_TIMEOUT_S,
                       forget_timeout_s: float = NODE_START_TIMEOUT_S) -> list[str]:
    """Nodes whose `ray start --block` exited (its raylet or its node was lost) are started again,
    with fresh ports and temp dirs, once the GCS no longer lists them as alive (else a placement
    group could be given the dead node's CPUs). A lost head takes the GCS with it: every node
    then starts again and joins the new head. Raises RayClusterError (naming the node) if a node
    does not come back; the next mode then fails to start with that cause."""
    lost = [index for index, process in enumerate(cluster.processes) if not process.alive()]
    if not lost:
        return []
    said = [f"Ray node {cluster.plans[index].node.name} was lost (`ray start` exited with code "
            f"{cluster.processes[index].exit_code()}): starting it again" for index in lost]
    if 0 in lost:
        said.append("the head was among them: every node starts again and joins a new head")
        lost = list(range(len(cluster.plans)))
    for index in lost:
        provider.stop(cluster.processes[index])  # what is left of it, by PID
    if lost[0] != 0:
        _wait_forgotten(provider, cluster, lost, forget_timeout_s)
    for index in lost:
        cluster.plans = replan_node(cluster.plans, index, provider)
        cluster.address = cluster.plans[0].gcs_address
    _start_in_waves(provider, cluster, lost, cluster.engine_python, cluster.log_dir or Path("."), timeout_s,
                    START_ATTEMPTS)
    return said


def _wait_forgotten(provider: Provider, cluster: RayCluster, lost: list[int], timeout_s: float) -> None:
    """Until the GCS lists none of the lost nodes as alive (its health checks: tens of seconds)."""
    ports = {cluster.plans[index].node_manager_port for index in lost}
    answered = False

    def forgotten() -> bool:
        nonlocal answered
        alive = alive_node_manager_ports(provider, cluster.head, cluster.engine_python, cluster.address,
                                         **_auth_kwargs(cluster))
        answered = answered or alive is not None
        return alive is not None and not alive & ports

    if poll(forgotten, timeout_s, interval_s=POLL_S):
        return
    names = ", ".join(cluster.plans[i].node.name for i in lost)
    if not answered:  # a driver on the head could not even connect: the head itself is not well
        raise RayClusterError(f"the Ray head did not answer whether the lost node(s) {names} are gone, for "
                              f"{timeout_s:.0f} s (no driver could connect on {cluster.head.name})")
    raise RayClusterError(f"the GCS still lists the lost Ray node(s) {names} as alive after {timeout_s:.0f} s")


def stop_cluster(provider: Provider, cluster: RayCluster) -> list[str]:
    """Stop the workers, then the head, each with all it spawned; clear their /dev/shm segments;
    keep each node's Ray logs in the run directory and remove the Ray temp dirs."""
    for process in reversed(cluster.processes):
        provider.stop(process)
    cluster.processes.clear()
    keep_logs_and_remove_temp(provider, cluster)
    removed: list[str] = []
    for node in _nodes(cluster.plans):
        removed += provider.remove_shm_created_since(node, cluster.shm_before.get(node.name, set()))
    return removed


def _nodes(plans: list[RayNodePlan]) -> list[Node]:
    """The cluster's nodes, each once."""
    return list({plan.node.name: plan.node for plan in plans}.values())


def keep_logs_and_remove_temp(provider: Provider, cluster: RayCluster) -> None:
    """<run>/ray/ray-logs/<index>.<attempt>/ gets each attempt's Ray logs, copied from the node
    that wrote them; the short temp root there (sockets, session files) goes: a run leaves
    nothing behind outside its directory."""
    root = str(Path(cluster.plans[0].temp_dir).parent) if cluster.plans and cluster.plans[0].temp_dir else None
    if root is None:
        return
    for index, plan in enumerate(cluster.plans):
        for attempt in range(1, plan.attempt + 1):
            name = f"{index}.{attempt}"
            if cluster.log_dir is not None:
                provider.get_tree(plan.node, f"{root}/{name}/session_latest/logs",
                                  cluster.log_dir / "ray-logs" / name)
    for node in _nodes(cluster.plans):
        provider.run(node, ["rm", "-rf", "--", root], timeout=120)


def _start_in_waves(provider: Provider, cluster: RayCluster, indices: list[int], engine_python: str,
                    log_dir: Path, timeout_s: float, attempts: int) -> None:
    """Start nodes `indices`: the head (index 0) alone first when it is among them, then the others
    side by side in waves that grow as the cluster takes them (`next_wave_size`), at most the campaign's
    `hosts_at_once`; every node started before keeps being watched (one that exits fails the start,
    naming it). A node that fails is stopped by PID and goes first into the next, smaller wave, as
    should_retry says; once it may not, the start fails naming it and every attempt."""
    running = [index for index in range(len(cluster.processes)) if index not in indices]
    queue = ([0] if 0 in indices else []) + [index for index in indices if index != 0]
    failures: dict[int, list[NodeStartFailure]] = {index: [] for index in indices}
    cap, size = hosts_at_once(provider), 1
    while queue:
        wave = [0] if queue[0] == 0 else queue[:size]
        queue = queue[len(wave):]
        failed = _start_wave(provider, cluster, wave, running, engine_python, log_dir, timeout_s)
        running += [index for index in wave if index not in failed]
        for index, failure in failed.items():
            failures[index].append(failure)
        _raise_final(cluster, failures, [index for index, failure in failed.items()
                                         if not should_retry(failure, cluster.plans[index].attempt, attempts)])
        for index, failure in failed.items():
            cluster.notes.append(retry_note(failure))
            cluster.plans = replan_node(cluster.plans, index, provider)
            cluster.address = cluster.plans[0].gcs_address
        queue = list(failed) + queue
        if wave != [0]:
            size = next_wave_size(len(wave), cap, bool(failed))


def next_wave_size(last: int, cap: int, failed: bool) -> int:
    """Ray's nodes register with one GCS, and a host whose cores are all busy starts a raylet slowly: a
    wave twice the last once every node of it came up, half of it after one failed, from one node to
    `cap`. Wide waves where the cluster takes them, narrow ones where it does not, without a number
    tuned to one kind of host."""
    return max(1, last // 2) if failed else max(1, min(cap, 2 * last))


def _raise_final(cluster: RayCluster, failures: dict[int, list[NodeStartFailure]], final: list[int]) -> None:
    """The start fails naming the first node that may not be retried, the others as notes."""
    if not final:
        return
    error = RayClusterError(start_failure_message(failures[final[0]]))
    for other in final[1:]:
        error.add_note(f"also: {start_failure_message(failures[other]).splitlines()[0]}")
    raise error


def _start_wave(provider: Provider, cluster: RayCluster, wave: list[int], running: list[int], engine_python: str,
                log_dir: Path, timeout_s: float) -> dict[int, NodeStartFailure]:
    """Start the wave's nodes side by side (cluster.processes[index] each) and wait until the head lists
    them alive; those that exit or time out are stopped by PID and returned, the others kept."""
    _launch(provider, cluster, wave, log_dir)
    failed = _wait_alive(provider, cluster, wave, running, engine_python, timeout_s)
    for index in failed:
        provider.stop(cluster.processes[index])  # by PID, with all it spawned; never `ray stop`
    return failed


def _launch(provider: Provider, cluster: RayCluster, indices: list[int], log_dir: Path) -> None:
    """`ray start` on each of the nodes at once; each process kept at its node's index, so a failure
    stops every one started."""
    def start(index: int) -> NodeProcess:
        plan = cluster.plans[index]
        suffix = "" if plan.attempt == 1 else f".{plan.attempt}"
        return provider.start(plan.node, plan.argv, plan.env, log_dir / f"ray-{plan.node.name}{suffix}.log",
                              unset=["RAY_ADDRESS"])

    done = outcomes(indices, start, len(indices))
    for index, outcome in zip(indices, done):
        if outcome.result is None:
            continue
        if index < len(cluster.processes):  # a retry, or a lost node started again (restart_lost_nodes)
            cluster.processes[index] = outcome.result
        else:
            cluster.processes.append(outcome.result)
    errors = [outcome.error for outcome in done if outcome.error is not None]
    if errors:
        raise errors[0]


def _wait_alive(provider: Provider, cluster: RayCluster, indices: list[int], watched: list[int],
                engine_python: str, timeout_s: float) -> dict[int, NodeStartFailure]:
    """Wait until the head lists every node of `indices` as alive (one driver on the head a poll for all
    of them); the failures of those that exit or time out, by index. A `watched` node (started
    before) that exits meanwhile raises: no retry of these nodes can help."""
    started = time.monotonic()
    waiting, failed = set(indices), {}

    def settled() -> bool:
        for index in waiting:
            cluster.processes[index].remember_descendants()  # a `ray start` that fails may leave its raylet
        for other in watched:
            if not cluster.processes[other].alive():
                lost = _failure(cluster, other, time.monotonic() - started)
                starting = ", ".join(cluster.plans[index].node.name for index in sorted(waiting))
                raise RayClusterError(start_failure_message(
                    [lost], f"Ray node {lost.node} exited with code {lost.exit_code} while {starting} "
                            f"{'was' if len(waiting) == 1 else 'were'} starting:"))
        for index in sorted(waiting):
            if not cluster.processes[index].alive():
                failed[index] = _failure(cluster, index, time.monotonic() - started)
                waiting.discard(index)
        if waiting:
            alive = alive_node_manager_ports(provider, cluster.head, engine_python, cluster.address,
                                             **_auth_kwargs(cluster)) or set()
            waiting.difference_update({index for index in waiting if cluster.plans[index].node_manager_port in alive})
        return not waiting

    if not poll(settled, timeout_s, interval_s=POLL_S):
        for index in sorted(waiting):
            failed[index] = _failure(cluster, index, time.monotonic() - started)  # not alive in time
    return dict(sorted(failed.items()))


def _failure(cluster: RayCluster, index: int, waited_s: float) -> NodeStartFailure:
    plan, process = cluster.plans[index], cluster.processes[index]
    logs = node_log_files(plan, cluster.plans[0])
    return NodeStartFailure(node=plan.node.name, attempt=plan.attempt, exit_code=process.exit_code(),
                            waited_s=waited_s, output_path=str(process.log_path),
                            output_tail=tail(process.log_path, TAIL_LINES) if process.log_path else [],
                            log_tails={str(path): tail(path, TAIL_LINES) for path in logs if path.exists()})


def alive_node_manager_ports(provider: Provider, head: Node, engine_python: str, address: str,
                             token_path: str | None = None) -> set[int] | None:
    """The node-manager ports of the nodes the GCS lists as alive (None: it did not answer).

    Asked by a driver on the head node (a Ray driver must run on a node of the cluster), with
    the engine's python and an environment cleared of what would point it elsewhere; with the
    cluster's token file when it has one (the path on the command line, never the token)."""
    auth = "".join(f"os.environ[{name!r}] = {value!r}\n" for name, value in ray_auth_env(token_path).items())
    script = ("import os\n"
              "for name in [n for n in os.environ if n.startswith(('RAY_', 'PYTHON', 'VIRTUAL_ENV'))]:\n"
              "    del os.environ[name]\n"
              "os.environ['RAY_USAGE_STATS_ENABLED'] = '0'\n"
              f"{auth}"
              "import json, ray\n"
              f"ray.init(address={address!r}, logging_level='ERROR', log_to_driver=False)\n"
              "print(json.dumps(sorted(n['NodeManagerPort'] for n in ray.nodes() if n['Alive'])))\n")
    try:  # Ray's short default timeouts: a poll that fails is simply made again a second later
        done = provider.run(head, [engine_python, "-c", script], timeout=60)
    except subprocess.TimeoutExpired:
        return None
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        return None
    try:
        return {int(port) for port in json.loads(lines[-1])}
    except (ValueError, TypeError):
        return None


def should_retry(failure: NodeStartFailure, attempt: int, attempts: int) -> bool:
    """Another attempt, unless this was the last or `ray start` failed in a way it will again."""
    if attempt >= attempts:
        return False
    if failure.exit_code == CLICK_USAGE_ERROR:  # the command line itself is wrong
        return False
    return not any(marker in line for line in failure.output_tail for marker in PERMANENT_FAILURES)


def node_log_files(plan: RayNodePlan, head_plan: RayNodePlan) -> list[Path]:
    """The node's raylet logs and the GCS's error log (on the head) of this attempt."""
    own = Path(plan.temp_dir) / "session_latest" / "logs"
    head = Path(head_plan.temp_dir) / "session_latest" / "logs"
    return [_latest_log(own, "raylet", "err"), _latest_log(own, "raylet", "out"),
            _latest_log(head, "gcs_server", "err")]


def _latest_log(logs_dir: Path, stem: str, suffix: str) -> Path:
    """logs_dir/stem.suffix, or the newest stem.N.suffix Ray wrote when that name was taken."""
    pattern = re.compile(rf"^{re.escape(stem)}(\.\d+)?\.{re.escape(suffix)}$")
    try:
        found = [path for path in logs_dir.iterdir() if pattern.match(path.name)]
    except OSError:
        found = []
    return max(found, key=_mtime) if found else logs_dir / f"{stem}.{suffix}"


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def retry_note(failure: NodeStartFailure) -> str:
    """One line for a start attempt that failed and is tried again: the run says it, so a slow
    start-up (a whole attempt's timeout) is explained where it is seen."""
    last = f": {failure.output_tail[-1].strip()}" if failure.output_tail else ""
    return (f"Ray node {failure.node} attempt {failure.attempt}: {failure.what}{last[:200]} (output: "
            f"{failure.output_path}); starting it again with fresh ports and temp dir")


def start_failure_message(failures: list[NodeStartFailure], headline: str | None = None) -> str:
    """Why a node did not start: every attempt in a line, then the last one's output and logs."""
    last = failures[-1]
    tries = "1 attempt" if len(failures) == 1 else f"{len(failures)} attempts"
    parts = [headline or f"Ray node {last.node} did not start ({tries}):"]
    parts += [f"  attempt {f.attempt}: {f.what}" + (f": {f.output_tail[-1]}" if f.output_tail else "")
              for f in failures]
    parts.append(f"last lines of `ray start` output, attempt {last.attempt} ({last.output_path}):")
    parts += [f"  | {line}" for line in last.output_tail] or ["  (no output)"]
    for path, lines in last.log_tails.items():
        parts.append(f"last lines of {path}:")
        parts += [f"  | {line}" for line in lines] or ["  (empty)"]
    if not last.log_tails:
        parts.append("(no raylet or GCS log was written: Ray stopped before starting them)")
    return "\n".join(parts)


def _flag_value(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def _with_flag_value(argv: list[str], flag: str, value: str) -> list[str]:
    at = argv.index(flag) + 1
    return [*argv[:at], value, *argv[at + 1:]]


def _check_socket_path_length(root: str) -> None:
    longest = len(f"{root}/99.9".encode()) + SOCKET_SUFFIX  # <index>.<attempt>
    if longest > SOCKET_PATH_MAX:
        raise RayClusterError(f"Ray temp dir {root} is too long: its Unix socket paths would have {longest} "
                              f"bytes, {SOCKET_PATH_MAX} at most")
