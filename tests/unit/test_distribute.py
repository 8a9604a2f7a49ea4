"""Engine build, model and node tools on every node: digests, copies, refusals, time base.

The copy and digest code is the one the ssh and slurm providers run; here its "node" is this
host reached through a plain local pipe (the providers' own pipes are tested on the testbed
in tests/e2e/test_e2e_testbed.py)."""

import json
import os
import sys

import pytest

from servebench.distribution.distribute import (
    NodeRefused,
    arch_problem,
    check_python_runs,
    local_digest,
    node_tools_tree,
    place_tree,
    project_dir,
)
from servebench.providers import Node, node_tools
from servebench.providers.local import LocalProvider
from servebench.providers.local.spec import LocalProviderSpec
from servebench.providers.remote import clock_offset, get_tree, put_tree, under_any
from servebench.telemetry.timebase import to_orchestrator_time

NODE = Node(name="n1", address="127.0.0.1", cpus=[0])


def here(argv: list[str]) -> list[str]:
    """The pipe to a 'node' that is this host."""
    return argv


def make_tree(root, files: dict[str, str]):
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_the_digest_sees_content_names_links_and_the_execute_bit_but_not_bytecode(tmp_path):
    tree = make_tree(tmp_path / "t", {"bin/python": "x", "lib/a.py": "a = 1\n"})
    os.symlink("python", tree / "bin" / "python3")
    first = node_tools.tree_digest(str(tree))
    (tree / "lib" / "__pycache__").mkdir()
    (tree / "lib" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\0")
    assert node_tools.tree_digest(str(tree)) == first
    os.chmod(tree / "bin" / "python", 0o755)
    assert node_tools.tree_digest(str(tree)) != first
    second = node_tools.tree_digest(str(tree))
    (tree / "lib" / "a.py").write_text("a = 2\n")
    assert node_tools.tree_digest(str(tree)) != second
    assert node_tools.tree_digest(str(tmp_path / "missing")) is None


def test_a_tree_goes_over_the_pipe_and_back_whole_and_replaces_the_old_one(tmp_path):
    source = make_tree(tmp_path / "src", {"a.txt": "A", "deep/b.txt": "B"})
    os.symlink("a.txt", source / "link")
    target = tmp_path / "node" / "copy"
    make_tree(target, {"stale.txt": "old"})
    put_tree(here, source, str(target), tag="t1")
    assert node_tools.tree_digest(str(target)) == node_tools.tree_digest(str(source))
    assert not (target / "stale.txt").exists() and os.readlink(target / "link") == "a.txt"
    assert [p.name for p in target.parent.iterdir()] == ["copy"]  # no scratch directory left
    back = tmp_path / "back"
    assert get_tree(here, str(target), back)
    assert (back / "deep" / "b.txt").read_text() == "B"
    assert not get_tree(here, str(tmp_path / "nothing"), tmp_path / "empty")


def test_a_failed_copy_names_the_target_and_leaves_the_old_tree(tmp_path):
    source = make_tree(tmp_path / "src", {"a.txt": "A"})
    target = make_tree(tmp_path / "node" / "copy", {"kept.txt": "k"})
    broken = lambda argv: [sys.executable, "-c", "import sys; sys.stdin.read(); sys.exit(3)"]  # noqa: E731
    with pytest.raises(RuntimeError, match=f"copying {source} to {target}.*exit 3"):
        put_tree(broken, source, str(target), tag="t2")
    assert (target / "kept.txt").read_text() == "k"


class CopyingProvider(LocalProvider):
    """A local provider that shares nothing: every tree is copied into `root` + its path."""

    def __init__(self, root):
        super().__init__(LocalProviderSpec(nodes=[{"name": "n1", "cpus": [0]}]))
        self.root, self.copies = root, 0

    def shares(self, path):
        return False

    def _there(self, path):
        return str(self.root) + path

    def tree_digest(self, node, path):
        return node_tools.tree_digest(self._there(path))

    def put_tree(self, node, local, remote):
        self.copies += 1
        put_tree(here, local, self._there(remote), tag="t")


def test_a_tree_is_copied_once_then_found_by_its_digest(tmp_path):
    tree = make_tree(tmp_path / "cache" / "engines" / "k1", {"bin/python": "x"})
    provider = CopyingProvider(tmp_path / "node")
    first = place_tree(provider, NODE, "engine", tree)
    again = place_tree(provider, NODE, "engine", tree)
    assert (first.how, again.how, provider.copies) == ("copied", "present", 1)
    assert first.digest == again.digest == local_digest(tree)
    (tmp_path / "node" / str(tree).lstrip("/") / "bin" / "python").write_text("tampered")
    assert place_tree(provider, NODE, "engine", tree).how == "copied" and provider.copies == 2


def test_a_shared_path_is_used_in_place():
    provider = LocalProvider(LocalProviderSpec(nodes=[{"name": "n1", "cpus": [0]}]))
    placement = place_tree(provider, NODE, "model", project_dir())
    assert placement.how == "shared" and placement.digest is None
    assert under_any("/nfs/home/u/.cache/x", ["/nfs/home"]) and not under_any("/nfs/homework", ["/nfs/home"])


def test_a_node_of_another_architecture_or_whose_python_does_not_run_is_refused_by_name():
    assert arch_problem(NODE, {"arch": "aarch64"}, "linux-x86_64") == \
        "node n1 (127.0.0.1) is aarch64, the engine build is for x86_64"
    assert arch_problem(NODE, {"arch": "x86_64"}, "linux-x86_64") is None
    provider = LocalProvider(LocalProviderSpec(nodes=[{"name": "n1", "cpus": [0]}]))
    check_python_runs(provider, NODE, sys.executable, f"linux-{os.uname().machine}")
    with pytest.raises(NodeRefused, match="node n1: the engine build's python /nonexistent/python does not run"):
        check_python_runs(provider, NODE, "/nonexistent/python", "linux-x86_64")


def test_the_node_tools_tree_runs_the_sampler_with_the_standard_library_alone(tmp_path):
    tools = node_tools_tree(tmp_path, project_dir())
    assert node_tools_tree(tmp_path, project_dir()) == tools
    out = tmp_path / "s.jsonl"
    import subprocess
    watched = subprocess.Popen(["sleep", "1"])  # the sampler stops by itself when it is gone
    # -I -S: no site-packages (no psutil), no cwd: the standard library and the tree, as on a node's python3
    done = subprocess.run([sys.executable, "-I", "-S", "-c",
                           "import sys; sys.path.insert(0, sys.argv[1]); sys.argv = sys.argv[1:]; "
                           "import runpy; runpy.run_module('servebench.telemetry.node_sampler', run_name='__main__')",
                           str(tools), "--node", "n1", "--cpus", "0", "--pids", str(watched.pid), "--hz", "20",
                           "--out", str(out)], capture_output=True, text=True, timeout=60)
    watched.wait()
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) >= 3 and all(row["engine_processes"] == 1 and row["engine_rss_bytes"] > 0 for row in rows[:-1])
    assert (set(rows[-1]["cpu_pct_per_core"]) == {"0"} and rows[-1]["mem_available_bytes"] > 0
            and "lo" in rows[-1]["net"])
    assert sorted(p.relative_to(tools).as_posix() for p in tools.rglob("*.py")) == [
        "servebench/__init__.py", "servebench/telemetry/__init__.py", "servebench/telemetry/node_sampler.py",
        "servebench/telemetry/periodic.py"]


