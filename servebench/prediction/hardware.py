"""A node's figures as the performance model reads them: memory bandwidth, a matmul peak per dtype, the cores
they are for and where they come from.

Measured figures are a node's cached roofline (servebench/roofline/benchmark.py: bandwidth streamed and
matmuls timed on the cores its servers get). Hardware not at hand is declared from its vendor's published
numbers; a published bandwidth or peak is what the chip can do, not what a kernel sustains, so a
prediction from declared figures is an upper bound until a run there calibrates it (docs/performance-model.md).

Declared figures, each computed from the published clock, cores and vector units (FLOPs a cycle = vector
pipes x lanes x 2 for a fused multiply-add):

- A64FX (Fujitsu's A64FX datasheet and microarchitecture manual; Fugaku's FX1000 runs it at 2.2 GHz):
  48 compute cores at 2.0 GHz in 4 core-memory groups, each with an HBM2 stack of 256 GB/s (1024 GB/s in
  all), two 512-bit SVE pipes a core: fp32 48 x 2.0 x 2 x 16 x 2 = 6144 GFLOP/s, fp16 twice that. It
  has no bf16 instructions (armv8.2-a; bf16 arrived in armv8.6-a), so a bf16 model is converted, not
  multiplied, and its fast dtypes are float16 and float32.
- AWS Graviton3 (AWS's Graviton3 announcement and the c7g instance page: 64 Neoverse V1 cores at 2.6 GHz,
  DDR5-4800 on 8 channels, 8 x 4800 MT/s x 8 bytes = 307.2 GB/s; Arm's Neoverse V1 Software Optimization
  Guide: two 256-bit SVE pipes a core): fp32 64 x 2.6 x 2 x 8 x 2 = 5324.8 GFLOP/s. bf16 is taken as twice
  fp32 (BFMMLA does four times an fp32 FMLA's multiply-adds at a lower issue rate): an assumption, not a
  published peak.
- NVIDIA Grace (NVIDIA's Grace CPU Superchip datasheet: 144 Neoverse V2 cores, 7.1 TFLOPS fp64, up to 1 TB/s
  of LPDDR5X, so one Grace CPU of 72 cores 500 GB/s; Arm's Neoverse V2 guide: four 128-bit SVE2 pipes a
  core, which at 7.1 TFLOPS fp64 over 144 cores is 3.1 GHz): fp32 72 x 3.1 x 4 x 4 x 2 = 7142.4 GFLOP/s,
  bf16 twice fp32 as for Graviton3 (the same assumption).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from servebench.roofline.benchmark import BF16_KERNELS_FRACTION

# the roofline's keys for the dtypes it times, and the served dtypes they stand for
ROOFLINE_PEAKS = {"bfloat16": "matmul_peak_gflops_bf16", "float32": "matmul_peak_gflops_fp32"}
# a peak a dtype borrows when its own was not measured (a float16 model on a node timed in bf16 and fp32)
FALLBACK_DTYPE = {"float16": "float32", "bfloat16": "float32"}
# the roofline's rule for "no bf16 kernels", for any dtype: a peak below this share of the fastest dtype's is
# no kernels of its own (a bf16 matmul at a tenth of fp32's converts, it does not multiply in bf16)
FAST_KERNELS_FRACTION = BF16_KERNELS_FRACTION


@dataclass(frozen=True)
class NodeFigures:
    """What a node's ranks run against: its memory bandwidth [GB/s], its matmul peak [GFLOP/s] per dtype,
    the cores those figures are for (a rank on fewer of them gets their share), its NUMA nodes, and
    where the figures come from (a sentence the prediction prints)."""

    name: str
    mem_bandwidth_gbps: float
    matmul_gflops: dict[str, float] = field(default_factory=dict)
    cores: int = 1
    numa_nodes: int = 1
    source: str = ""
    declared: bool = False     # published peaks (an upper bound), not measured ones

    def peak_gflops(self, dtype: str) -> tuple[float, str]:
        """The matmul peak a dtype is multiplied at and the dtype whose figure it is (its own, else the one it
        borrows). A node with no peak at all: 0, which the step model reads as "no compute bound known"."""
        if dtype in self.matmul_gflops:
            return self.matmul_gflops[dtype], dtype
        borrowed = FALLBACK_DTYPE.get(dtype)
        if borrowed in self.matmul_gflops:
            return self.matmul_gflops[borrowed], borrowed
        return 0.0, dtype

    def fast_dtypes(self) -> list[str]:
        """The dtypes with kernels of their own: a peak at least FAST_KERNELS_FRACTION of the fastest."""
        if not self.matmul_gflops:
            return []
        best = max(self.matmul_gflops.values())
        return [d for d, peak in self.matmul_gflops.items() if peak >= FAST_KERNELS_FRACTION * best]

    def slow_dtype_warning(self, dtype: str) -> str | None:
        """Why a model in `dtype` will measure missing kernels here (None: it has them, or nothing is known):
        its peak far below the fastest dtype's, or no kernels at all (a declared chip without the dtype)."""
        fast = self.fast_dtypes()
        if not fast or dtype in fast:
            return None
        best = max(fast, key=lambda d: self.matmul_gflops[d])
        own = self.matmul_gflops.get(dtype)
        if own is None:
            if dtype in FALLBACK_DTYPE and FALLBACK_DTYPE[dtype] in fast and not self.declared:
                return None     # not measured in this dtype: nothing to warn about
            return (f"{dtype} has no kernels on {self.name} (its fast dtypes: {', '.join(fast)}); serve "
                    f"{best} instead")
        return (f"{dtype} has no fast kernels on {self.name}: {own:g} GFLOP/s against {best}'s "
                f"{self.matmul_gflops[best]:g} ({self.matmul_gflops[best] / own:.0f}x slower); serve {best} for "
                "compute-bound work (prefill, large batches, the start-up's profile run)")


