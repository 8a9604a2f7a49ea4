"""Ray cluster start-up without Ray: the plans, the retry decision, the error a node that
will not start raises, and the retry loop driven by stand-in `ray start` processes."""

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from servebench.engines.vllm import ray_cluster
from servebench.engines.vllm.ray_cluster import (
    RAY_STARTUP_ENV,
    NodeStartFailure,
    RayClusterError,
    node_log_files,
    plan_cluster,
    ray_startup_env,
    replan_node,
    should_retry,
    start_cluster,
    start_failure_message,
)
from servebench.logs import tail
from servebench.processes import ManagedProcess
from servebench.providers import Node
from servebench.providers.this_host import ThisHostProcesses
from tests.support.ports import ThisHostPorts

NODES = [Node(name="node0", address="127.0.0.1", cpus=[0]), Node(name="node1", address="127.0.0.1", cpus=[1])]
PORTS = ThisHostPorts()  # the kernel's picks on this host, as the local provider's
TIMED_OUT = ("Exception: The current node timed out during startup. This could happen because some of the "
             "raylet failed to startup or the GCS has become overloaded.")


@pytest.fixture
def temp_root():
    root = tempfile.mkdtemp(prefix="sbt-", dir="/tmp")  # short, like plan_cluster's own
    yield root
    shutil.rmtree(root, ignore_errors=True)


def flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_startup_env_is_rays_own_names_and_what_is_already_set_wins():
    assert all(name.startswith("RAY_") and value.isdigit() for name, value in RAY_STARTUP_ENV.items())
    assert "RAY_raylet_start_wait_time_s" in RAY_STARTUP_ENV  # the timeout behind "timed out during startup"
    env = ray_startup_env({"RAY_raylet_start_wait_time_s": "600", "PATH": "/bin"})
    assert "RAY_raylet_start_wait_time_s" not in env
    assert env["RAY_agent_register_timeout_ms"] == RAY_STARTUP_ENV["RAY_agent_register_timeout_ms"]


def test_every_node_gets_its_own_temp_dir_and_the_startup_timeouts(temp_root, monkeypatch):
    monkeypatch.delenv("RAY_raylet_start_wait_time_s", raising=False)
    monkeypatch.setenv("RAY_health_check_timeout_ms", "5000")  # set by the user: left alone
    head, worker = plan_cluster(NODES, "/venv/bin/ray", 2, {"RAY_agent_register_timeout_ms": "1000"},
                                temp_root=temp_root, ports=PORTS)
    assert head.head and not worker.head
    assert flag(head.argv, "--temp-dir") == f"{temp_root}/0.1" and flag(worker.argv, "--temp-dir") == f"{temp_root}/1.1"
    assert head.gcs_address == worker.gcs_address == f"127.0.0.1:{flag(head.argv, '--port')}"
    assert flag(worker.argv, "--address") == head.gcs_address
    assert head.node_manager_port != worker.node_manager_port
    for plan in (head, worker):
        assert plan.env["RAY_raylet_start_wait_time_s"] == RAY_STARTUP_ENV["RAY_raylet_start_wait_time_s"]
        assert plan.env["RAY_agent_register_timeout_ms"] == "1000"  # the campaign's engine.env wins
        assert "RAY_health_check_timeout_ms" not in plan.env
        assert plan.attempt == 1


def test_a_long_temp_dir_is_refused_before_ray_fails_on_its_socket_paths():
    with pytest.raises(RayClusterError, match="too long"):
        plan_cluster(NODES, "ray", 1, {}, temp_root="/tmp/" + "x" * 60, ports=PORTS)


def test_a_retried_worker_gets_fresh_ports_and_temp_dir_and_keeps_the_head(temp_root):
    plans = plan_cluster(NODES, "ray", 1, {}, temp_root=temp_root, ports=PORTS)
    again = replan_node(plans, 1, PORTS)
    assert again[0] is plans[0]
    assert again[1].attempt == 2 and flag(again[1].argv, "--temp-dir") == f"{temp_root}/1.2"
    assert again[1].node_manager_port != plans[1].node_manager_port
    assert flag(again[1].argv, "--address") == plans[0].gcs_address
    assert again[1].env == plans[1].env


