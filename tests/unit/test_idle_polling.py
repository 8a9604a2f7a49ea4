"""The generator's CPUs poll when idle while it measures, and the machine's setting always comes back.

The kernel's per-CPU files are stood in for by a directory of the same shape (`online`, and
`cpuN/power/pm_qos_resume_latency_us`), so these run without root; the guard process, its pipe
and its restore on the generator's death are the real ones.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from servebench.load.pinning import polling_when_idle
from tests.support.fake_openai_server import FakeServer
from tests.support.waiting import wait_until


def cpu_tree(root: Path, cpus: int, value: str = "0") -> Path:
    (root / "online").write_text(f"0-{cpus - 1}\n")
    for cpu in range(cpus):
        power = root / f"cpu{cpu}" / "power"
        power.mkdir(parents=True)
        (power / "pm_qos_resume_latency_us").write_text(value + "\n")
    return root


def qos(root: Path, cpu: int) -> str:
    return (root / f"cpu{cpu}" / "power" / "pm_qos_resume_latency_us").read_text().strip()


@pytest.fixture
def one_cpu_of_four(tmp_path: Path):
    """This process pinned to its first allowed CPU, the stand-in machine having four."""
    before = os.sched_getaffinity(0)
    mine = min(before)
    os.sched_setaffinity(0, {mine})
    yield cpu_tree(tmp_path, max(4, mine + 2)), mine
    os.sched_setaffinity(0, before)


def test_a_pinned_generators_cpus_poll_while_held_and_are_restored_after(one_cpu_of_four):
    root, mine = one_cpu_of_four
    (root / f"cpu{mine}" / "power" / "pm_qos_resume_latency_us").write_text("50\n")
    with polling_when_idle("auto", cpu_root=root) as idle:
        assert idle.cpus == str(mine) and idle.why_not is None
        assert qos(root, mine) == "n/a"
        assert qos(root, mine + 1) == "0"  # not the generator's: untouched
    assert qos(root, mine) == "50"


def test_an_unpinned_generator_or_off_leaves_every_cpu_as_it_was(tmp_path: Path):
    mine = sorted(os.sched_getaffinity(0))
    root = cpu_tree(tmp_path, max(mine) + 1)
    (root / "online").write_text(",".join(map(str, mine)) + "\n")  # the generator may run on all of them
    with polling_when_idle("auto", cpu_root=root) as idle:
        assert idle.cpus == "" and "not pinned" in idle.why_not
    with polling_when_idle("off", cpu_root=root) as idle:
        assert idle.cpus == "" and idle.why_not.startswith("off")
    assert {qos(root, cpu) for cpu in mine} == {"0"}


def test_a_file_the_kernel_refuses_says_why_and_holds_nothing(one_cpu_of_four):
    root, mine = one_cpu_of_four
    (root / f"cpu{mine}" / "power" / "pm_qos_resume_latency_us").unlink()
    with polling_when_idle("auto", cpu_root=root) as idle:
        assert idle.cpus == ""
        assert "cannot hold" in idle.why_not and "No such file" in idle.why_not


def test_a_killed_generator_still_gets_the_machines_setting_back(tmp_path: Path):
    """SIGKILL to the generator's whole process group runs no finally: the guard, in a session of its
    own, restores on its pipe's end of file."""
    root = cpu_tree(tmp_path, max(4, max(os.sched_getaffinity(0)) + 2))
    mine = min(os.sched_getaffinity(0))
    child = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import os, sys, time
        from pathlib import Path
        os.sched_setaffinity(0, {{{mine}}})
        from servebench.load.pinning import polling_when_idle
        with polling_when_idle("auto", cpu_root=Path({str(root)!r})) as idle:
            print(idle.cpus, flush=True)
            time.sleep(60)
        """)], stdout=subprocess.PIPE, text=True, cwd=Path(__file__).parents[2], start_new_session=True)
    try:
        assert child.stdout.readline().strip() == str(mine)
        assert qos(root, mine) == "n/a"
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
        wait_until(lambda: qos(root, mine) == "0", "the guard restoring the setting", timeout_s=10)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        child.stdout.close()


KERNEL = Path("/sys/devices/system/cpu")


def _kernel_refusal() -> str | None:
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return "one CPU: the generator cannot be pinned apart"
    path = KERNEL / f"cpu{cpus[-1]}" / "power" / "pm_qos_resume_latency_us"
    if not path.exists() or not os.access(path, os.W_OK):
        return f"{path} is not writable here (not root, or no per-CPU PM QoS)"
    return None


def test_servebench_load_pinned_holds_its_real_cpu_polling_and_gives_it_back(tmp_path: Path):
    """The kernel's own file, during and after a `servebench load --cpus N` run."""
    why = _kernel_refusal()
    if why:
        pytest.skip(why)
    cpu = sorted(os.sched_getaffinity(0))[-1]
    path = KERNEL / f"cpu{cpu}" / "power" / "pm_qos_resume_latency_us"
    before = path.read_text().strip()
    out = tmp_path / "load.json"
    with FakeServer(token_delay_s=0.05) as server:
        load = subprocess.Popen([sys.executable, "-m", "servebench", "load", "--base-url", server.url,
                                 "--model", "m", "--clients", "1", "--requests", "2", "--input-len", "4",
                                 "--output-len", "20", "--token-counter", "", "--cpus", str(cpu), "--quiet",
                                 "--output-json", str(out)], cwd=Path(__file__).parents[2])
        try:
            wait_until(lambda: path.read_text().strip() == "n/a", "the generator's CPU polling", timeout_s=30)
        finally:
            assert load.wait(timeout=60) == 0
    assert path.read_text().strip() == before
    client = json.loads(out.read_text())["summary"]["client"]
    assert client["cpus"] == str(cpu) and client["idle_poll_cpus"] == str(cpu) and client["idle_poll_off"] is None
