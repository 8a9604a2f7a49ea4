"""A mode's predicted start-up and a campaign's predicted duration (pure; docs/performance-model.md).

A server is ready after its engine's fixed start (interpreter, libraries, the engine's init, the workers'
rendezvous), its largest rank's weights read at the node's bandwidth, a profile run where the engine sizes its
KV cache by one (a forward pass of its whole token budget: 2 FLOPs a parameter a token at the node's peak for
the dtype, which is what a dtype without kernels turns from seconds into many minutes) and the compile of its
graphs where it compiles them. The fixed parts are an engine's on a 2-core node: 45 s to start (the low end of
the 45-90 s a tiny model's vLLM server takes to be ready there) and 35 s of graph compile (`enforce_eager`
starts a server 30-90 s sooner there); a larger node starts sooner, so they are upper bounds elsewhere.
"""

from __future__ import annotations

from dataclasses import dataclass

from servebench.prediction.hardware import NodeFigures
from servebench.prediction.step import Efficiency, RankWork

ENGINE_START_S = 45.0
GRAPH_COMPILE_S = 35.0
EMULATION_SLOWDOWN = 7.0      # qemu-user: an emulated server started in 307-321 s against 45 s natively
CELL_FIXED_S = 3.0            # a cell's load generator started, its result written and landed
# a start-up timeout is this many times the prediction (and never below the engine block's ready_timeout_s)
TIMEOUT_MARGIN = 2.0


@dataclass(frozen=True)
class StartupPrediction:
    engine_s: float     # the engine's fixed start
    load_s: float       # the largest rank's weights at the node's bandwidth
    profile_s: float    # the profile run of the token budget
    compile_s: float    # the graphs' compile

    @property
    def total_s(self) -> float:
        return self.engine_s + self.load_s + self.profile_s + self.compile_s

    def describe(self) -> str:
        return (f"{self.total_s:.0f} s (start {self.engine_s:.0f} + weights {self.load_s:.1f} + profile run "
                f"{self.profile_s:.1f} + compile {self.compile_s:.0f})")


def predict_startup(work: RankWork, figures: NodeFigures, budget_tokens: int, efficiency: Efficiency,
                    profile_run: bool, compiles: bool, emulated: bool = False) -> StartupPrediction:
    """The start-up of a mode whose largest rank does `work` on a node of `figures`: `profile_run` where its
    engine sizes the KV cache by a forward pass of `budget_tokens`, `compiles` where it compiles graphs."""
    weight_bytes = work.weight_bytes
    load = weight_bytes / (figures.mem_bandwidth_gbps * 1e9 * efficiency.bandwidth * work.memory_share)
    peak, _ = figures.peak_gflops(work.dtype)
    flops = 2.0 * work.parameters * budget_tokens
    profile = flops / (peak * 1e9 * efficiency.compute * work.node_share) if profile_run and peak > 0 else 0.0
    slow = EMULATION_SLOWDOWN if emulated else 1.0
    return StartupPrediction(ENGINE_START_S * slow, load * slow, profile * slow * work.pp,
                             (GRAPH_COMPILE_S if compiles else 0.0) * slow)


def campaign_duration_s(startups: list[float], cell_seconds: list[float]) -> float:
    """Every mode's start-up and every cell's simulated time with its fixed cost, one after another."""
    return sum(startups) + sum(seconds + CELL_FIXED_S for seconds in cell_seconds)