class CrowdedPorts:
    """A node whose kernel keeps handing out ports inside the worker range it gave before, and the
    same port twice: what made a head's `ray start` fail once ('worker_ports is trying to use a port
    number ... that is used by other components')."""

    def __init__(self) -> None:
        self.picks = iter([20001, 30000, 30000, 30005, 20000] + list(range(40000, 40100)))

    def free_port(self, node: Node) -> int:
        return next(self.picks)

    def free_port_range(self, node: Node, size: int) -> int:
        return 30000


def test_no_port_of_a_node_falls_in_its_worker_range_or_is_picked_twice(temp_root):
    (head,) = plan_cluster(NODES[:1], "ray", 1, {}, temp_root=temp_root, ports=CrowdedPorts())
    low, high = int(flag(head.argv, "--min-worker-port")), int(flag(head.argv, "--max-worker-port"))
    singles = [int(flag(head.argv, name)) for name in (
        "--port", "--node-manager-port", "--object-manager-port", "--dashboard-agent-listen-port",
        "--dashboard-agent-grpc-port", "--runtime-env-agent-port", "--metrics-export-port",
        "--ray-client-server-port")]
    assert not [port for port in singles if low <= port <= high], (singles, low, high)
    assert len(set(singles)) == len(singles), singles


def test_a_retried_head_moves_every_node_to_its_new_gcs(temp_root):
    plans = plan_cluster(NODES, "ray", 1, {}, temp_root=temp_root, ports=PORTS)
    again = replan_node(plans, 0, PORTS)
    new_address = f"127.0.0.1:{flag(again[0].argv, '--port')}"
    assert new_address != plans[0].gcs_address
    assert again[0].attempt == 2 and again[1].attempt == 1
    assert again[0].gcs_address == again[1].gcs_address == flag(again[1].argv, "--address") == new_address
    assert flag(again[1].argv, "--temp-dir") == flag(plans[1].argv, "--temp-dir")


def failure(attempt=1, exit_code=1, output=(TIMED_OUT,), logs=None) -> NodeStartFailure:
    return NodeStartFailure(node="node1", attempt=attempt, exit_code=exit_code, waited_s=61.4,
                            output_path="/runs/r/ray/ray-node1.log", output_tail=list(output), log_tails=logs or {})


def test_retry_a_timeout_or_a_crash_but_not_the_last_attempt_nor_a_broken_install():
    assert should_retry(failure(exit_code=1), attempt=1, attempts=3)
    assert should_retry(failure(exit_code=None, output=()), attempt=2, attempts=3)  # not alive in time
    assert not should_retry(failure(exit_code=1), attempt=3, attempts=3)
    assert not should_retry(failure(exit_code=2, output=("Error: No such option: --bogus",)), 1, 3)
    assert not should_retry(failure(output=("ModuleNotFoundError: No module named 'ray'",)), 1, 3)


def test_the_error_names_node_attempts_exit_codes_and_the_ends_of_output_and_logs():
    logs = {"/tmp/sb-ray-x/1.3/session_latest/logs/raylet.err": ["[C] raylet.cc:1 agent timed out"],
            "/tmp/sb-ray-x/0.1/session_latest/logs/gcs_server.err": []}
    message = start_failure_message([failure(1, 1), failure(2, None, ()),
                                     failure(3, 1, ("starting...", TIMED_OUT), logs)])
    lines = message.splitlines()
    assert lines[0] == "Ray node node1 did not start (3 attempts):"
    assert lines[1] == f"  attempt 1: `ray start` exited with code 1 after 61 s: {TIMED_OUT}"
    assert lines[2] == "  attempt 2: not alive in the GCS after 61 s"
    assert lines[3].startswith("  attempt 3: `ray start` exited with code 1")
    assert "last lines of `ray start` output, attempt 3 (/runs/r/ray/ray-node1.log):" in lines
    assert "  | starting..." in lines
    assert "last lines of /tmp/sb-ray-x/1.3/session_latest/logs/raylet.err:" in lines
    assert "  | [C] raylet.cc:1 agent timed out" in lines
    assert lines[-1] == "  (empty)"
    assert "no raylet or GCS log" in start_failure_message([failure()])


