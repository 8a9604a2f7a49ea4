"""Per-node work, at most the campaign's `hosts_at_once` nodes at a time.

A stage that does the same short thing on every node (an inventory, a presence check, stopping a
sampler, cleaning a run's directory) costs one node's time on one node and N of them on N when
done in turn; done all at once it holds N ssh sessions or Slurm steps and N threads of the
orchestrator. The provider block's `hosts_at_once` bounds it between the two (docs/scale.md).
Every node's work ends before a failure is raised, so one node that fails never leaves the others
half done, and the failure names its node."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Generic, TypeVar, cast

from servebench.config.campaign import ProviderSpecBase

Item = TypeVar("Item")
Result = TypeVar("Result")

DEFAULT_HOSTS_AT_ONCE = ProviderSpecBase.model_fields["hosts_at_once"].default


@dataclass(frozen=True)
class Outcome(Generic[Item, Result]):
    """What one node's work gave: its result, or the error it raised."""

    item: Item
    result: Result | None = None
    error: BaseException | None = None


def campaign_block(provider: object) -> ProviderSpecBase | None:
    """The campaign's `provider:` block the provider was made from (None: one made without a block)."""
    spec = getattr(provider, "spec", None)
    return spec if isinstance(spec, ProviderSpecBase) else None


def hosts_at_once(provider: object) -> int:
    """How many nodes the provider's campaign block lets a per-node stage work on at once."""
    block = campaign_block(provider)
    return block.hosts_at_once if block is not None else DEFAULT_HOSTS_AT_ONCE


def outcomes(items: Sequence[Item], work: Callable[[Item], Result], limit: int) -> list[Outcome[Item, Result]]:
    """`work(item)` for every item, at most `limit` at a time; each outcome in the items' order."""
    def attempt(item: Item) -> Outcome[Item, Result]:
        try:
            return Outcome(item, work(item))
        except Exception as error:  # kept for the caller, who decides what one node's failure means
            return Outcome(item, error=error)

    if len(items) <= 1 or limit <= 1:
        return [attempt(item) for item in items]
    with ThreadPoolExecutor(max_workers=min(limit, len(items))) as pool:
        return list(pool.map(attempt, items))


def each_node(items: Sequence[Item], work: Callable[[Item], Result], limit: int,
              name: Callable[[Item], str] = str) -> list[Result]:
    """`work(item)` for every item, at most `limit` at a time; the results in the items' order. Once every
    item's work has ended, the first failure is raised as itself (a caller's `except` for a provider's own
    error still catches it), the other nodes' failures added to it as notes, each named by `name(item)`."""
    done = outcomes(items, work, limit)
    failed = [o for o in done if o.error is not None]
    if failed:
        first = cast(BaseException, failed[0].error)
        for other in failed[1:]:
            first.add_note(f"also {name(other.item)}: {other.error}")
        raise first
    return [cast(Result, o.result) for o in done]
