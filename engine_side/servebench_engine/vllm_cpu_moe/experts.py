"""Routing a rank's tokens to the experts it holds (expert parallelism)."""

from __future__ import annotations

import torch


def local_routing(topk_ids: torch.Tensor, topk_weights: torch.Tensor,
                  expert_map: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The router's choices as this rank's kernel can take them.

    `expert_map[global id]` is the expert's slot on this rank, or -1 where another rank holds it.
    A choice of a held expert becomes its slot; any other keeps its place with slot 0 and weight 0,
    so it adds nothing here and the rank that holds it adds its part (the EP group's all-reduce
    sums them). Shapes and dtypes are kept: the kernel sees a top-k of the same size.
    """
    slots = expert_map.to(torch.long)[topk_ids.to(torch.long)]
    held = slots >= 0
    ids = torch.where(held, slots, torch.zeros_like(slots)).to(topk_ids.dtype)
    weights = torch.where(held, topk_weights, torch.zeros_like(topk_weights))
    return ids, weights
