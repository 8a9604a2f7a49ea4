"""Who sends a tree to whom in a relay, round by round (pure: no node is touched here).

Copies from the orchestrator alone grow with the nodes: every byte crosses the orchestrator's one
link once per node. In a relay every node that holds the verified tree sends it on, so the
holders double each round and N nodes are reached in ceil(log2(N + 1)) rounds (the orchestrator
sends one copy a round, `origin_copies` more where its link is wider than a node's). The plan is
made one round at a time from what is true now: a hop that failed takes its blamed node out (the
target that could not take the tree, or the source that could not send it), and the next round
gives the blamed node's target to another holder, so one bad node never costs the others their tree.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

ORIGIN = "orchestrator"  # the sender that is not a node: the orchestrator's own copy of the tree


@dataclass(frozen=True)
class RelayWidth:
    """How wide a relay's rounds are: the orchestrator's copies a round (more than one where its link is
    wider than a node's), and at most `max_hops` hops at once (None: one per holder)."""

    origin_copies: int = 1
    max_hops: int | None = None


@dataclass(frozen=True)
class Hop:
    source: str  # ORIGIN or a node that holds the verified tree
    target: str  # a node that does not hold it yet


def plan_round(holders: list[str], pending: list[str], origin_copies: int = 1,
               max_hops: int | None = None) -> list[Hop]:
    """This round's hops: each node holder sends to one pending node, the orchestrator to up to
    `origin_copies`; nodes first (their links are idle otherwise), in the given order; at most
    `max_hops` hops at once (None: as many as there are holders)."""
    if origin_copies < 1:
        raise ValueError(f"origin_copies {origin_copies}: give at least 1")
    senders = [h for h in holders if h != ORIGIN] + ([ORIGIN] * origin_copies if ORIGIN in holders else [])
    width = len(senders) if max_hops is None else min(max_hops, len(senders))
    return [Hop(source, target) for source, target in zip(senders[:width], pending)]


def rounds_needed(nodes: int, origin_copies: int = 1) -> int:
    """Rounds a relay without failures takes to reach `nodes` nodes from the orchestrator alone."""
    if origin_copies == 1:
        return math.ceil(math.log2(nodes + 1)) if nodes > 0 else 0
    return len(full_plan([f"n{i}" for i in range(nodes)], origin_copies=origin_copies))


@dataclass
class RelayState:
    """The relay as it goes: who holds the verified tree, who waits for it, who failed and why.
    `next_round` plans from it; `record` takes each hop's outcome back."""

    pending: list[str]
    holders: list[str] = field(default_factory=lambda: [ORIGIN])
    failed: dict[str, str] = field(default_factory=dict)  # node -> why it holds no tree
    origin_copies: int = 1
    max_hops: int | None = None
    rounds: int = 0

    def next_round(self) -> list[Hop]:
        hops = plan_round(self.holders, self.pending, self.origin_copies, self.max_hops)
        if hops:
            self.rounds += 1
        return hops

    def record(self, hop: Hop, blamed: str | None, reason: str = "") -> None:
        """blamed None: the target holds the verified tree now. Otherwise that node (the hop's source or
        target) is out of the relay with `reason`; a blamed source leaves its target pending for another
        holder. The orchestrator blamed is the end: nothing else could send."""
        if blamed is None:
            self.pending.remove(hop.target)
            self.holders.append(hop.target)
            return
        if blamed not in (hop.source, hop.target):
            raise ValueError(f"hop {hop.source} -> {hop.target}: {blamed} is neither end")
        if blamed == ORIGIN:
            raise RuntimeError(f"the orchestrator could not send the tree: {reason}")
        self.failed[blamed] = reason
        if blamed in self.pending:
            self.pending.remove(blamed)
        if blamed in self.holders:
            self.holders.remove(blamed)

    @property
    def done(self) -> bool:
        return not self.pending


def full_plan(targets: list[str], holders: list[str] | None = None, origin_copies: int = 1,
              max_hops: int | None = None) -> list[list[Hop]]:
    """Every round of a relay in which every hop succeeds: the best case a real relay's rounds compare with."""
    start = list(holders) if holders is not None else [ORIGIN]
    state = RelayState(pending=list(targets), holders=start, origin_copies=origin_copies, max_hops=max_hops)
    rounds = []
    while not state.done:
        hops = state.next_round()
        if not hops:
            raise ValueError(f"no holder left to send to {', '.join(state.pending)}")
        for hop in hops:
            state.record(hop, None)
        rounds.append(hops)
    return rounds