def write_session(temp_dir: Path, files: dict[str, str]) -> Path:
    session = temp_dir / "session_2026-11-23_10-00-00_000000_42"
    (session / "logs").mkdir(parents=True)
    (temp_dir / "session_latest").symlink_to(session)
    for name, text in files.items():
        (session / "logs" / name).write_text(text)
    return session / "logs"


def test_the_log_files_are_the_attempts_raylet_logs_and_the_heads_gcs_log(tmp_path):
    head = plan_stub(tmp_path / "0.1", head=True)
    worker = plan_stub(tmp_path / "1.2")
    head_logs = write_session(tmp_path / "0.1", {"gcs_server.err": "gcs\n", "raylet.err": "head raylet\n"})
    logs = write_session(tmp_path / "1.2", {"raylet.err": "old\n", "raylet.out": "out\n"})
    newer = logs / "raylet.1.err"
    newer.write_text("newer\n")
    os.utime(logs / "raylet.err", (time.time() - 60, time.time() - 60))
    names = [(p.parent.parent.parent.name, p.name) for p in node_log_files(worker, head)]
    assert names == [("1.2", "raylet.1.err"), ("1.2", "raylet.out"), ("0.1", "gcs_server.err")]
    assert node_log_files(head, head)[2] == (tmp_path / "0.1" / "session_latest" / "logs" / "gcs_server.err")
    assert head_logs.exists()


def plan_stub(temp_dir: Path, head: bool = False):
    return ray_cluster.RayNodePlan(node=NODES[0 if head else 1], head=head, argv=[], env={},
                                   gcs_address="127.0.0.1:1", temp_dir=str(temp_dir))


def test_tail_lines_keeps_the_last_non_blank_lines_cut_to_width(tmp_path):
    # what a node's start failure shows of `ray start`'s output and each Ray log (servebench.logs.tail)
    path = tmp_path / "x.log"
    path.write_text("".join(f"line {i}\n\n" for i in range(40)) + "x" * 500 + "\n")
    last = tail(path, lines=3, width=100)
    assert last[:2] == ["line 38", "line 39"] and last[2] == "x" * 100 + " ..."
    assert tail(tmp_path / "missing.log")[0].startswith("(could not read:")


# The retry loop, with stand-ins for `ray start`: the provider runs a small script instead
# of Ray, and a node counts as alive in the GCS once its stand-in says it started.

ALIVE = "import time; print('Ray runtime started.', flush=True); time.sleep(120)"
TIMES_OUT = ("import subprocess, sys, time\n"
             "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'], "
             "start_new_session=True)\n"
             "print('raylet', child.pid, flush=True)\n"
             "time.sleep(1.5)\n"
             f"print({TIMED_OUT!r}, flush=True)\n"
             "sys.exit(1)\n")
BROKEN = "import sys; print(\"ModuleNotFoundError: No module named 'ray'\", flush=True); sys.exit(1)"


class StandInProvider(ThisHostProcesses):
    """Runs scripts[node name][attempt - 1] for each `ray start`; stops by PID like the real one;
    ports, files and /dev/shm are this host's."""

    def __init__(self, scripts: dict[str, list[str]]):
        super().__init__()
        self.scripts = scripts
        self.started: list[tuple[str, int, ManagedProcess]] = []   # node, node-manager port, process

    def start(self, node, argv, env, log_path, unset=()):
        attempt = sum(1 for name, _, _ in self.started if name == node.name)
        script = self.scripts[node.name][min(attempt, len(self.scripts[node.name]) - 1)]
        process = ManagedProcess.start([sys.executable, "-c", script], log_path=log_path)
        self.started.append((node.name, int(flag(argv, "--node-manager-port")), process))
        return process

    def stop(self, process, grace_s=2.0):
        return process.stop(grace_s=2)

    # the allocation is not what these tests are about: the nodes are given (NODES)
    @classmethod
    def host_cpus(cls):
        return set(range(os.cpu_count() or 1))

    @classmethod
    def spec_problems(cls, spec, host_cpus):
        return []

    def nodes(self):
        return NODES

    def allocate(self):
        return NODES

    def inventory(self, node):
        return {}

    def release(self):
        pass

    def alive_ports(self, provider, head, engine_python, address):
        """As the GCS would list them: running, and said so."""
        return {port for _, port, process in self.started
                if process.alive() and "Ray runtime started." in process.log_path.read_text()}


