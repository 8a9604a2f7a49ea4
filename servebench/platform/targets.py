"""Named target CPUs a build is made for: the compiler flags each means, the CPU features a node
must have to run the result, and the qemu CPU model that emulates it on a machine of another
architecture.

Feature names are Linux's (the `Features`/`flags` line of /proc/cpuinfo, the same names as the
aarch64 HWCAP bits), so a preflight compares a build's needs with what a node reports, whether
the node is a real Graviton reading /proc/cpuinfo or a qemu-user CPU model answering getauxval.

Sources: Arm's Neoverse N1/V1/V2 technical reference manuals (Graviton2 and Ampere Altra are N1,
Graviton3 is V1 with 256-bit SVE, Graviton4 and NVIDIA Grace are V2 with 128-bit SVE2), the x86-64 psABI levels,
and ggml's own CMake options (GGML_CPU_ARM_ARCH, GGML_AVX2, GGML_AVX512...). qemu 7.2 (Debian 12)
has a neoverse-n1 model but no V1/V2: those are emulated by `max` with the SVE length of the chip;
A64FX (armv8.2-a, 512-bit SVE, Fujitsu's A64FX datasheet) it models by name.
"""

from __future__ import annotations

import platform

from pydantic import BaseModel, ConfigDict

N1_FEATURES = ("fp", "asimd", "atomics", "fphp", "asimdhp", "asimddp", "lrcpc")


class TargetProfile(BaseModel):
    """One target CPU: what a build for it is compiled with and needs from the CPU it runs on."""

    model_config = ConfigDict(frozen=True)

    name: str
    arch: str                                    # aarch64 | x86_64 (platform.machine() spelling)
    description: str
    compiler_flags: tuple[str, ...] = ()         # what the compiler is told (-march=...), recorded in the key
    cmake_args: tuple[str, ...] = ()             # how ggml is told the same thing
    features: tuple[str, ...] = ()               # Linux CPU feature names the build requires
    emulator_cpu: str | None = None              # qemu-user -cpu value that is this CPU (aarch64 targets)


def _arm(name: str, description: str, march: str, features: tuple[str, ...], emulator_cpu: str) -> TargetProfile:
    return TargetProfile(name=name, arch="aarch64", description=description, compiler_flags=(f"-march={march}",),
                         cmake_args=("-DGGML_NATIVE=OFF", f"-DGGML_CPU_ARM_ARCH={march}"),
                         features=features, emulator_cpu=emulator_cpu)


_X86_V3 = ("-DGGML_NATIVE=OFF", "-DGGML_AVX=ON", "-DGGML_AVX2=ON", "-DGGML_FMA=ON", "-DGGML_F16C=ON",
           "-DGGML_BMI2=ON")

PROFILES: dict[str, TargetProfile] = {p.name: p for p in (
    _arm("armv8-a", "generic 64-bit Arm (Cortex-A53 and up): NEON only", "armv8-a",
         ("fp", "asimd"), "cortex-a53"),
    _arm("graviton2", "AWS Graviton2 (Neoverse N1): armv8.2-a, dot product, fp16", "armv8.2-a+dotprod+fp16+rcpc",
         N1_FEATURES, "neoverse-n1"),
    _arm("ampere-altra", "Ampere Altra (Neoverse N1), as Graviton2", "armv8.2-a+dotprod+fp16+rcpc",
         N1_FEATURES, "neoverse-n1"),
    _arm("graviton3", "AWS Graviton3 (Neoverse V1): armv8.4-a, 256-bit SVE, bf16, int8 matmul",
         "armv8.4-a+sve+i8mm+bf16+dotprod+fp16+rcpc", N1_FEATURES + ("sve", "i8mm", "bf16"), "max,sve-max-vq=2"),
    _arm("graviton4", "AWS Graviton4 (Neoverse V2): armv9-a, 128-bit SVE2, bf16, int8 matmul",
         "armv9-a+i8mm+bf16+dotprod+fp16+rcpc", N1_FEATURES + ("sve", "sve2", "i8mm", "bf16"), "max,sve-max-vq=1"),
    # NVIDIA Grace (Neoverse V2, as Graviton4): armv9-a, 128-bit SVE2, bf16, int8 matmul; 72 cores a CPU
    _arm("grace", "NVIDIA Grace (Neoverse V2): armv9-a, 128-bit SVE2, bf16, int8 matmul",
         "armv9-a+i8mm+bf16+dotprod+fp16+rcpc", N1_FEATURES + ("sve", "sve2", "i8mm", "bf16"), "max,sve-max-vq=1"),
    # Fujitsu A64FX (Deucalion's ARM partition, Fugaku): armv8.2-a with 512-bit SVE and fp16, no dot
    # product; qemu 7.2 models it by name (512-bit SVE by default).
    _arm("a64fx", "Fujitsu A64FX: armv8.2-a, 512-bit SVE, fp16", "armv8.2-a+sve+fp16",
         ("fp", "asimd", "atomics", "fphp", "asimdhp", "asimdrdm", "sve"), "a64fx"),
    TargetProfile(name="x86-64-v3", arch="x86_64", description="x86-64-v3 (Haswell / Zen 1 and up): AVX2, FMA",
                  compiler_flags=("-march=x86-64-v3",), cmake_args=_X86_V3 + ("-DGGML_AVX512=OFF",),
                  features=("avx", "avx2", "fma", "f16c", "bmi2")),
    TargetProfile(name="x86-64-v4", arch="x86_64", description="x86-64-v4 (Skylake-SP / Zen 4 and up): AVX-512",
                  compiler_flags=("-march=x86-64-v4",), cmake_args=_X86_V3 + ("-DGGML_AVX512=ON",),
                  features=("avx", "avx2", "fma", "f16c", "bmi2", "avx512f", "avx512bw", "avx512cd", "avx512dq",
                            "avx512vl")),
    TargetProfile(name="native", arch=platform.machine(), description="this build host's CPU (-march=native; "
                  "its feature flags join the build key)", compiler_flags=("-march=native",),
                  cmake_args=("-DGGML_NATIVE=ON",)),
)}


class TargetError(ValueError):
    pass


def profile(name: str) -> TargetProfile:
    try:
        return PROFILES[name]
    except KeyError:
        raise TargetError(f"unknown target {name!r}; the profiles are: {', '.join(PROFILES)}") from None


def host_arch() -> str:
    return platform.machine()


def is_cross(target: TargetProfile) -> bool:
    """Whether a build for this target is compiled by a cross compiler (another architecture)."""
    return target.arch != host_arch()


def missing_features(required: list[str] | tuple[str, ...], available: set[str]) -> list[str]:
    """The required features the CPU lacks, in the order they are required."""
    return [feature for feature in required if feature not in available]


def emulator_argv(target: TargetProfile, sysroot: str = "/usr/aarch64-linux-gnu") -> list[str]:
    """How a node that *is* this target runs a foreign binary here: qemu-user, invoked explicitly
    with the CPU model (never binfmt_misc, which is kernel-wide state) and the cross sysroot for the
    dynamic loader and libstdc++."""
    if target.emulator_cpu is None:
        raise TargetError(f"target {target.name} ({target.arch}) has no emulator model")
    return [f"qemu-{target.arch}-static", "-cpu", target.emulator_cpu, "-L", sysroot]