def figures_from_roofline(name: str, roofline: Mapping[str, Any]) -> NodeFigures | None:
    """A node's figures from its roofline (the cached dict of servebench/roofline/benchmark.py); None without a
    bandwidth (nothing to predict from)."""
    bandwidth = roofline.get("mem_bandwidth_gbps")
    if not bandwidth:
        return None
    peaks = {dtype: float(roofline[key]) for dtype, key in ROOFLINE_PEAKS.items() if roofline.get(key)}
    cpus = roofline.get("cpus") or []
    how = roofline.get("method") or roofline.get("library") or "the roofline micro-benchmark"
    return NodeFigures(name=name, mem_bandwidth_gbps=float(bandwidth), matmul_gflops=peaks,
                       cores=max(1, len(cpus)), source=f"measured on CPUs {cpus}: {how}")


def _sve_peak(cores: int, ghz: float, pipes: int, fp32_lanes: int) -> float:
    """fp32 GFLOP/s of `cores` at `ghz` with `pipes` vector pipes of `fp32_lanes` lanes, a multiply-add 2 FLOPs."""
    return round(cores * ghz * pipes * fp32_lanes * 2, 1)


A64FX_FP32 = _sve_peak(48, 2.0, 2, 16)
GRAVITON3_FP32 = _sve_peak(64, 2.6, 2, 8)
GRACE_FP32 = _sve_peak(72, 3.1, 4, 4)

DECLARED: dict[str, NodeFigures] = {figures.name: figures for figures in (
    NodeFigures("a64fx", 1024.0, {"float32": A64FX_FP32, "float16": 2 * A64FX_FP32}, cores=48, numa_nodes=4,
                source="declared: Fujitsu A64FX datasheet (48 cores at 2.0 GHz, 2 x 512-bit SVE, 4 x HBM2 "
                       "256 GB/s); no bf16 instructions", declared=True),
    NodeFigures("graviton3", 307.2, {"float32": GRAVITON3_FP32, "bfloat16": 2 * GRAVITON3_FP32}, cores=64,
                source="declared: AWS Graviton3 (64 Neoverse V1 at 2.6 GHz, DDR5-4800 x 8 channels), Arm "
                       "Neoverse V1 guide (2 x 256-bit SVE); bf16 assumed 2x fp32", declared=True),
    NodeFigures("grace", 500.0, {"float32": GRACE_FP32, "bfloat16": 2 * GRACE_FP32}, cores=72,
                source="declared: NVIDIA Grace CPU Superchip datasheet (72 Neoverse V2 a CPU at 3.1 GHz, "
                       "1 TB/s LPDDR5X a superchip), Arm Neoverse V2 guide (4 x 128-bit SVE2); bf16 assumed "
                       "2x fp32", declared=True),
)}


def declared(name: str) -> NodeFigures:
    try:
        return DECLARED[name]
    except KeyError:
        raise ValueError(f"no declared figures for {name!r}: one of {', '.join(DECLARED)}") from None