@pytest.fixture
def stand_in(monkeypatch):
    def make(scripts):
        provider = StandInProvider(scripts)
        monkeypatch.setattr(ray_cluster, "alive_node_manager_ports", provider.alive_ports)
        monkeypatch.setattr(ray_cluster, "POLL_S", 0.2)
        return provider
    return make


def test_a_node_whose_ray_start_fails_is_stopped_by_pid_and_started_again(stand_in, temp_root, tmp_path):
    provider = stand_in({"node0": [ALIVE], "node1": [TIMES_OUT, ALIVE]})
    plans = plan_cluster(NODES, "ray", 1, {}, temp_root=temp_root, ports=PORTS)
    cluster = start_cluster(provider, plans, sys.executable, tmp_path / "ray", timeout_s=60)
    try:
        assert [p.attempt for p in cluster.plans] == [1, 2]
        assert flag(cluster.plans[1].argv, "--temp-dir") == f"{temp_root}/1.2"
        assert [p.node_manager_port for p in cluster.plans] == [provider.started[0][1], provider.started[2][1]]
        assert cluster.processes == [provider.started[0][2], provider.started[2][2]]
        first = provider.started[1][2]
        assert first.exit_code() == 1
        raylet = int((tmp_path / "ray" / "ray-node1.log").read_text().split()[1])
        assert not psutil.pid_exists(raylet) or psutil.Process(raylet).status() == psutil.STATUS_ZOMBIE
        assert "Ray runtime started." in (tmp_path / "ray" / "ray-node1.2.log").read_text()
        # the run says why it started node1 twice (a whole attempt's timeout otherwise unexplained)
        [note] = cluster.notes
        assert note.startswith("Ray node node1 attempt 1: `ray start` exited with code 1 after ") and \
            TIMED_OUT[:40] in note and "ray-node1.log" in note, note
        logs = Path(temp_root) / "1.2" / "session_latest" / "logs"
        logs.mkdir(parents=True)
        (logs / "raylet.out").write_text("raylet started\n")
    finally:
        ray_cluster.stop_cluster(provider, cluster)
    assert all(not process.alive() for _, _, process in provider.started)
    # the logs stay in the run directory, the temp root under /tmp goes
    assert (tmp_path / "ray" / "ray-logs" / "1.2" / "raylet.out").read_text() == "raylet started\n"
    assert not Path(temp_root).exists()


def test_a_node_that_keeps_failing_says_why_and_nothing_is_left_running(stand_in, temp_root, tmp_path):
    fails = "import sys; print('starting'); print('RuntimeError: the GCS did not answer', flush=True); sys.exit(1)"
    provider = stand_in({"node0": [ALIVE], "node1": [fails]})
    plans = plan_cluster(NODES, "ray", 1, {}, temp_root=temp_root, ports=PORTS)
    with pytest.raises(RayClusterError) as raised:
        start_cluster(provider, plans, sys.executable, tmp_path / "ray", timeout_s=60, attempts=3)
    message = str(raised.value)
    assert message.splitlines()[0] == "Ray node node1 did not start (3 attempts):"
    assert message.count("`ray start` exited with code 1") == 3
    assert f"last lines of `ray start` output, attempt 3 ({tmp_path / 'ray' / 'ray-node1.3.log'}):" in message
    assert "  | RuntimeError: the GCS did not answer" in message
    assert [name for name, _, _ in provider.started] == ["node0", "node1", "node1", "node1"]
    assert all(not process.alive() for _, _, process in provider.started)  # the head too


