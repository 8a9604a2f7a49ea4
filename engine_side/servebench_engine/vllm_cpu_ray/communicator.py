"""vLLM's CPU communicator, with shared memory only among ranks on one node, and the
collectives over uneven row counts that MoE layers need on data-parallel ranks.

vLLM enables its /dev/shm all-reduce when all ranks of a group derive the same segment
name, and under Ray they do even when the ranks sit on different machines, whose /dev/shm
are not shared. Here every rank also reports its node key; a group that spans more than
one node falls back to torch.distributed (gloo).

vLLM 0.32's CPU communicator raises NotImplementedError for `all_gatherv` and
`reduce_scatterv`, which an MoE layer's token dispatch over DP ranks calls (with or without
expert parallelism): they are built here from its all-gather and all-reduce
(`vllm_cpu_moe/collectives.py`).
"""

from __future__ import annotations

import torch
from vllm.distributed.device_communicators.cpu_communicator import CpuCommunicator
from vllm.logger import init_logger

from servebench_engine.vllm_cpu_moe import collectives
from servebench_engine.vllm_cpu_ray.node import node_key

logger = init_logger("vllm.servebench_cpu_ray")  # under "vllm.": vLLM configures only that tree


class NodeAwareCpuCommunicator(CpuCommunicator):
    def _all_group_ranks_share_shm_group_name(self) -> bool:
        same_name = super()._all_group_ranks_share_shm_group_name()
        keys: list[str] = [""] * self.world_size
        torch.distributed.all_gather_object(keys, node_key(), group=self.device_group)
        if len(set(keys)) > 1:
            logger.info("servebench: group %s spans nodes %s: shared memory disabled, using gloo",
                        self.unique_name, sorted(set(keys)))
            return False
        return same_name

    def all_gatherv(self, input_: torch.Tensor | list[torch.Tensor], dim: int = 0,
                    sizes: list[int] | None = None) -> torch.Tensor | list[torch.Tensor]:
        if dim != 0:
            raise NotImplementedError("only dim 0 all-gatherv is supported (as on CUDA)")

        def gather(tensor: torch.Tensor) -> torch.Tensor:
            return collectives.all_gatherv(tensor, sizes, self.rank_in_group,
                                           lambda whole: self.all_gather(whole, dim=0))

        if isinstance(input_, torch.Tensor):
            return gather(input_)
        return [gather(tensor) for tensor in input_]

    def reduce_scatterv(self, input_: torch.Tensor, dim: int = -1,
                        sizes: list[int] | None = None) -> torch.Tensor:
        if self.world_size == 1:
            return input_
        if dim < 0:
            dim += input_.dim()
        rows = collectives.reduce_scatterv(input_.movedim(dim, 0), sizes, self.rank_in_group, self.world_size,
                                           self.all_reduce)
        return rows.movedim(0, dim).contiguous()
