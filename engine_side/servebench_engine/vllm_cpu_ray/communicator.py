"""vLLM's CPU communicator, with shared memory only among ranks on one node.

vLLM enables its /dev/shm all-reduce when all ranks of a group derive the same segment
name, and under Ray they do even when the ranks sit on different machines, whose /dev/shm
are not shared. Here every rank also reports its node key; a group that spans more than
one node falls back to torch.distributed (gloo).
"""

from __future__ import annotations

import torch
from vllm.distributed.device_communicators.cpu_communicator import CpuCommunicator
from vllm.logger import init_logger

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
