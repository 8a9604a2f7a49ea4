"""What a build needs from the host, checked before it starts (servebench/build/prerequisites.py),
and vLLM's source build preflight: `servebench build campaigns/vllm-source.yaml --dry-run` names
every unmet prerequisite and exits non-zero; a staged oneDNN tree turns its line to ok."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from servebench.build.prerequisites import (Prerequisite, PrerequisiteError, describe, require, source_tree, tool,
                                            version_tuple)
from servebench.engines.vllm.source_build import compiler_floor
from servebench.engines.vllm.spec import VllmSourceSpec
from servebench.paths import PROJECT_ROOT


def test_versions_tools_and_source_trees_are_checked_and_described():
    assert version_tuple("cmake version 3.25.1") == (3, 25, 1) and version_tuple("none") == ()
    python = tool("python", sys.executable, "-", [sys.executable, "--version"], "3.0")
    assert python.met and python.found.startswith(f"{sys.executable} 3.")
    too_new = tool("python", sys.executable, "-", [sys.executable, "--version"], "99.1")
    assert not too_new.met and too_new.needed.endswith(">= 99.1")
    assert tool("x", "no-such-tool-here", "apt-get install x").found == "missing"
    assert not source_tree("oneDNN", None, "CMakeLists.txt", "stage it").met


def test_every_unmet_prerequisite_is_named_at_once():
    checks = [Prerequisite(name="a", met=True, found="ok", needed="a"),
              Prerequisite(name="b", met=False, found="missing", needed="b >= 2", fix="install b"),
              Prerequisite(name="c", met=False, found="1.0", needed="c >= 2", fix="upgrade c")]
    assert describe(checks).splitlines()[1] == "  [MISSING] b: missing; needs b >= 2 -> install b"
    with pytest.raises(PrerequisiteError, match=r"2 prerequisite\(s\) not met") as caught:
        require(checks, "engine x")
    assert "install b" in str(caught.value) and "upgrade c" in str(caught.value) and "[ok" not in str(caught.value)


def test_vllm_asks_gcc_12_3_on_x86_unless_the_shipped_patch_relaxes_it():
    assert compiler_floor(VllmSourceSpec(patches=[]), "x86_64") == "12.3"
    assert compiler_floor(VllmSourceSpec(), "x86_64") == "12.2"   # the default patch set
    patch = (PROJECT_ROOT / "servebench/engines/vllm/patches/gcc-12.2-x86.patch").read_text()
    assert "+            CMAKE_CXX_COMPILER_VERSION VERSION_GREATER_EQUAL 12.2))" in patch


def dry_run(campaign: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "servebench", "build", str(campaign), "--dry-run"],
                          env=os.environ | {"PYTHONPATH": str(PROJECT_ROOT)}, capture_output=True, text=True,
                          timeout=600)


def campaign_copy(tmp_path: Path, onednn: Path, extra_patch: str | None = None) -> Path:
    """campaigns/vllm-source.yaml with oneDNN staged at `onednn` (and one more patch): whatever this host has."""
    text = (PROJECT_ROOT / "campaigns" / "vllm-source.yaml").read_text().replace("/opt/src/oneDNN-3.13", str(onednn))
    if extra_patch:
        text = text.replace("patches: [gcc-12.2-x86, gcc-12.2-flash-mla, cpu-slot-mapping]",
                            f"patches: [gcc-12.2-x86, gcc-12.2-flash-mla, cpu-slot-mapping, {extra_patch}]")
    path = tmp_path / f"vllm-source-{onednn.name}.yaml"
    path.write_text(text)
    return path


def test_the_vllm_source_dry_run_lists_what_is_missing_and_exits_non_zero(tmp_path):
    done = dry_run(campaign_copy(tmp_path, tmp_path / "not-staged"))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "cannot be built here" in done.stdout
    assert f"[MISSING] oneDNN source: {tmp_path / 'not-staged'} has no CMakeLists.txt" in done.stdout
    assert done.stdout.count("[ok     ]") + done.stdout.count("[MISSING]") == 13   # every check, met or not

    staged = tmp_path / "oneDNN"
    staged.mkdir()
    (staged / "CMakeLists.txt").write_text("project(oneDNN)\n")
    done = dry_run(campaign_copy(tmp_path, staged, extra_patch=str(tmp_path / "absent.patch")))
    assert done.returncode == 1 and f"[ok     ] oneDNN source: {staged}" in done.stdout, done.stdout
    assert f"[MISSING] patch {tmp_path / 'absent.patch'}: no {tmp_path / 'absent.patch'}" in done.stdout
