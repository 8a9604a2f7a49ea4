"""What a TP=2 server's log must say when its two ranks sit on two Ray nodes."""

from __future__ import annotations


def assert_tp_across_nodes(tp_log: str, second_node: str, meeting_address: str) -> None:
    """Rank 1 ran on `second_node`; the TP group did not all-reduce through /dev/shm (the plugin's
    guard, or vLLM's own check that comes first where the CPU's kernels lack the shm all-reduce,
    as the AVX2 build on AMD EPYC does); the ranks met at `meeting_address`, never elsewhere."""
    assert f"servebench CPU Ray worker rank 1: node {second_node}@" in tp_log
    guarded = "group tp:0 spans nodes" in tp_log and "using gloo" in tp_log
    assert guarded or "CPU SHM communicator disabled for group tp:0" in tp_log
    assert f"distributed_init_method=tcp://{meeting_address}:" in tp_log, "the ranks met at another address"
