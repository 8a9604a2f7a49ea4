"""vLLM's knobs: the engine settings a campaign may set per mode or sweep (`knobs:`), and how
each becomes a server argument or variable. The tuner (docs/tuning.md) searches over these.

`dtype` is not a knob: the correctness gate's reference is computed in the model's dtype
(`model.dtype`), and answers in another dtype would not pass it. `--async-scheduling` is not one
either: vLLM's CPU platform turns it off whatever is asked (`CpuPlatform.check_and_update_config`).
"""

from __future__ import annotations

from servebench.config.campaign import KnobValue
from servebench.cpus import format_cpu_list, parse_cpu_list
from servebench.engines.base import Knob

KNOBS: dict[str, Knob] = {
    "max_num_seqs": Knob("--max-num-seqs: sequences scheduled together (the batch)", int, minimum=1),
    "max_num_batched_tokens": Knob("--max-num-batched-tokens: tokens per scheduler step", int, minimum=1),
    "chunked_prefill": Knob("--enable-chunked-prefill / --no-enable-chunked-prefill", bool),
    "enforce_eager": Knob("--enforce-eager when true: no compiled graphs (a server starts 30-90 s sooner on "
                          "2 cores; eager PyTorch rounds differently from the compiled graphs)", bool, numerics=True),
    "kv_cache_gib": Knob("VLLM_CPU_KVCACHE_SPACE: KV cache GiB per rank (vLLM reads a whole number)", int, minimum=1),
    "kv_cache_blocks": Knob("--num-gpu-blocks-override: the KV cache as a number of blocks (128 tokens each on "
                            "CPU), whatever the GiB: a capacity in tokens for saturation studies (with "
                            "--max-model-len at most the capacity)", int, minimum=1),
    "omp_threads": Knob("threads per worker: each rank's VLLM_CPU_OMP_THREADS_BIND cut to its first N CPUs "
                        "(with omp_bind 'explicit'; 'auto' and 'nobind' leave the thread count to vLLM)",
                        int, minimum=1),
    "omp_bind": Knob("VLLM_CPU_OMP_THREADS_BIND: 'explicit' (servebench's core list per rank, the default), "
                     "'auto' (vLLM's own, per NUMA node) or 'nobind' (threads unpinned, within the node's CPUs)",
                     str, choices=("explicit", "auto", "nobind")),
}

_FLAGS = {"max_num_seqs": "--max-num-seqs", "max_num_batched_tokens": "--max-num-batched-tokens",
          "kv_cache_blocks": "--num-gpu-blocks-override"}
_SWITCHES = {"chunked_prefill": "enable-chunked-prefill"}


def knob_args(knobs: dict[str, KnobValue]) -> list[str]:
    """The server arguments of a mode's knobs (unset and null knobs: none, vLLM's default)."""
    args: list[str] = []
    for name, value in knobs.items():
        if value is None:
            continue
        if name in _FLAGS:
            args += [_FLAGS[name], str(value)]
        elif name in _SWITCHES:
            args.append(f"--{'' if value else 'no-'}{_SWITCHES[name]}")
        elif name == "enforce_eager" and value:
            args.append("--enforce-eager")
    return args


def knob_env(knobs: dict[str, KnobValue]) -> dict[str, str]:
    """The server variables of a mode's knobs."""
    value = knobs.get("kv_cache_gib")
    return {} if value is None else {"VLLM_CPU_KVCACHE_SPACE": str(int(value))}


def cut_binding(binding: str, threads: KnobValue, bind: KnobValue = None) -> str:
    """'0-3|4-7' with omp_threads=2 -> '0-1|4-5': each rank's list cut to its first N CPUs;
    omp_bind 'auto' or 'nobind' replaces the lists (vLLM's own binding, or none)."""
    if bind in ("auto", "nobind"):
        return str(bind)
    if threads is None:
        return binding
    return "|".join(format_cpu_list(parse_cpu_list(part)[:int(threads)]) for part in binding.split("|"))
