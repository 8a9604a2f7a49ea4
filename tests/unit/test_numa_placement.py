"""NUMA-aware ranks: each vLLM rank's cores inside one NUMA node wherever the node's ranks can be, a rank that
must span NUMA nodes named with the nodes it spans; the published layouts of A64FX (4 x 12), Graviton3
(1 x 64), Grace (1 x 72) and a two-socket x86 node taken as data; the plan prints the binding; bfloat16 is
refused on an Arm target without bf16 instructions."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from servebench.campaign.loading import SpecError, parse_campaign
from servebench.cpus import format_cpu_list, parse_cpu_list
from servebench.engines.vllm.placement import node_bindings, numa_notes
from servebench.platform.numa import PUBLISHED, describe, rank_cores, this_host_layout
from servebench.platform.targets import profile

ROOT = Path(__file__).resolve().parents[2]
A64FX = PUBLISHED["a64fx"]
# two sockets of 32 cores with hyperthreads, numbered as Linux numbers an Intel node: siblings 64 apart
TWO_SOCKET_X86 = [parse_cpu_list("0-31,64-95"), parse_cpu_list("32-63,96-127")]


def cores(ranks) -> list[tuple[str, tuple[int, ...]]]:
    return [(format_cpu_list(rank.cpus), rank.numa_nodes) for rank in ranks]


def test_a64fx_tp4_is_one_rank_per_cmg_and_tp8_two():
    assert cores(rank_cores(list(range(48)), 4, A64FX)) == [
        ("0-11", (0,)), ("12-23", (1,)), ("24-35", (2,)), ("36-47", (3,))]
    tp8 = rank_cores(list(range(48)), 8, A64FX)
    assert [rank.numa_nodes for rank in tp8] == [(0,), (0,), (1,), (1,), (2,), (2,), (3,), (3,)]
    assert all(len(rank.cpus) == 6 and not rank.spans for rank in tp8)


def test_fewer_ranks_than_numa_nodes_span_whole_nodes_and_say_so():
    tp2 = rank_cores(list(range(48)), 2, A64FX)
    assert cores(tp2) == [("0-23", (0, 1)), ("24-47", (2, 3))]
    line = describe(tp2, A64FX)
    assert line.startswith("4 NUMA nodes: ") and "spans NUMA 0+1, memory bound to NUMA 0" in line
    assert cores(rank_cores(list(range(48)), 1, A64FX)) == [("0-47", (0, 1, 2, 3))]


def test_ranks_share_numa_nodes_in_proportion_and_never_straddle_one():
    assert [rank.numa_nodes for rank in rank_cores(list(range(48)), 5, A64FX)] == [(0,), (0,), (1,), (2,), (3,)]
    straddling = rank_cores(list(range(6, 18)), 2, A64FX)          # a node's CPUs 6-17: half in CMG 0, half in 1
    assert cores(straddling) == [("6-11", (0,)), ("12-17", (1,))]


def test_single_numa_node_chips_split_as_one_group():
    assert cores(rank_cores(list(range(64)), 4, PUBLISHED["graviton3"])) == [
        ("0-15", (0,)), ("16-31", (0,)), ("32-47", (0,)), ("48-63", (0,))]
    grace = rank_cores(list(range(72)), 2, PUBLISHED["grace"])
    assert cores(grace) == [("0-35", (0,)), ("36-71", (0,))] and describe(grace, PUBLISHED["grace"]) == ""


def test_a_two_socket_node_keeps_each_rank_on_its_socket_with_its_hyperthreads():
    cpus = list(range(128))
    tp2 = rank_cores(cpus, 2, TWO_SOCKET_X86)
    assert cores(tp2) == [("0-31,64-95", (0,)), ("32-63,96-127", (1,))]   # not 0-63 | 64-127, which spans both
    assert [rank.numa_nodes for rank in rank_cores(cpus, 4, TWO_SOCKET_X86)] == [(0,), (0,), (1,), (1,)]


def test_an_unknown_layout_or_an_oversubscribed_mode_splits_as_before():
    assert cores(rank_cores([0, 1, 2, 3], 2, [])) == [("0-1", ()), ("2-3", ())]
    assert cores(rank_cores([0], 2, A64FX)) == [("0", (0,)), ("0", (0,))]


def test_the_vllm_binding_and_the_plan_note_follow_the_layout():
    binds = node_bindings("mp", 4, ["a64fx1"], [list(range(48))], None, [A64FX])
    assert binds == {"a64fx1": "0-11|12-23|24-35|36-47"}
    notes = numa_notes("ray", 4, ["n1", "n2"], [list(range(48)), list(range(48))], None, [A64FX, A64FX])
    per_node = ("4 NUMA nodes: rank 0 cores 0-23 (spans NUMA 0+1, memory bound to NUMA 0); "
                "rank 1 cores 24-47 (spans NUMA 2+3, memory bound to NUMA 2)")   # Ray spreads 2 ranks a node
    assert notes == [f"node n1: {per_node}", f"node n2: {per_node}"]


def test_this_hosts_layout_is_read_from_sys(tmp_path):
    for index, cpus in enumerate(["0-3", "4-7"]):
        (tmp_path / f"node{index}").mkdir()
        (tmp_path / f"node{index}" / "cpulist").write_text(cpus + "\n")
    assert this_host_layout(tmp_path) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert this_host_layout(tmp_path / "none") == []


CAMPAIGN = """
name: numa
provider:
  kind: ssh
  hosts:
    - {name: a64fx1, address: 198.18.0.1, cpus: "0-47", numa: "0-11|12-23|24-35|36-47"}
