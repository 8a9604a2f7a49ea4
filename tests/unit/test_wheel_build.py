"""The `wheel` recipe (servebench/builds/wheel.py), vLLM-from-source's machinery, on a project small
enough to build in seconds: a real sdist with a C extension, taken from a file:// package index,
patched, given a staged source tree through an environment variable, compiled by `pip wheel
--no-build-isolation` in its build venv, cached by key, and installed into an engine venv with
its requirements less the one pinned to a direct URL."""

from __future__ import annotations

import hashlib
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest

from servebench.builds import builders
from servebench.builds import sdist as sdist_module
from servebench.builds.recipe import VenvRecipe, WheelRecipe
from servebench.builds.sdist import fetch_sdist, sdist_links
from servebench.builds.venv import BuildError
from servebench.builds.wheel import wheel_requirements

SETUP = '''import os
from setuptools import Extension, setup
setup(name="tinyext", version="1.0", ext_modules=[Extension("tinyext", ["tinyext.c"],
      include_dirs=[os.environ["TINY_STAGED"]])],
      install_requires=["packaging", "faraway @ https://example.invalid/faraway-1.0.tar.gz",
                        "winonly; sys_platform == 'win32'"])
'''
SOURCE = '''#include <Python.h>
#include "staged.h"
#define ANSWER 1
static PyObject *answer(PyObject *self, PyObject *args) { return PyLong_FromLong(ANSWER * STAGED); }
static PyMethodDef methods[] = {{"answer", answer, METH_NOARGS, ""}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "tinyext", NULL, -1, methods};
PyMODINIT_FUNC PyInit_tinyext(void) { return PyModule_Create(&module); }
'''
PATCH = '''--- a/tinyext.c
+++ b/tinyext.c
@@ -1,5 +1,5 @@
 #include <Python.h>
 #include "staged.h"
-#define ANSWER 1
+#define ANSWER 6
 static PyObject *answer(PyObject *self, PyObject *args) { return PyLong_FromLong(ANSWER * STAGED); }
 static PyMethodDef methods[] = {{"answer", answer, METH_NOARGS, ""}, {NULL, NULL, 0, NULL}};
'''


def make_index(root: Path) -> Path:
    """A PEP 503 index holding tinyext-1.0.tar.gz, its sha256 in the link."""
    project = root / "project" / "tinyext-1.0"
    project.mkdir(parents=True)
    (project / "setup.py").write_text(SETUP)
    (project / "tinyext.c").write_text(SOURCE)
    (project / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: tinyext\nVersion: 1.0\n")
    pages = root / "index" / "tinyext"
    pages.mkdir(parents=True)
    sdist = pages / "tinyext-1.0.tar.gz"
    with tarfile.open(sdist, "w:gz") as archive:
        archive.add(project, arcname="tinyext-1.0")
    digest = hashlib.sha256(sdist.read_bytes()).hexdigest()
    (pages / "index.html").write_text(f'<a href="tinyext-0.9.tar.gz">old</a>\n'
                                      f'<a href="tinyext-1.0.tar.gz#sha256={digest}">tinyext-1.0.tar.gz</a>\n')
    return root / "index"


def test_sdist_links_pick_the_pinned_version_and_its_sha256():
    page = ('<a href="../../f/vllm-0.31.0.tar.gz#sha256=aa">x</a><a href="../../f/vllm-0.32.0.tar.gz#sha256=bb">y</a>'
            '<a href="../../f/vllm-0.32.0-cp38-abi3-manylinux_2_31_x86_64.whl#sha256=cc">z</a>'
            '<a href="https://h/llama_cpp_python-0.3.36.tar.gz">w</a>')
    assert sdist_links(page, "vllm", "0.32.0") == [("../../f/vllm-0.32.0.tar.gz", "bb")]
    assert sdist_links(page, "llama-cpp-python", "0.3.36") == [("https://h/llama_cpp_python-0.3.36.tar.gz", None)]


def test_the_sdist_comes_from_the_index_checked_by_sha256(tmp_path, monkeypatch):
    index = make_index(tmp_path)
    monkeypatch.setenv("PIP_INDEX_URL", index.as_uri())
    sdist = fetch_sdist("tinyext==1.0", tmp_path / "cache", log=lambda _: None)
    assert sdist == tmp_path / "cache" / "sources" / "tinyext-1.0" / "tinyext-1.0.tar.gz"
    with pytest.raises(BuildError, match=r"has no sdist for tinyext==2\.0"):
        fetch_sdist("tinyext==2.0", tmp_path / "cache", log=lambda _: None)
    page = index / "tinyext" / "index.html"
    page.write_text(page.read_text().replace("sha256=", "sha256=0"))
    with pytest.raises(BuildError, match="sha256 is not the index's"):
        fetch_sdist("tinyext==1.0", tmp_path / "other-cache", log=lambda _: None)
    assert not list((tmp_path / "other-cache" / "sources" / "tinyext-1.0").iterdir())  # nothing half-kept


def test_a_wheels_requirements_leave_out_direct_urls_extras_other_platforms_and_named_packages(tmp_path):
    wheel = tmp_path / "demo-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("demo-1.0.dist-info/METADATA", "\n".join([
            "Metadata-Version: 2.1", "Name: demo", "Version: 1.0", "Requires-Dist: numpy>=1",
            "Requires-Dist: torch==2.13.0+cpu; platform_machine == \"x86_64\" or platform_machine == \"aarch64\"",
            "Requires-Dist: torchvision", "Requires-Dist: winonly; sys_platform == \"win32\"",
            "Requires-Dist: pytest; extra == \"test\"",
            "Requires-Dist: triton @ https://github.com/x/triton-3.8.0-cp311.whl ; python_version == \"3.11\""]))
    keep, left_out = wheel_requirements(wheel, ["torchvision"])
    assert keep == ["numpy>=1", "torch==2.13.0+cpu"]
    assert [line.split(" (")[1] for line in left_out] == ["left out by the engine)", "a direct URL)"]


