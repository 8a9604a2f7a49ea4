"""An ARM partition driven from an x86 login node: the build's interpreter goes where its venv goes, and a remote
aarch64 host runs the build under emulation on that host.

Here the tests that start real components (servers, the testbed, qemu, a browser); the logic's own are in
tests/unit/test_arm_partition.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from servebench.builds.builders import ensure
from servebench.devtools.testbed.layout import PER_HOST_DIRS
from servebench.distribution.distribute import NodeRefused, place_on_nodes
from servebench.engines.vllm import VllmEngine
from servebench.engines.vllm.spec import VllmEngineSpec
from servebench.paths import cache_dir
from servebench.platform.emulation import node_argv
from servebench.providers.ssh import SshProvider
from servebench.providers.ssh.spec import SshProviderSpec
from tests.support.arm import C_EXTENSION_CHECK, needs_arm64_packages, needs_cross
from tests.support.testbed import allocated, on_the_testbed, own_testbed


def graviton3_host(layout, interpreter: str) -> SshProvider:
    host = layout.hosts[0]
    return SshProvider(SshProviderSpec(
        hosts=[{"name": host.name, "address": host.address, "cpus": "0", "key": str(layout.ssh_key),
                "emulate": "graviton3"}],
        known_hosts=str(layout.known_hosts), shared_paths=[str(cache_dir() / "engines")], interpreter=interpreter))


@on_the_testbed
@pytest.mark.arm
@pytest.mark.vllm
@needs_cross
@needs_arm64_packages
def test_a_remote_graviton3_host_gets_the_builds_interpreter_and_loads_vllms_c_extension_there(tmp_path: Path):
    """The aarch64 venv is built once (about 4 minutes and 5.9 GB cold) and found by key after."""
    build = ensure(VllmEngine().build_recipe(VllmEngineSpec(target="graviton3")), cache_dir())
    assert build.platform == "linux-aarch64" and "torch==2.13.0\n" in build.pip_freeze
    with own_testbed("sba", 1, share=(str(cache_dir() / "engines"),)) as layout:
        with allocated(graviton3_host(layout, "node")) as provider:
            node = provider.nodes()[0]
            inventories = {node.name: provider.inventory(node)}
            assert inventories[node.name]["arch"] == "aarch64"
            assert "emulated: qemu-aarch64 -cpu max,sve-max-vq=2" in inventories[node.name]["cpu_model"]
            with pytest.raises(NodeRefused) as refused:
                place_on_nodes(provider, [node], inventories, {node.name: {"engine": Path(build.venv_path)}},
                               build.python, build.platform)
            assert str(refused.value).startswith("node h1 (aarch64, emulated graviton3): interpreter: node, but its "
                                                 "python3.11 (")
            assert "Invalid ELF image for this architecture" in str(refused.value), refused.value

        with allocated(graviton3_host(layout, "placed")) as provider:
            node = provider.nodes()[0]
            placements = place_on_nodes(provider, [node], inventories,
                                        {node.name: {"engine": Path(build.venv_path)}}, build.python, build.platform)
            how = {p.what: p.how for p in placements}
            # a host mounts its own /root and /tmp (PER_HOST_DIRS): a cache there (~/.cache, CI's) is hidden
            # from it and the CPython is copied; a cache elsewhere (/var/tmp) is the same files: found by digest
            private = any(str(cache_dir()).startswith(d + "/") for d in PER_HOST_DIRS)
            first = "copied" if private else "present"
            assert how == {"engine": "shared", "interpreter": first, "emulation-root": first, "python": "runs"}
            interpreter = next(p for p in placements if p.what == "interpreter")
            if private:
                assert interpreter.bytes is not None and 40e6 < interpreter.bytes < 200e6   # Debian's arm64 CPython
            python = next(p for p in placements if p.what == "python")
            assert python.note is not None and python.note.startswith("placed: the build's own python3.11 (Debian")
            again = place_on_nodes(provider, [node], inventories, {node.name: {"engine": Path(build.venv_path)}},
                                   build.python, build.platform)
            assert {p.what: p.how for p in again}["interpreter"] == "present"   # found by its digest

            script = tmp_path / "check" / "check.py"
            script.parent.mkdir()
            script.write_text(C_EXTENSION_CHECK)
            remote = f"{provider.scratch_dir(node)}/check"
            provider.put_tree(node, script.parent, remote)
            argv = node_argv(node, [build.python, f"{remote}/check.py"])
            assert argv[:3] == ["qemu-aarch64-static", "-cpu", "max,sve-max-vq=2"]
            done = provider.run(node, ["env", f"TMPDIR={provider.scratch_dir(node)}", *argv], timeout=900)
            out = done.stdout
            assert done.returncode == 0, (out + done.stderr)[-3000:]
            assert "machine aarch64 torch 2.13.0" in out, out
            assert "bound now:" in out and "undefined symbol: sbgemm_" in out, out
            assert "lazy: loaded True" in out and "child 0 aarch64" in out and "spawned 0" in out, out