def test_samples_of_another_host_move_onto_our_clocks():
    lines = [json.dumps({"node": "h2", "t_mono": 5.0, "t_wall": 1000.5}), "Traceback: noise", "[1, 2]"]
    rows = to_orchestrator_time(lines, offset_s=0.5, mono_minus_wall=-900.0)
    assert rows == [{"node": "h2", "t_mono": 100.0, "t_wall": 1000.0, "t_wall_node": 1000.5}]


def test_the_clock_offset_takes_the_round_with_the_shortest_trip():
    import time

    def node_clock(rounds=iter([(0.3, 100.0), (0.0, 5.0), (0.3, 100.0)])):
        slow, ahead = next(rounds)
        time.sleep(slow)  # a slow round trip: its reading is the least trustworthy
        return time.time() + ahead
    assert abs(clock_offset(node_clock, rounds=3) - 5.0) < 0.05


def test_a_load_result_of_a_client_node_moves_onto_our_clocks():
    from servebench.telemetry.timebase import load_result_in_orchestrator_time

    result = {"t0": {"monotonic": 7.0, "wall": "2026-01-01T00:00:10+00:00"}, "requests": [{"sent_s": 0.1}]}
    moved = load_result_in_orchestrator_time(result, offset_s=2.0, mono_minus_wall=-1767225000.0)
    assert moved["t0"]["wall"] == "2026-01-01T00:00:08+00:00"               # the node's clock was 2 s ahead
    assert moved["t0"]["monotonic"] == 1767225608.0 - 1767225000.0          # then onto our monotonic clock
    assert moved["t0"]["monotonic_node"] == 7.0 and moved["requests"] == result["requests"]


def test_the_load_generator_tree_runs_without_servebench_or_its_environment(tmp_path):
    """Its own packages (copied from this environment, pydantic's compiled core included) and the
    generator's source: `-S` leaves every site-packages out, so nothing else could be found."""
    from servebench.distribution.load_tree import IMPORT_CHECK, load_generator_tree, requirement_closure

    assert {"pydantic", "pydantic-core", "annotated-types", "orjson", "uvloop"} <= set(
        requirement_closure(("pydantic", "orjson", "uvloop")))
    tree = load_generator_tree(tmp_path, project_dir())
    assert load_generator_tree(tmp_path, project_dir()) == tree
    import subprocess
    done = subprocess.run([sys.executable, "-S", "-c", IMPORT_CHECK + "; import pydantic_core, sys; "
                           "print(pydantic_core.__file__)"], capture_output=True, text=True, timeout=60,
                          env={"PYTHONPATH": str(tree), "PATH": os.environ["PATH"]}, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith(str(tree))
    assert not (tree / "servebench" / "warehouse").exists() and not (tree / "prefect").exists()


def test_a_load_run_is_stopped_past_its_deadline_which_covers_its_slowest_honest_course():
    from servebench.load.config import HANG_MARGIN_S, LoadConfig, deadline_s

    base = dict(base_url="http://127.0.0.1:1", model="m", timeout_s=10.0)
    assert deadline_s(LoadConfig(**base, rate=2.0, requests=20)) == 10 + 10 + HANG_MARGIN_S
    # closed loop: each client's share of the requests may each take the full timeout
    assert deadline_s(LoadConfig(**base, clients=4, requests=10)) == 3 * 10 + 10 + HANG_MARGIN_S
    assert deadline_s(LoadConfig(**base, clients=4, duration=30.0)) == 30 + 10 + HANG_MARGIN_S
