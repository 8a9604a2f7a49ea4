"""Model shapes by name: parameter counts, bytes per rank and KV bytes per token from the shape alone."""

from __future__ import annotations

import pytest

from servebench.models.shapes import PRESETS, PUBLISHED_PARAMETERS, preset


@pytest.mark.parametrize("name", sorted(PUBLISHED_PARAMETERS))
def test_presets_have_the_published_parameter_counts(name):
    assert abs(PRESETS[name].parameters() / PUBLISHED_PARAMETERS[name] - 1) < 0.01


def test_kv_bytes_per_token_follow_the_shape():
    # 2 (K and V) x 32 layers x 8 KV heads x 128 head dim x 2 bytes: Llama-3.1-8B's 128 KiB per token in bf16
    assert preset("llama-3.1-8b").kv_bytes_per_token("bfloat16") == 131072
    assert preset("llama-2-7b").kv_bytes_per_token("float32") == 2 * 32 * 32 * 128 * 4


def test_ranks_split_weights_and_kv():
    shape = preset("llama-3.1-8b")
    whole = shape.rank_weight_bytes("bfloat16")
    assert whole == shape.weight_bytes("bfloat16")
    assert 0.49 < shape.rank_weight_bytes("bfloat16", tp=2) / whole < 0.51
    assert 0.49 < shape.rank_weight_bytes("bfloat16", pp=2) / whole < 0.51
    assert shape.rank_kv_bytes_per_token("bfloat16", tp=2) * 2 == shape.kv_bytes_per_token("bfloat16")
    # more TP ranks than KV heads: each rank keeps a whole KV head
    assert preset("qwen2-1.5b").rank_kv_bytes_per_token("bfloat16", tp=4) == 2 * 28 * 1 * 128 * 2


def test_overrides_and_unknown_names():
    cut = preset("llama-3.1-8b").with_overrides(layers=4, heads=None)
    assert cut.layers == 4 and cut.heads == 32
    with pytest.raises(ValueError, match="no model preset 'llama-9'"):
        preset("llama-9")
