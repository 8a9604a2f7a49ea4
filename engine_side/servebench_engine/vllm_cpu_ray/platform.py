"""The CPU platform, plus what Ray needs: a device key and an executor class."""

from __future__ import annotations

from vllm.platforms.cpu import CpuPlatform


class CpuRayPlatform(CpuPlatform):
    # Placement-group bundles become {"CPU": 1} per worker: a Ray node's CPU count is
    # the number of vLLM workers it takes.
    ray_device_key: str = "CPU"

    @classmethod
    def check_and_update_config(cls, vllm_config) -> None:
        parallel = vllm_config.parallel_config
        if parallel.distributed_executor_backend == "ray":
            # A class, not a qualname: vLLM reads supports_pp and uses_ray off the class.
            from servebench_engine.vllm_cpu_ray.executor import CpuRayExecutor

            parallel.distributed_executor_backend = CpuRayExecutor
        super().check_and_update_config(vllm_config)

    @classmethod
    def get_device_communicator_cls(cls) -> str:
        return "servebench_engine.vllm_cpu_ray.communicator.NodeAwareCpuCommunicator"
