"""bf16 on aarch64 for vLLM's prebuilt aarch64 wheel (docs/builds.md, "bf16 on aarch64"): the refusal at plan
time of a build that cannot serve a model in bfloat16, and the BLAS shim variant of the aarch64 venv (its key,
its hook, the shim's source and compile command).

Here the tests that start real components (servers, the testbed, qemu, a browser); the logic's own are in
tests/unit/test_arm_bf16.py."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from servebench.builds import blas_shim


@pytest.mark.arm
def test_the_shim_defines_only_sbgemm_and_forwards_it_to_the_prefixed_openblas(tmp_path: Path):
    """Compiled with the cross compiler against a stand-in library exporting what scipy-openblas32 exports
    (scipy_sbgemm_, scipy_openblas_set_num_threads): the shim exports sbgemm_ alone (torch's own BLAS
    symbols are never interposed) and needs that library, found next to the venv's package."""
    compiler = shutil.which("aarch64-linux-gnu-gcc")
    nm = shutil.which("aarch64-linux-gnu-nm")
    if compiler is None or nm is None:
        reason = "needs Debian's aarch64 cross compiler and binutils: apt-get install gcc-aarch64-linux-gnu"
        print(f"skipped: {reason}")
        pytest.skip(reason)
    provider = blas_shim.PROVIDERS[0]
    site = tmp_path / "site"
    lib = provider.library_dir(site)
    lib.mkdir(parents=True)
    stand_in = tmp_path / "openblas.c"
    stand_in.write_text("void scipy_sbgemm_(void) {}\nvoid scipy_openblas_set_num_threads(int n) { (void)n; }\n")
    subprocess.run([compiler, "-shared", "-fPIC", "-o", str(lib / provider.library), str(stand_in),
                    f"-Wl,-soname,{provider.library}"], check=True)
    source = tmp_path / blas_shim.SHIM_SOURCE_NAME
    source.write_text(blas_shim.shim_source(provider))
    blas_shim.shim_path(site).parent.mkdir(parents=True)
    subprocess.run(blas_shim.compile_argv(provider, "aarch64", source, site), check=True)
    symbols = subprocess.run([nm, "-D", "--defined-only", str(blas_shim.shim_path(site))], capture_output=True,
                             text=True, check=True).stdout.split()
    assert "sbgemm_" in symbols and not [s for s in symbols if "gemm" in s and s != "sbgemm_"], symbols
    undefined = subprocess.run([nm, "-D", "--undefined-only", str(blas_shim.shim_path(site))], capture_output=True,
                               text=True, check=True).stdout
    assert "scipy_sbgemm_" in undefined and "scipy_openblas_set_num_threads" in undefined
    dynamic = subprocess.run(["aarch64-linux-gnu-readelf", "-d", str(blas_shim.shim_path(site))],
                             capture_output=True, text=True, check=True).stdout
    assert "[libscipy_openblas.so]" in dynamic and "$ORIGIN/../scipy_openblas32/lib" in dynamic
