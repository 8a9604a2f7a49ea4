"""Efficiency factors fitted on a run's TP=1 cells, then applied to its other modes (pure).

A TP=1 cell has no collectives, so what it measures beyond the hardware's time is the engine's own: its kernels'
share of the bandwidth and of the peak, its fixed cost a step and a request. Which of them a cell can tell
depends on what dominates it: a decode that the hardware alone would take most of its TPOT for (a real shape
streaming its weights) measures the kernels' bandwidth share; one the hardware explains little of (a tiny
model: a step is all scheduler and sampler) measures the fixed cost a step. The fit reads each metric's
median over the cells, which a single slow cell does not move:

- TPOT: with the default bandwidth share, the hardware's part h / bandwidth of the measured TPOT m: below
  `HARDWARE_SHARE`, the step overhead is median(m - h / bandwidth) (at least 0), the share kept; else the
  overhead is kept and the share is median(h / (m - overhead)), within [MIN_EFFICIENCY, 1];
- TTFT: the same with the prefill's hardware time against the measured TTFT less the steps before the first
  token times the step overhead: the request overhead, or the compute share.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from statistics import median

from servebench.prediction.step import Efficiency

HARDWARE_SHARE = 0.5    # the hardware's part of a metric above which the fit scales the hardware, not the overhead
MIN_EFFICIENCY = 0.02


@dataclass(frozen=True)
class CalibrationCell:
    """A measured TP=1 cell and what the model says of it from the hardware alone (efficiency 1, no overhead):
    its TTFT and TPOT p50 both ways [s], and the engine steps a request waits for its first token (1 for a
    request that finds the engine idle)."""

    measured_ttft_s: float
    measured_tpot_s: float
    hardware_ttft_s: float
    hardware_tpot_s: float
    steps_to_first_token: float = 1.0


def _clamp(value: float) -> float:
    return min(1.0, max(MIN_EFFICIENCY, value))


def fit_decode(cells: list[CalibrationCell], defaults: Efficiency) -> tuple[float, float]:
    """(bandwidth share, step overhead [s]) from the cells' TPOT."""
    share = median(c.hardware_tpot_s / defaults.bandwidth / c.measured_tpot_s for c in cells)
    if share < HARDWARE_SHARE:
        overhead = median(max(0.0, c.measured_tpot_s - c.hardware_tpot_s / defaults.bandwidth) for c in cells)
        return defaults.bandwidth, overhead
    rest = [max(c.measured_tpot_s - defaults.step_overhead_s, 1e-9) for c in cells]
    return _clamp(median(c.hardware_tpot_s / r for c, r in zip(cells, rest))), defaults.step_overhead_s


def fit_prefill(cells: list[CalibrationCell], defaults: Efficiency, step_overhead_s: float) -> tuple[float, float]:
    """(compute share, request overhead [s]) from the cells' TTFT, the step overhead already fitted."""
    beyond = [max(c.measured_ttft_s - c.steps_to_first_token * step_overhead_s, 1e-9) for c in cells]
    share = median(c.hardware_ttft_s / defaults.compute / b for c, b in zip(cells, beyond))
    if share < HARDWARE_SHARE:
        overhead = median(max(0.0, b - c.hardware_ttft_s / defaults.compute) for c, b in zip(cells, beyond))
        return defaults.compute, overhead
    rest = [max(b - defaults.request_overhead_s, 1e-9) for b in beyond]
    return _clamp(median(c.hardware_ttft_s / r for c, r in zip(cells, rest))), defaults.request_overhead_s


def fit_efficiency(cells: list[CalibrationCell], defaults: Efficiency = Efficiency(), source: str = "") -> Efficiency:
    """The factors that make the model meet the cells' medians (the defaults without a cell to fit)."""
    usable = [c for c in cells if c.measured_tpot_s > 0 and c.measured_ttft_s > 0]
    if not usable:
        return defaults
    bandwidth, step_overhead = fit_decode(usable, defaults)
    compute, request_overhead = fit_prefill(usable, defaults, step_overhead)
    return replace(defaults, bandwidth=bandwidth, compute=compute, step_overhead_s=step_overhead,
                   request_overhead_s=request_overhead,
                   source=source or f"fitted on {len(usable)} TP=1 cell{'s' if len(usable) != 1 else ''}")
