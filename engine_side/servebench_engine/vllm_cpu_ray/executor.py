"""vLLM's Ray executor (V2), adapted to CPU workers."""

from __future__ import annotations

import os
from typing import Any

import ray
import torch
from vllm.logger import init_logger
from vllm.v1.executor import ray_executor_v2 as ray_v2

from servebench_engine.vllm_cpu_ray.node import cpus_for_local_rank, node_binding, node_key, pin_all_threads

logger = init_logger("vllm.servebench_cpu_ray")  # under "vllm.": vLLM configures only that tree


class CpuRayWorkerProc(ray_v2.RayWorkerProc):
    def get_node_and_physical_gpu_ids(self) -> tuple[str, list[int]]:
        # Ray has no accelerator ids for CPU bundles; one pseudo id per worker (its rank)
        # lets the executor count workers per node and derive local ranks.
        return ray.get_runtime_context().get_node_id(), [int(self._init_kwargs["rank"])]

    def initialize_worker(self, local_rank: int, env_vars: dict[str, str], distributed_init_method: str,
                          driver_env_vars: dict[str, str] | None = None,
                          assigned_physical_gpu_ids: list[int] | None = None) -> None:
        # This node's core lists: the server's per-node binding, else the raylet's own.
        binding = node_binding(dict(os.environ), driver_env_vars)
        cpus = cpus_for_local_rank(binding, local_rank)
        if cpus:
            pin_all_threads(cpus)
            torch.set_num_threads(len(cpus))
        env_vars = {**env_vars, "VLLM_HOST_IP": ray.util.get_node_ip_address()}
        if binding:
            env_vars["VLLM_CPU_OMP_THREADS_BIND"] = binding  # node-local, not the driver's
        logger.info("servebench CPU Ray worker rank %s: node %s, local rank %d, cores %s",
                    self._init_kwargs["rank"], node_key(), local_rank, cpus)
        super().initialize_worker(local_rank, env_vars, distributed_init_method, driver_env_vars,
                                  assigned_physical_gpu_ids=None)


class CpuRayExecutor(ray_v2.RayExecutorV2):
    uses_ray: bool = True
    supports_pp: bool = True

    @staticmethod
    def _get_actor_resource_kwargs() -> dict[str, Any]:
        # Ray rejects "CPU" inside resources=; the placement-group bundle already
        # reserves one CPU for each worker, so the actor itself asks for nothing more.
        return {}

    def _build_runtime_env(self) -> dict:
        runtime_env = super()._build_runtime_env()
        env_vars = runtime_env.setdefault("env_vars", {})
        # Preloads (tcmalloc, libgomp) must be in place when the worker process starts.
        if os.environ.get("LD_PRELOAD"):
            env_vars.setdefault("LD_PRELOAD", os.environ["LD_PRELOAD"])
        return runtime_env

    def _init_executor(self) -> None:
        self._spread_placement_group()
        # vLLM's executor creates its actors from the module's RayWorkerProc; for the
        # duration of start-up that name refers to the CPU worker.
        original = ray_v2.RayWorkerProc
        ray_v2.RayWorkerProc = CpuRayWorkerProc
        try:
            super()._init_executor()
        finally:
            ray_v2.RayWorkerProc = original

    def _spread_placement_group(self) -> None:
        """One bundle per worker, spread over the nodes (vLLM's own group packs them).

        A node's Ray CPU count is the most workers any mode puts there, so packing would
        crowd a small mode onto one node; SPREAD puts TP=2 on two nodes, and TP2xPP2 two
        per node with each TP group inside a node (ranks are ordered by node).
        """
        parallel = self.parallel_config
        if parallel.placement_group is not None or ray.util.get_current_placement_group() is not None:
            return
        if not ray.is_initialized():
            ray.init(address=os.environ.get("RAY_ADDRESS", "auto"), runtime_env=parallel.ray_runtime_env)
        strategy = os.environ.get("SERVEBENCH_RAY_PLACEMENT", "SPREAD")
        group = ray.util.placement_group([{"CPU": 1.0}] * parallel.world_size, strategy=strategy)
        ray.get(group.ready(), timeout=300)
        parallel.placement_group = group
        logger.info("servebench: placement group of %d CPU bundles, strategy %s", parallel.world_size, strategy)