def test_a_broken_install_is_not_retried(stand_in, temp_root, tmp_path):
    provider = stand_in({"node0": [BROKEN]})
    plans = plan_cluster(NODES[:1], "ray", 1, {}, temp_root=temp_root, ports=PORTS)
    with pytest.raises(RayClusterError, match=r"(?s)did not start \(1 attempt\).*ModuleNotFoundError"):
        start_cluster(provider, plans, sys.executable, tmp_path / "ray", timeout_s=60)
    assert len(provider.started) == 1


SAYS_STARTED_LATE = "import time; time.sleep(1.0); print('Ray runtime started.', flush=True); time.sleep(120)"


def test_the_workers_start_after_the_head_in_waves_that_double_up_to_hosts_at_once(stand_in, temp_root, tmp_path,
                                                                                  monkeypatch):
    nodes = [Node(name=f"node{i}", address="127.0.0.1", cpus=[0]) for i in range(6)]
    provider = stand_in({node.name: [SAYS_STARTED_LATE] for node in nodes})
    starts: dict[str, float] = {}
    real_start = provider.start

    def timed_start(node, argv, env, log_path, unset=()):
        starts[node.name] = time.monotonic()
        return real_start(node, argv, env, log_path, unset)

    monkeypatch.setattr(provider, "start", timed_start)
    monkeypatch.setattr(ray_cluster, "hosts_at_once", lambda provider: 2)
    plans = plan_cluster(nodes, "ray", 1, {}, temp_root=temp_root, ports=PORTS)
    cluster = start_cluster(provider, plans, sys.executable, tmp_path / "ray", timeout_s=60)
    try:  # waves: the head, node1, then node2 + node3 and node4 + node5 (two: hosts_at_once)
        assert starts["node1"] - starts["node0"] >= 1.0           # the head is alive before any worker starts
        assert starts["node2"] - starts["node1"] >= 1.0           # a wave of one first
        assert abs(starts["node3"] - starts["node2"]) < 0.8       # a wave's workers side by side
        assert abs(starts["node5"] - starts["node4"]) < 0.8
        assert starts["node4"] - max(starts["node2"], starts["node3"]) >= 1.0   # the next wave after it
        assert [process.alive() for process in cluster.processes] == [True] * 6
        node_of = {id(process): name for name, _, process in provider.started}
        assert [node_of[id(process)] for process in cluster.processes] == [node.name for node in nodes]
    finally:
        ray_cluster.stop_cluster(provider, cluster)
    assert all(not process.alive() for _, _, process in provider.started)


def test_a_wave_doubles_after_one_that_came_up_and_halves_after_one_that_failed():
    sizes, size = [], 1
    for failed in (False, False, False, False, False, True, True, False):
        sizes.append(size := ray_cluster.next_wave_size(size, 16, failed))
    assert sizes == [2, 4, 8, 16, 16, 8, 4, 8]
    assert ray_cluster.next_wave_size(1, 16, True) == 1
    assert ray_cluster.next_wave_size(3, 1, False) == 1


def test_a_worker_that_fails_in_a_wave_is_retried_alone_and_its_neighbour_kept(stand_in, temp_root, tmp_path):
    nodes = [Node(name=f"node{i}", address="127.0.0.1", cpus=[0]) for i in range(3)]
    provider = stand_in({"node0": [ALIVE], "node1": [TIMES_OUT, ALIVE], "node2": [ALIVE]})
    plans = plan_cluster(nodes, "ray", 1, {}, temp_root=temp_root, ports=PORTS)
    cluster = start_cluster(provider, plans, sys.executable, tmp_path / "ray", timeout_s=60)
    try:
        assert [name for name, _, _ in provider.started].count("node2") == 1
        assert [name for name, _, _ in provider.started].count("node1") == 2
        assert [plan.attempt for plan in cluster.plans] == [1, 2, 1]
        assert all(process.alive() for process in cluster.processes)
        [note] = cluster.notes
        assert note.startswith("Ray node node1 attempt 1:")
    finally:
        ray_cluster.stop_cluster(provider, cluster)
    assert all(not process.alive() for _, _, process in provider.started)
