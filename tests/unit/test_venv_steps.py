"""An engine venv's build steps: pip goes into the venv only when a step runs it."""

import subprocess
from pathlib import Path

from servebench.builds.recipe import VenvRecipe
from servebench.builds.venv import build_key, build_steps, ensure_build


def test_a_venv_no_step_installs_into_is_made_without_pip(tmp_path):
    bare = VenvRecipe(engine="bare", engine_package=False)
    steps = build_steps(bare, tmp_path / "venv", tmp_path / "engine")
    assert [title for title, _ in steps] == ["create venv"] and steps[0][1][-2:] == ["--without-pip",
                                                                                      str(tmp_path / "venv")]
    build = ensure_build(bare, tmp_path / "cache", log=lambda _: None)
    python = Path(build.venv_path) / "bin" / "python"
    assert subprocess.run([python, "-c", "import sys; print(sys.prefix)"], capture_output=True, text=True,
                          check=True).stdout.strip() == build.venv_path
    assert subprocess.run([python, "-m", "pip", "--version"], capture_output=True).returncode != 0
    assert build.inputs["pip"] is False
    # the same recipe with a package to install: pip in the venv, and another build key
    with_package = VenvRecipe(engine="bare", engine_package=False, packages=["six==1.16.0"])
    create = build_steps(with_package, tmp_path / "venv", tmp_path / "engine")[0][1]
    assert "--without-pip" not in create and build_key(with_package) != build_key(bare)