engine: {kind: vllm}
model: {generate: tiny-llama}
modes:
  - {name: tp4, tp: 4}
  - {name: tp2, tp: 2}
load: {clients: [1], requests: 4, input_len: 8, output_len: 4}
"""


def test_the_plan_binds_by_a_declared_layout_and_names_what_spans(tmp_path):
    campaign = tmp_path / "numa.yaml"
    campaign.write_text(CAMPAIGN)
    done = subprocess.run([sys.executable, "-m", "servebench", "plan", str(campaign)], capture_output=True,
                          text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "VLLM_CPU_OMP_THREADS_BIND='0-11|12-23|24-35|36-47'" in done.stdout       # TP=4: one rank per CMG
    assert ("note     node a64fx1: 4 NUMA nodes: rank 0 cores 0-11 (NUMA 0); rank 1 cores 12-23 (NUMA 1); "
            "rank 2 cores 24-35 (NUMA 2); rank 3 cores 36-47 (NUMA 3)") in done.stdout
    assert "rank 0 cores 0-23 (spans NUMA 0+1, memory bound to NUMA 0)" in done.stdout  # TP=2 must span


def test_a_declared_layout_with_a_cpu_in_two_numa_nodes_is_refused():
    with pytest.raises(SpecError, match=r"numa.*CPUs \[11\] are in two NUMA nodes"):
        parse_campaign(CAMPAIGN.replace('numa: "0-11|12-23', 'numa: "0-11|11-23'))


def test_grace_and_graviton4_profiles_and_bf16_refused_where_the_target_has_none():
    assert {"sve2", "bf16"} <= set(profile("grace").features) and profile("graviton4").arch == "aarch64"
    from servebench.planning.feasibility import no_bf16_target_problem

    assert no_bf16_target_problem("graviton3", "bfloat16") is None
    assert no_bf16_target_problem("a64fx", "float32") is None
    refused = no_bf16_target_problem("a64fx", "bfloat16")
    assert refused is not None and "no bf16 instructions" in refused and "float16 and float32" in refused
    assert "no bf16 instructions" in (no_bf16_target_problem("graviton2", "bfloat16") or "")
