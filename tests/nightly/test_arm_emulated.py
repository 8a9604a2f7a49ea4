"""The shipped campaigns/arm-emulated.yaml through the real flow. llama.cpp cross-compiled
for Graviton3 (or found by key), served by an aarch64 `llama-server` under qemu-user with its CPU
model, gated token for token against the x86 build; plus a mode that puts the Graviton3 build on the
Neoverse N1 (Graviton2) node, refused before serving with the features it lacks. Then `servebench
build` finds every build by key (seconds, nothing rebuilt).

The shipped campaign's Graviton2 mode is left out here: its build differs from Graviton3's only in
`-march` (tests/unit/test_build_targets.py checks each target's flags and configure line).

Not in the README's test command: the cross-build of llama.cpp for Graviton3 alone takes about six
minutes of a cold run (805 s for this test at 63366d6, the x86 build beside it), past the 55-minute
budget; what it covers runs in the nightly deployment arm-emulated-nightly (prefect.yaml, Graviton2
and 3), and `SERVEBENCH_NIGHTLY=1` runs it here. CI keeps the remote aarch64 check
(tests/unit/test_arm_partition.py: vLLM's aarch64 venv, its interpreter placed on a testbed host, `_C`
loaded under qemu) and the targets' flags, refusals and SIGILL wording as unit tests."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from servebench import warehouse
from servebench.paths import CHECKOUT
from tests.support.campaign_process import run_shipped_campaign

CAMPAIGN = CHECKOUT / "campaigns" / "arm-emulated.yaml"
MISSING = [tool for tool in ("aarch64-linux-gnu-g++", "qemu-aarch64-static") if shutil.which(tool) is None]
pytestmark = [pytest.mark.llamacpp, pytest.mark.arm,
              pytest.mark.nightly(reason=(
                  "llama.cpp cross-built for Graviton3 and served under qemu (the cross-build is about six "
                  "minutes of a cold run; the campaign also runs as the deployment arm-emulated-nightly); the "
                  "test command keeps the remote aarch64 check (test_arm_partition) and the targets' flags "
                  "(test_build_targets)")),
              pytest.mark.skipif(bool(MISSING), reason=f"{', '.join(MISSING)} missing: "
                                                       "apt-get install g++-aarch64-linux-gnu qemu-user-static "
                                                       "(README command 2 installs them)")]


def with_a_misplaced_build(data: dict) -> None:
    data["modes"] = [mode for mode in data["modes"] if mode["name"] != "graviton2"]
    data["modes"].append({"name": "graviton3-on-n1", "executor": "local", "nodes": ["graviton2"],
                          "build": {"target": "graviton3"}})
    data["load"]["clients"] = [2]


def test_arm_builds_serve_under_emulation_and_a_misfit_is_refused(isolated, tmp_path):
    outcome = run_shipped_campaign(CAMPAIGN, tmp_path, isolated, with_a_misplaced_build)
    assert outcome["status"] == "partial", outcome   # the refused mode's cells failed, every other completed

    con = warehouse.connect(isolated, read_only=True)
    cells = dict(con.execute("select mode, status from cells").fetchall())
    servers = {row[0]: row[1:] for row in con.execute(
        "select mode, status, correctness, correctness_detail, error, build_key, command from servers").fetchall()}
    builds = {row[0]: row[1:] for row in con.execute(
        "select build_key, target, arch, compiler, compiler_flags, source_digest, artifact_sha256 from builds")
        .fetchall()}
    nodes = {row[0]: row[1:] for row in con.execute("select node, arch, isa_flags from nodes").fetchall()}
    con.close()

    assert cells == {"x86": "completed", "graviton3": "completed", "graviton3-on-n1": "failed"}, cells
    assert servers["x86"][1] == "reference"
    status, gate, detail, _, key, command = servers["graviton3"]
    assert status == "ready" and gate in ("passed", "close"), servers["graviton3"]
    assert key.startswith("llamacpp-graviton3-") and command[:3] == ["qemu-aarch64-static", "-cpu", "max,sve-max-vq=2"]
    target, arch, compiler, flags, source, artifact = builds[key]
    assert (target, arch) == ("graviton3", "aarch64") and compiler.startswith("aarch64-linux-gnu-g++ GNU ")
    assert flags[0].startswith("-march=armv8.") and len(source) == len(artifact) == 64
    status, _, _, error, key, command = servers["graviton3-on-n1"]
    assert status == "failed" and key == servers["graviton3"][4] and command == []      # nothing was started
    assert "refused before serving: the build for graviton3 needs CPU features sve, i8mm, bf16 that node " \
           "graviton2 (emulated graviton2, qemu -cpu neoverse-n1) lacks" in error, error
    assert nodes["graviton2"][0] == "aarch64" and "asimddp" in nodes["graviton2"][1]
    assert "sve" not in nodes["graviton2"][1] and "sve" in nodes["graviton3"][1] and nodes["x86"][0] == "x86_64"

    env = os.environ | {"PYTHONPATH": str(CHECKOUT)}
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "servebench", "build", str(tmp_path / CAMPAIGN.name)], env=env,
                          capture_output=True, text=True, timeout=300)
    seconds = time.monotonic() - started
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [line for line in done.stdout.splitlines() if line.startswith("llamacpp-")]
    assert len(lines) == 2 and all(line.endswith(", cached)") for line in lines), done.stdout
    assert seconds < 120, f"finding two cached builds took {seconds:.0f} s"  # a rebuild is minutes


def test_a_build_for_missing_features_dies_with_sigill_and_says_so(tmp_path):
    """Past the preflight (a node that lies about its CPU), the Graviton3 build on a Neoverse N1
    dies at its first SVE instruction: qemu re-raises SIGILL, which the server's error names."""
    from servebench.builds.builders import ensure
    from servebench.config.campaign import GeneratedModelSpec
    from servebench.engines import get_engine
    from servebench.engines.llamacpp.spec import LlamaCppEngineSpec
    from servebench.models.gguf_model import write_gguf
    from servebench.paths import cache_dir
    from servebench.serving.server import describe_exit

    build = ensure(get_engine("llamacpp").build_recipe(LlamaCppEngineSpec(target="graviton3")), cache_dir())
    model = write_gguf(GeneratedModelSpec(generate="tiny-llama"), tmp_path / "model.gguf")  # its own: no other test's
    done = subprocess.run(["qemu-aarch64-static", "-cpu", "neoverse-n1", "-L", "/usr/aarch64-linux-gnu",
                           str(Path(build.venv_path) / "bin" / "llama-server"), "-m", str(model), "--port", "1",
                           "--host", "127.0.0.1", "-t", "1", "-n", "1"], capture_output=True, text=True, timeout=120)
    assert done.returncode in (-4, 132), (done.returncode, done.stderr[-500:])
    assert describe_exit(done.returncode).startswith(f"{done.returncode} (SIGILL")
    assert json.dumps(build.inputs["features"]) and "sve" in build.inputs["features"]
