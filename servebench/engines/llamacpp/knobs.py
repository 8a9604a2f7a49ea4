"""llama.cpp's knobs: llama-server settings a campaign may set per mode or sweep (`knobs:`).

The KV cache is `ctx_size` tokens in all (rounded up to a multiple of 256 by llama.cpp); without
`kv_unified` each of the `parallel` slots owns ctx_size / parallel of it, with it every slot draws
from one pool (the layout of campaigns/kv-saturation.yaml, where the pool overflows under load).
"""

from __future__ import annotations

from servebench.config.campaign import KnobValue
from servebench.engines.base import Knob

KNOBS: dict[str, Knob] = {
    "parallel": Knob("-np: server slots, the sequences decoded together (llama.cpp's default: auto = 4 "
                     "with a unified KV cache)", int, minimum=1),
    "ctx_size": Knob("-c: KV-cache tokens in all (0: the model's context length per slot)", int, minimum=0),
    "kv_unified": Knob("-kvu / -no-kvu: one KV pool shared by every slot", bool),
    "batch_size": Knob("-b: logical batch (tokens per decode call)", int, minimum=1),
    "ubatch_size": Knob("-ub: physical batch", int, minimum=1),
    "threads": Knob("-t and -tb: threads of the server and of every RPC worker (default: the node's CPUs)",
                    int, minimum=1),
    "flash_attn": Knob("-fa: flash attention", str, choices=("on", "off", "auto"), numerics=True),
}

_FLAGS = {"parallel": "-np", "ctx_size": "-c", "batch_size": "-b", "ubatch_size": "-ub", "flash_attn": "-fa"}


def knob_args(knobs: dict[str, KnobValue]) -> list[str]:
    """llama-server arguments for the knobs set (null: llama.cpp's default, nothing passed).
    `threads` is applied by the launch, which knows each node's CPUs."""
    args: list[str] = []
    for name, flag in _FLAGS.items():
        if knobs.get(name) is not None:
            args += [flag, str(knobs[name])]
    if knobs.get("kv_unified") is not None:
        args.append("-kvu" if knobs["kv_unified"] else "-no-kvu")
    return args
