"""vLLM CPU platform plugin that makes `--distributed-executor-backend ray` work on CPU.

Upstream vLLM refuses Ray on CPU (its CPU platform has no Ray device key). This plugin
changes nothing in vLLM's files; it uses vLLM's extension points:
- a platform (entry point `vllm.platform_plugins`) that subclasses the CPU platform with
  Ray device key "CPU" and swaps the "ray" backend for an executor *class*
  (platform.py);
- an executor subclassing vLLM's Ray executor: actor resources Ray accepts, a pseudo
  device id per worker, all worker threads pinned to the node's core list, VLLM_HOST_IP
  per worker (executor.py);
- a CPU communicator that uses shared memory only inside one node and gloo when a group
  spans nodes (communicator.py).
It activates wherever vLLM would pick its CPU platform, and behaves as that platform
unless the ray backend is asked for.
"""

PLATFORM = "servebench_engine.vllm_cpu_ray.platform.CpuRayPlatform"


def register() -> str | None:
    from vllm.platforms import cpu_platform_plugin

    return PLATFORM if cpu_platform_plugin() is not None else None
