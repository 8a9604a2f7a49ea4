"""The relay's plan (who sends to whom, round by round, and the plan made again around a failed
node) and one hop's two ends run here on the loopback address (servebench/distribution/relay*.py)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from servebench.distribution.relay_node import SOURCE_FAILED, TARGET_FAILED
from servebench.distribution.relay_plan import ORIGIN, Hop, RelayState, full_plan, plan_round, rounds_needed
from servebench.providers import node_tools

NODE_SOURCE = Path(__file__).resolve().parents[2] / "servebench" / "distribution" / "relay_node.py"


def names(count: int) -> list[str]:
    return [f"h{i}" for i in range(1, count + 1)]


@pytest.mark.parametrize("count", [1, 2, 3, 4, 7, 8, 16, 31, 32, 64])
def test_every_node_gets_the_tree_once_in_ceil_log2_rounds(count):
    rounds = full_plan(names(count))
    targets = [hop.target for hops in rounds for hop in hops]
    assert sorted(targets) == sorted(names(count))  # each node exactly once
    assert len(rounds) == math.ceil(math.log2(count + 1)) == rounds_needed(count)
    held = {ORIGIN}
    for hops in rounds:
        assert all(hop.source in held for hop in hops)             # only holders send
        assert len({hop.source for hop in hops}) == len(hops)       # one copy each a round
        held |= {hop.target for hop in hops}


def test_the_holders_double_each_round():
    rounds = full_plan(names(32))
    assert [len(hops) for hops in rounds] == [1, 2, 4, 8, 16, 1]
    assert rounds[0] == [Hop(ORIGIN, "h1")]
    assert rounds[1] == [Hop("h1", "h2"), Hop(ORIGIN, "h3")]  # nodes first, then the orchestrator


def test_the_orchestrator_sends_more_than_one_where_its_link_is_wider():
    rounds = full_plan(names(32), origin_copies=4)
    assert [len(hops) for hops in rounds] == [4, 8, 16, 4]
    assert rounds_needed(32, origin_copies=4) == 4
    with pytest.raises(ValueError):
        plan_round([ORIGIN], ["h1"], origin_copies=0)


def test_nodes_that_already_hold_the_tree_send_from_the_first_round():
    rounds = full_plan(["h3", "h4", "h5", "h6"], holders=[ORIGIN, "h1", "h2"])
    assert rounds[0] == [Hop("h1", "h3"), Hop("h2", "h4"), Hop(ORIGIN, "h5")]
    assert len(rounds) == 2


def test_at_most_max_hops_at_once():
    rounds = full_plan(names(32), max_hops=4)
    assert max(len(hops) for hops in rounds) == 4
    assert sorted(hop.target for hops in rounds for hop in hops) == sorted(names(32))


def test_a_failed_target_is_named_and_its_share_goes_to_another_holder():
    state = RelayState(pending=names(8))
    first = state.next_round()
    state.record(first[0], None)                          # h1 holds it
    second = state.next_round()
    assert second == [Hop("h1", "h2"), Hop(ORIGIN, "h3")]
    state.record(second[0], "h2", "tar on the target exit 2")   # h2 could not take it
    state.record(second[1], None)
    assert state.failed == {"h2": "tar on the target exit 2"}
    third = state.next_round()
    assert {hop.source for hop in third} == {"h1", "h3", ORIGIN}   # h2 never sends
    assert "h2" not in {hop.target for hop in third}
    while not state.done:
        for hop in third:
            state.record(hop, None)
        third = state.next_round()
    assert sorted(state.holders) == sorted([ORIGIN, *(n for n in names(8) if n != "h2")])
    assert state.rounds <= math.ceil(math.log2(8 + 1)) + 1


def test_a_failed_source_leaves_its_target_pending_for_the_next_round():
    state = RelayState(pending=names(4), holders=[ORIGIN, "h9"])
    hops = state.next_round()
    assert hops[0] == Hop("h9", "h1")
    state.record(hops[0], "h9", "the source could not send")
    state.record(hops[1], None)
    assert "h1" in state.pending and "h9" not in state.holders and state.failed == {"h9": "the source could not send"}
    assert Hop("h2", "h1") in state.next_round()


def test_a_blame_must_be_one_end_of_the_hop_and_the_orchestrator_failing_ends_the_relay():
    state = RelayState(pending=names(2))
    hop = state.next_round()[0]
    with pytest.raises(ValueError):
        state.record(hop, "h2", "x")
    with pytest.raises(RuntimeError, match="orchestrator"):
        state.record(hop, ORIGIN, "tar here failed")


def test_a_relay_with_no_holder_left_stops_saying_so():
    with pytest.raises(ValueError, match="no holder"):
        full_plan(["h1"], holders=[])


# ---------------------------------------------------------------------------- one hop, on the loopback address

def hop_end(action: str, arguments: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", NODE_SOURCE.read_text(), action, json.dumps(arguments)],
                          capture_output=True, text=True, timeout=60)


def free_port() -> int:
    return node_tools.free_port("127.0.0.1")


def a_tree(root: Path) -> Path:
    tree = root / "tree"
    (tree / "bin").mkdir(parents=True)
    (tree / "bin" / "run").write_text("#!/bin/sh\necho hi\n")
    (tree / "bin" / "run").chmod(0o755)
    (tree / "weights.bin").write_bytes(bytes(range(256)) * 8192)
    (tree / "link").symlink_to("weights.bin")
    return tree


def relayed(tmp_path: Path, token_sent: str, source: Path) -> tuple[subprocess.CompletedProcess, ...]:
    port, target = free_port(), tmp_path / "there" / "tree"
    target.parent.mkdir()
    results: dict[str, subprocess.CompletedProcess] = {}
    receiver = threading.Thread(target=lambda: results.setdefault("received", hop_end("receive", {
        "address": "127.0.0.1", "port": port, "token": "a" * 32, "target": str(target), "tag": "t",
        "accept_s": 3.0, "idle_s": 10.0})))
    receiver.start()
    results["sent"] = hop_end("send", {"address": "127.0.0.1", "port": port, "token": token_sent,
                                       "source": str(source), "connect_s": 3.0, "idle_s": 10.0})
    receiver.join()
    return results["sent"], results["received"]


def test_a_hop_arrives_whole_and_renamed_into_place(tmp_path):
    tree = a_tree(tmp_path)
    sent, received = relayed(tmp_path, "a" * 32, tree)
    assert (sent.returncode, received.returncode) == (0, 0), sent.stderr + received.stderr
    target = tmp_path / "there" / "tree"
    assert node_tools.tree_digest(str(target)) == node_tools.tree_digest(str(tree))
    assert [p.name for p in target.parent.iterdir()] == ["tree"]   # no scratch directory left


def test_a_sender_without_the_token_is_refused_and_the_target_keeps_nothing(tmp_path):
    sent, received = relayed(tmp_path, "b" * 32, a_tree(tmp_path))
    assert received.returncode == TARGET_FAILED and "no sender came" in received.stderr
    assert sent.returncode != 0
    assert not (tmp_path / "there" / "tree").exists()


def test_a_source_without_the_tree_blames_the_source(tmp_path):
    sent = hop_end("send", {"address": "127.0.0.1", "port": free_port(), "token": "a" * 32,
                            "source": str(tmp_path / "missing"), "connect_s": 1.0, "idle_s": 1.0})
    assert sent.returncode == SOURCE_FAILED and "not a directory on the source" in sent.stderr
