"""A tree on many nodes by relay: every node that holds the verified tree sends it on.

The rounds come from `relay_plan` (the holders double each round); each hop is one copy, then
the tree's digest computed on the target, as a copy from the orchestrator is verified: the first
round's hops are the orchestrator's own `put_tree`, every later hop goes straight from a node to
a node (`relay_node`: a receiver on the target, a sender on the source, run through the provider's
commands: ssh, or a Slurm step). A hop that fails names its node (the target that could not take
or verify the tree, or the source that could not read its own) and takes it out of the relay; the
next round gives that node's share to another holder, so every other node still gets the tree.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from servebench.distribution.relay_node import SOURCE_FAILED
from servebench.distribution.relay_plan import ORIGIN, Hop, RelayState, RelayWidth
from servebench.providers import Node, Provider

NODE_SOURCE = Path(__file__).with_name("relay_node.py")
ACCEPT_S = 60.0   # a receiver waits this long for its sender (which starts at the same moment)
IDLE_S = 120.0    # a hop's connection may stall this long (a slow disk, a congested link) before it fails
NODE_ERRORS = (RuntimeError, OSError, subprocess.SubprocessError)  # a node unreachable, a command timed out


@dataclass
class HopDone:
    source: str
    seconds: float


@dataclass
class RelayResult:
    """Where the tree went: node -> the hop that brought it; node -> why it holds none; the rounds run."""

    arrived: dict[str, HopDone] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    rounds: int = 0


def relay_tree(provider: Provider, nodes: list[Node], local: Path, remote: str, digest: str,
               holders: list[Node] | None = None, log: Callable[[str], None] = print,
               width: RelayWidth = RelayWidth()) -> RelayResult:
    """The tree at `local` (of sha256 tree digest `digest`) at `remote` on every node of `nodes`;
    `holders`, nodes that already hold it verified, send too and get nothing."""
    by_name = {node.name: node for node in nodes + list(holders or [])}
    held = {node.name for node in holders or []}
    state = RelayState(pending=[n.name for n in nodes if n.name not in held],
                       holders=[ORIGIN, *sorted(held)], origin_copies=width.origin_copies, max_hops=width.max_hops)
    result = RelayResult()
    tag = provider.run_id  # the scratch directories' suffix, as a copy from the orchestrator names them
    while not state.done:
        hops = state.next_round()
        with ThreadPoolExecutor(max_workers=len(hops)) as pool:
            outcomes = list(pool.map(lambda hop: run_hop(provider, hop, by_name, local, remote, digest, tag), hops))
        for hop, (blamed, reason, seconds) in zip(hops, outcomes):
            state.record(hop, blamed, reason)
            if blamed is None:
                result.arrived[hop.target] = HopDone(hop.source, seconds)
                log(f"{local.name} relayed {hop.source} -> {hop.target} in {seconds:.1f} s (round {state.rounds})")
            else:
                log(f"{local.name}: hop {hop.source} -> {hop.target} failed, {blamed} left out: {reason}")
    result.failed, result.rounds = dict(state.failed), state.rounds
    return result


def run_hop(provider: Provider, hop: Hop, by_name: dict[str, Node], local: Path, remote: str, digest: str,
            tag: str) -> tuple[str | None, str, float]:
    """One hop and its check: (the node to blame or None, why, seconds)."""
    started = time.monotonic()
    target = by_name[hop.target]
    try:
        if hop.source == ORIGIN:
            provider.put_tree(target, local, remote)
        else:
            failure = node_hop(provider, by_name[hop.source], target, remote, tag)
            if failure is not None:
                return failure[0], failure[1], time.monotonic() - started
        found = provider.tree_digest(target, remote)
    except NODE_ERRORS as exc:
        return hop.target, f"{type(exc).__name__}: {str(exc).strip()[-600:]}", time.monotonic() - started
    if found != digest:
        reason = f"the copy at {remote} does not verify (sha256 {found} there, {digest} here)"
        return hop.target, reason, time.monotonic() - started
    return None, "", round(time.monotonic() - started, 2)


def node_hop(provider: Provider, source: Node, target: Node, remote: str, tag: str) -> tuple[str, str] | None:
    """The tree from `source` to `target` directly: a receiver and a sender started together (None: done)."""
    prepared = provider.run(target, node_argv(provider, target, "prepare", {"target": remote, "tag": tag}))
    if prepared.returncode != 0:
        return target.name, f"the target cannot take the tree: {last_words(prepared.stderr)}"
    port = provider.free_port(target)
    token = secrets.token_hex(16)
    receive = {"address": target.address, "port": port, "token": token, "target": remote, "tag": tag,
               "accept_s": ACCEPT_S, "idle_s": IDLE_S}
    send = {"address": target.address, "port": port, "token": token, "source": remote,
            "connect_s": ACCEPT_S, "idle_s": IDLE_S}
    with ThreadPoolExecutor(max_workers=2) as pool:
        receiving = pool.submit(provider.run, target, node_argv(provider, target, "receive", receive))
        sending = pool.submit(provider.run, source, node_argv(provider, source, "send", send))
        sent, received = sending.result(), receiving.result()
    if sent.returncode == SOURCE_FAILED:
        return source.name, f"the source could not send: {last_words(sent.stderr)}"
    if sent.returncode != 0 or received.returncode != 0:
        return target.name, (f"receiver exit {received.returncode}: {last_words(received.stderr)}; "
                             f"sender on {source.name} exit {sent.returncode}: {last_words(sent.stderr)}")
    return None


def node_argv(provider: Provider, node: Node, action: str, arguments: dict) -> list[str]:
    """The hop's end on a node: its python3 runs relay_node.py's source, given on the command line."""
    return [provider.node_python(node), "-c", NODE_SOURCE.read_text(), action, json.dumps(arguments)]


def last_words(text: str | None) -> str:
    return (text or "").strip().splitlines()[-1][-400:] if (text or "").strip() else "(nothing on stderr)"
