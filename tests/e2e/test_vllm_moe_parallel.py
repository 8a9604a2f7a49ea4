"""servebench's fill-ins for what vLLM 0.32's CPU backend lacks to serve MoE models in expert and data
parallel modes (engine_side/servebench_engine/vllm_cpu_moe): the routing of a rank's tokens to the experts it
holds, and the gather/reduce-scatter over ranks of uneven row counts, run with the engine venv's torch and
two real gloo processes. The served proof is tests/unit/test_vllm_dp_modes.py's end-to-end DP=2 x EP run."""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

import pytest

from servebench.builds.venv import ensure_build
from servebench.engines import get_engine
from servebench.engines.vllm.spec import VllmEngineSpec
from servebench.paths import ENGINE_SOURCE_DIR, cache_dir

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module")
def engine_python() -> str:
    """The engine venv's python (built on first use, as a campaign would)."""
    spec = VllmEngineSpec()
    return ensure_build(get_engine("vllm").build_recipe(spec), cache_dir(), log=lambda _: None).python


def run(python: str, script: str, tmp_path: Path) -> str:
    """Run `script` with the engine venv's python against this checkout's engine-side source."""
    path = tmp_path / "check.py"
    path.write_text(textwrap.dedent(script))
    done = subprocess.run([python, str(path)], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env={"PYTHONPATH": str(ENGINE_SOURCE_DIR), "PATH": "/usr/bin:/bin",
                               # importing vLLM makes torch's inductor cache, by default in /tmp
                               "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")})
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_a_rank_computes_only_the_experts_it_holds(engine_python, tmp_path):
    out = run(engine_python, """
        import torch
        from servebench_engine.vllm_cpu_moe.experts import local_routing
        # 4 experts, this rank holds global experts 2 and 3 in its slots 0 and 1
        expert_map = torch.tensor([-1, -1, 0, 1], dtype=torch.int32)
        ids = torch.tensor([[0, 2], [3, 1], [2, 3]], dtype=torch.int32)
        weights = torch.tensor([[0.75, 0.25], [0.625, 0.375], [0.5, 0.5]])
        local_ids, local_weights = local_routing(ids, weights, expert_map)
        assert local_ids.dtype == ids.dtype and local_weights.dtype == weights.dtype
        assert local_ids.tolist() == [[0, 0], [1, 0], [0, 1]], local_ids
        assert local_weights.tolist() == [[0.0, 0.25], [0.625, 0.0], [0.5, 0.5]], local_weights
        print("ok")
    """, tmp_path)
    assert out.strip() == "ok"


def test_the_patched_apply_passes_local_ids_and_no_expert_map(engine_python, tmp_path):
    out = run(engine_python, """
        import torch
        from servebench_engine.vllm_cpu_moe import register, with_local_routing
        seen = {}

        def apply(self, output, hidden_states, w1, w2, topk_weights, topk_ids, activation, global_num_experts,
                  expert_map, a1q_scale, a2_scale, workspace13, workspace2, expert_tokens_meta,
                  apply_router_weight_on_input):
            seen.update(ids=topk_ids.tolist(), weights=topk_weights.tolist(), expert_map=expert_map)

        patched = with_local_routing(apply)
        args = dict(output=None, hidden_states=None, w1=None, w2=None, activation=None, global_num_experts=4,
                    a1q_scale=None, a2_scale=None, workspace13=None, workspace2=None, expert_tokens_meta=None,
                    apply_router_weight_on_input=False)
        patched(None, topk_weights=torch.tensor([[0.75, 0.25]]), topk_ids=torch.tensor([[1, 2]]),
                expert_map=torch.tensor([0, 1, -1, -1]), **args)
        assert seen == {"ids": [[1, 0]], "weights": [[0.75, 0.0]], "expert_map": None}, seen
        patched(None, topk_weights=torch.tensor([[0.75, 0.25]]), topk_ids=torch.tensor([[1, 2]]), expert_map=None,
                **args)
        assert seen["ids"] == [[1, 2]] and seen["weights"] == [[0.75, 0.25]], seen   # no EP: untouched
        register()
        register()   # vLLM loads plugins in every process, maybe more than once: wrapped once
        from vllm.model_executor.layers.fused_moe.experts import cpu_moe
        assert cpu_moe.CPUUnquantizedExperts.apply._servebench_expert_map
        assert cpu_moe.CPUUnquantizedExperts.apply.__wrapped__.__name__ == "apply"
        assert not hasattr(cpu_moe.CPUUnquantizedExperts.apply.__wrapped__, "__wrapped__")
        print("ok")
    """, tmp_path)
    assert out.strip() == "ok"


def test_uneven_gather_and_reduce_scatter_over_two_gloo_ranks(engine_python, tmp_path):
    out = run(engine_python, f"""
        import torch, torch.distributed as dist, torch.multiprocessing as mp
        from servebench_engine.vllm_cpu_moe.collectives import all_gatherv, reduce_scatterv

        def rank_main(rank):
            dist.init_process_group("gloo", init_method="file://{tmp_path}/store", rank=rank, world_size=2)
            sizes = [3, 1]
            mine = torch.arange(sizes[rank] * 2, dtype=torch.float32).reshape(sizes[rank], 2) + 100 * rank

            def gather(t):
                out = [torch.empty_like(t) for _ in range(2)]
                dist.all_gather(out, t)
                return torch.cat(out)

            def reduce(t):
                dist.all_reduce(t)
                return t

            everything = all_gatherv(mine, sizes, rank, gather)
            assert everything.tolist() == [[0, 1], [2, 3], [4, 5], [100, 101]], everything
            ids = all_gatherv(torch.tensor([[rank]] * sizes[rank], dtype=torch.int32), sizes, rank, gather)
            assert ids.dtype == torch.int32 and ids.flatten().tolist() == [0, 0, 0, 1], ids
            # every rank's partial output for all four rows; each keeps its own rows of the sum
            partial = torch.full((4, 2), float(rank + 1))
            mine_of_sum = reduce_scatterv(partial, sizes, rank, 2, reduce)
            assert mine_of_sum.tolist() == [[3.0, 3.0]] * sizes[rank], mine_of_sum
            assert partial.tolist() == [[float(rank + 1)] * 2] * 4       # the input is left as it was
            even = all_gatherv(torch.full((2, 1), float(rank)), [2, 2], rank, gather)
            assert even.flatten().tolist() == [0, 0, 1, 1]
            dist.destroy_process_group()

        if __name__ == "__main__":
            mp.spawn(rank_main, nprocs=2)
            print("ok")
    """, tmp_path)
    assert out.strip().endswith("ok")
