"""Collectives over ranks that hold different numbers of rows (vLLM's all_gatherv and reduce_scatterv),
made of the equal-size ones every CPU process group has (gloo's all_gather and all_reduce, or vLLM's
shared-memory ones on one node). The MoE layers' token dispatch over data-parallel ranks needs them:
each rank gathers every rank's tokens, computes its experts' part, and keeps its own rows of the sum."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

AllGather = Callable[[torch.Tensor], torch.Tensor]   # concatenates every rank's equal-size tensor on dim 0
AllReduce = Callable[[torch.Tensor], torch.Tensor]   # sums every rank's tensor


def uneven(sizes: Sequence[int] | None) -> bool:
    return sizes is not None and any(size != sizes[0] for size in sizes)


def all_gatherv(tensor: torch.Tensor, sizes: Sequence[int] | None, rank: int, all_gather: AllGather) -> torch.Tensor:
    """Every rank's rows in rank order; `sizes[r]` rows come from rank r (None: all equal)."""
    if not uneven(sizes):
        return all_gather(tensor)
    assert sizes is not None and tensor.shape[0] == sizes[rank], (tensor.shape, sizes, rank)
    largest = max(sizes)
    padded = tensor.new_zeros((largest, *tensor.shape[1:]))
    padded[: tensor.shape[0]] = tensor
    gathered = all_gather(padded)
    return torch.cat([gathered[r * largest: r * largest + size] for r, size in enumerate(sizes)])


def reduce_scatterv(tensor: torch.Tensor, sizes: Sequence[int] | None, rank: int, world_size: int,
                    all_reduce: AllReduce) -> torch.Tensor:
    """This rank's rows of the sum over ranks: rows `sum(sizes[:rank])` on, `sizes[rank]` of them
    (None: an equal share). An all-reduce of the whole tensor, then a slice: gloo has no reduce-scatter."""
    rows = list(sizes) if sizes is not None else [tensor.shape[0] // world_size] * world_size
    assert sum(rows) == tensor.shape[0], (tensor.shape, rows)
    total = all_reduce(tensor.contiguous().clone())
    start = sum(rows[:rank])
    return total[start: start + rows[rank]].contiguous()
