"""What a server's log must say when its two ranks sit on two Ray nodes."""

from __future__ import annotations


def assert_group_across_nodes(log: str, group: str, second_node: str, meeting_address: str) -> None:
    """Rank 1 ran on `second_node`; the group (`tp` for TP=2, `pp` for PP=2), which spans the two
    nodes, did not communicate through /dev/shm (the plugin's guard, or vLLM's own check that comes
    first where the CPU's kernels lack the shm all-reduce, as the AVX2 build on AMD EPYC does); the
    ranks met at `meeting_address`, never elsewhere."""
    assert f"servebench CPU Ray worker rank 1: node {second_node}@" in log
    guarded = f"group {group}:0 spans nodes" in log and "using gloo" in log
    assert guarded or f"CPU SHM communicator disabled for group {group}:0" in log
    assert f"distributed_init_method=tcp://{meeting_address}:" in log, "the ranks met at another address"


def assert_tp_across_nodes(tp_log: str, second_node: str, meeting_address: str) -> None:
    """A TP=2 server's log: its TP group across the two nodes (`assert_group_across_nodes`)."""
    assert_group_across_nodes(tp_log, "tp", second_node, meeting_address)
