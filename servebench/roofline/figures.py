"""The bounds a mode's ranks put on its cells: what a decode step of the largest rank reads and what a prompt
token goes through, from the model's shape and the engine's rank layout (pure; docs/roofline.md)."""

from __future__ import annotations

from collections import Counter

from servebench.engines.base import RankShare
from servebench.planning.memory import ModelWeights, share_step_bytes, share_token_parameters, share_weight_bytes


def rank_roofline_figures(weights: ModelWeights, shares: list[RankShare]) -> dict:
    """What `cell_roofline` (docs/roofline.md) puts a mode's cells against, for its largest rank: the
    weight bytes a decode step reads (`rank_weight_bytes`), a token's KV bytes, the parameters a prompt
    token goes through (`rank_parameters`) and the most ranks holding layers on one node. Its
    `served_dtype` is the dtype the matrices are multiplied in (a W8A8 or int4 model's activations:
    bfloat16), whose peak the prefill is judged against; its weight bytes are what the format stores."""
    held = [share for share in shares if share.layers]
    largest = max(held, key=lambda s: share_weight_bytes(weights, s))
    return {"served_dtype": weights.computes_in or weights.stored_as,
            "rank_weight_bytes": share_step_bytes(weights, largest),
            "rank_kv_bytes_per_token": weights.kv_bytes_per_token(largest.layers, largest.tp),
            "rank_parameters": share_token_parameters(weights, largest),
            "ranks_per_node": max(Counter(s.node for s in held).values())}