def test_a_patched_sdist_with_a_staged_tree_becomes_a_cached_wheel_and_an_engine_venv(tmp_path, monkeypatch):
    index = make_index(tmp_path)
    monkeypatch.setattr(sdist_module, "index_url", index.as_uri)  # the sdist's index; pip's own stays as configured
    staged = tmp_path / "staged"
    staged.mkdir()
    (staged / "staged.h").write_text("#define STAGED 7\n")
    patch = tmp_path / "answer.patch"
    patch.write_text(PATCH)
    cache, said = tmp_path / "cache", []
    wheel = WheelRecipe(engine="tiny", sdist="tinyext==1.0", build_requirements=["wheel"],
                        staged_sources={"TINY_STAGED": str(staged)}, patches=[str(patch)])
    recipe = VenvRecipe(engine="tiny", engine_package=False, version_distribution="tinyext", wheel=wheel)

    inputs, wheel_key = builders.inputs_and_key(recipe, cache)
    assert wheel_key.startswith("tiny-wheel-") and inputs["patches"] == {
        "answer.patch": hashlib.sha256(PATCH.encode()).hexdigest()}
    build = builders.ensure(recipe, cache, said.append)
    python = Path(build.venv_path) / "bin" / "python"
    done = subprocess.run([str(python), "-c", "import tinyext; print(tinyext.answer())"], capture_output=True,
                          text=True)
    assert done.stdout.strip() == "42", done.stderr   # ANSWER 6 (the patch) times STAGED 7 (the staged tree)
    assert build.engine_version == "1.0" and "tinyext.whl" not in build.inputs["local_wheels"]
    made = build.inputs["built_from"]   # the venv's builds row traces to the wheel build
    assert made["wheel_key"] == wheel_key and made["source_sha256"] == inputs["source_sha256"]
    assert made["compiler"]["id"] == "GNU" and len(made["artifact_sha256"]) == 64
    assert any("faraway @ https://example.invalid" in line and "a direct URL" in line for line in said)
    wheel_record = (cache / "engines" / wheel_key / "servebench-build.json").read_text()
    assert '"artifact_sha256"' in wheel_record and '"source_sha256"' in wheel_record

    said.clear()
    again = builders.ensure(recipe, cache, said.append)
    assert again.build_seconds is None and not any("build the wheel" in line for line in said)
    (staged / "staged.h").write_text("#define STAGED 8\n")   # another staged tree is another wheel
    assert builders.inputs_and_key(recipe, cache)[1] != wheel_key
