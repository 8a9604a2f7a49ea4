"""What vLLM 0.32's CPU backend lacks to serve expert and data parallelism on MoE models.

Two gaps, both measured (docs/parallel-modes.md), both filled here without touching vLLM's files:
- `CPUUnquantizedExperts.apply` hands the CPU fused-MoE kernel the router's global expert ids with
  only this rank's experts' weights and ignores the expert map, so with `--enable-expert-parallel`
  a token routed to another rank's expert indexes past the local weights (a segmentation fault in
  `cpu_fused_moe.cpp`). `register` (a `vllm.general_plugins` entry point, which vLLM loads in its
  API server, engine and every worker before it builds the model) wraps `apply` so the kernel gets
  local ids and a zero weight for experts held elsewhere (`experts.local_routing`); the EP group's
  all-reduce then sums the ranks' parts, as on GPUs.
- The CPU communicator has no `all_gatherv`/`reduce_scatterv`, which the MoE layers' token
  dispatch over data-parallel ranks calls: servebench's communicator
  (`vllm_cpu_ray/communicator.py`) brings them (`collectives.py`).
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

from servebench_engine.vllm_cpu_moe.experts import local_routing

PATCHED = "_servebench_expert_map"


def register() -> None:
    """Wrap CPUUnquantizedExperts.apply once per process (vLLM may load plugins more than once)."""
    from vllm.logger import init_logger
    from vllm.model_executor.layers.fused_moe.experts import cpu_moe

    experts = cpu_moe.CPUUnquantizedExperts
    if getattr(experts.apply, PATCHED, False):
        return
    experts.apply = with_local_routing(experts.apply)
    init_logger("vllm.servebench_cpu_moe").info(
        "servebench: CPUUnquantizedExperts.apply takes the expert map (expert parallelism on CPU)")


def with_local_routing(apply: Any) -> Any:
    """`apply`, given local expert ids and weights whenever vLLM passes an expert map."""
    signature = inspect.signature(apply)

    @functools.wraps(apply)
    def apply_local(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        expert_map = bound.arguments.get("expert_map")
        if expert_map is not None:
            ids, weights = local_routing(bound.arguments["topk_ids"], bound.arguments["topk_weights"],
                                         expert_map)
            bound.arguments["topk_ids"], bound.arguments["topk_weights"] = ids, weights
            bound.arguments["expert_map"] = None
        return apply(*bound.args, **bound.kwargs)

    setattr(apply_local, PATCHED, True)
    return apply_local
