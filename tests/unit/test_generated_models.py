"""Generated models of a preset's shape with random weights: the Hugging Face directory
(servebench/models/hf_model.py), read back by our own header reader, and once by the vLLM venv's
safetensors, torch and transformers."""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

import numpy as np
import pytest

from servebench.config.campaign import GeneratedModelSpec
from servebench.models import hf_model
from servebench.models.artifact import GENERATED_HF, ensure_model
from servebench.paths import cache_dir

# the real shapes cut small: what differs between them (biases, ties, GQA, rope scaling) stays
SMALL = {"layers": 1, "hidden": 64, "heads": 4, "kv_heads": 2, "intermediate": 128, "vocab_size": 2000}


def small_spec(preset: str, **overrides) -> GeneratedModelSpec:
    return GeneratedModelSpec.model_validate({"generate": preset, **SMALL, **overrides})


def weight_bytes(directory: Path) -> bytes:
    return b"".join(path.read_bytes() for path in sorted(directory.glob("*.safetensors")))


def headers(directory: Path) -> dict[str, tuple[str, dict]]:
    """Every tensor's header entry, with the file it is in."""
    entries = {}
    for path in sorted(directory.glob("*.safetensors")):
        header = hf_model.read_safetensors_header(path)
        assert header.pop("__metadata__") == {"format": "pt"}
        entries.update({name: (path.name, entry) for name, entry in header.items()})
    return entries


def test_hf_bfloat16_rounds_to_nearest_even():
    values = np.array([1.0, -2.0, 1 + 2**-8, 1 + 3 * 2**-8, 1 + 2**-8 + 2**-20, 0.0, 3.0e38], dtype=np.float32)
    # exact; a tie to the even 0x3F80; a tie up to the even 0x3F82; just above a tie: up; zero; large stays finite
    assert hf_model.bfloat16_bits(values).tolist() == [0x3F80, 0xC000, 0x3F80, 0x3F82, 0x3F81, 0, 0x7F62]


@pytest.mark.parametrize("dtype, code, size", [("auto", "BF16", 2), ("float32", "F32", 4)])
def test_hf_safetensors_header_has_contiguous_offsets_shapes_and_dtype(tmp_path, dtype, code, size):
    spec = small_spec("qwen2-1.5b", dtype=dtype)
    hf_model.write_hf_model(spec, tmp_path / "model", chunk_values=1000)
    path = tmp_path / "model" / "model.safetensors"
    (length,) = np.frombuffer(path.read_bytes()[:8], dtype="<u8")
    assert length % 8 == 0
    entries = hf_model.read_safetensors_header(path)
    del entries["__metadata__"]
    offset = 0
    for plan in hf_model.tensor_plans(spec):  # in order, back to back, each its shape's bytes
        entry = entries.pop(plan.name)
        assert (entry["dtype"], tuple(entry["shape"])) == (code, plan.shape)
        assert entry["data_offsets"] == [offset, offset + plan.values * size]
        offset += plan.values * size
    assert not entries and path.stat().st_size == 8 + length + offset


def test_hf_same_seed_same_bytes_whatever_the_chunks_another_seed_other_bytes(tmp_path):
    spec = small_spec("llama-3.1-8b")
    for name, chunk in (("a", 1 << 22), ("b", 777)):
        hf_model.write_hf_model(spec, tmp_path / name, chunk_values=chunk)
    hf_model.write_hf_model(spec.model_copy(update={"seed": 1}), tmp_path / "c")
    assert weight_bytes(tmp_path / "a") == weight_bytes(tmp_path / "b") != weight_bytes(tmp_path / "c")
    assert (tmp_path / "a" / "tokenizer.json").read_bytes() == (tmp_path / "c" / "tokenizer.json").read_bytes()


def test_hf_a_tensor_is_its_own_stream_and_normal_at_the_init_std():
    """Seeded by (seed, name): a tensor's values do not depend on the others (a layer more or less)."""
    plan = hf_model.TensorPlan("model.layers.0.mlp.up_proj.weight", (256, 1024))
    values = np.concatenate(list(hf_model.tensor_chunks(0, plan)))
    assert abs(values.std() - hf_model.INIT_STD) < 0.001 and abs(values.mean()) < 0.001
    other = hf_model.TensorPlan("model.layers.1.mlp.up_proj.weight", (256, 1024))
    assert not np.array_equal(values, np.concatenate(list(hf_model.tensor_chunks(0, other))))


@pytest.mark.parametrize("preset", ["llama-3.1-8b", "qwen2-1.5b"])
@pytest.mark.parametrize("tie", [False, True])
def test_hf_tensors_are_the_shapes_parameters_by_their_transformers_names(tmp_path, preset, tie):
    spec = small_spec(preset, tie_embeddings=tie)
    hf_model.write_hf_model(spec, tmp_path / "model")
    entries = headers(tmp_path / "model")
    layer = ["input_layernorm.weight", "post_attention_layernorm.weight", "self_attn.o_proj.weight",
             *(f"self_attn.{p}_proj.weight" for p in "qkv"), *(f"mlp.{p}_proj.weight" for p in ("gate", "up", "down"))]
    if preset == "qwen2-1.5b":
        layer += [f"self_attn.{p}_proj.bias" for p in "qkv"]
    names = {"model.embed_tokens.weight", "model.norm.weight", *(f"model.layers.0.{n}" for n in layer)}
    assert set(entries) == names | (set() if tie else {"lm_head.weight"})
    assert sum(int(np.prod(entry["shape"])) for _, entry in entries.values()) == spec.shape().parameters()
    assert entries["model.layers.0.self_attn.k_proj.weight"][1]["shape"] == [2 * 16, 64]  # kv_heads x head_dim
    config = json.loads((tmp_path / "model" / "config.json").read_text())
    assert config["tie_word_embeddings"] is tie and config["vocab_size"] == 2000
    assert config["torch_dtype"] == "bfloat16" and config["rope_theta"] == spec.rope_theta


def test_hf_configs_are_each_architectures_own():
    llama = hf_model.hf_config(small_spec("llama-3.1-8b"))
    assert (llama["architectures"], llama["model_type"], llama["attention_bias"]) == (
        ["LlamaForCausalLM"], "llama", False)
    assert llama["rope_scaling"]["rope_type"] == "llama3" and "head_dim" not in llama
    assert hf_model.hf_config(small_spec("llama-3.2-1b", hidden=128))["head_dim"] == 64
    qwen = hf_model.hf_config(small_spec("qwen2-1.5b"))
    assert (qwen["architectures"], qwen["model_type"], qwen["rms_norm_eps"]) == (["Qwen2ForCausalLM"], "qwen2", 1e-6)
    assert qwen["use_sliding_window"] is False and "attention_bias" not in qwen
    with pytest.raises(ValueError, match="qwen2 always has q/k/v biases"):
        hf_model.check_spec(small_spec("qwen2-1.5b", attention_bias=False))


def test_hf_large_weights_are_shards_with_an_index(tmp_path):
    spec = small_spec("llama-3.1-8b")
    files = hf_model.write_weights(tmp_path, spec, max_shard_bytes=300_000)
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) > 1 and files == [*shards, "model.safetensors.index.json"]
    assert shards[0] == f"model-00001-of-{len(shards):05d}.safetensors"
    entries = headers(tmp_path)
    assert {name: file for name, (file, _) in entries.items()} == index["weight_map"]
    assert index["metadata"]["total_size"] == spec.shape().parameters() * 2


@pytest.mark.parametrize("architecture, vocab_size", [("llama", 300), ("llama", 2000), ("qwen2", 151_936)])
def test_hf_tokenizer_has_exactly_the_vocabulary_and_round_trips(tmp_path, architecture, vocab_size):
    from tokenizers import Tokenizer

    hf_model.write_tokenizer(tmp_path, vocab_size, architecture)
    tokenizer = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    vocab = tokenizer.get_vocab(with_added_tokens=True)
    assert len(vocab) == tokenizer.get_vocab_size() == vocab_size and sorted(vocab.values()) == list(range(vocab_size))
    assert [tokenizer.token_to_id(t) for t in ("<s>", "</s>", "<unk>")] == [0, 1, 2]
    text = "The cluster serves 12 requests: naïve café, ünïcödé & emoji 🚀!\n\tend"
    ids = tokenizer.encode(text).ids
    assert max(ids) < vocab_size and tokenizer.decode(ids) == text
    last_word = tokenizer.decode([vocab_size - 1])  # a whole word is one token: exact-length prompts need them
    assert last_word.startswith(" ") and tokenizer.encode(last_word).ids == [vocab_size - 1]
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    assert (config["bos_token"], config["eos_token"]) == ("<s>", "</s>")
    assert config["chat_template"] == hf_model.CHAT_TEMPLATE


def test_hf_model_is_generated_once_by_spec_into_the_cache(tmp_path):
    spec = small_spec("qwen2-1.5b")
    path = ensure_model(spec, "", tmp_path, generator=GENERATED_HF)
    assert path.name.startswith("generated-hf-") and (path / hf_model.MARKER_NAME).exists()
    marker = json.loads((path / hf_model.MARKER_NAME).read_text())
    assert marker["generator"] == hf_model.GENERATOR_NAME and marker["parameters"] == spec.shape().parameters()
    assert ensure_model(spec, "", tmp_path, generator=GENERATED_HF) == path
    assert ensure_model(spec.model_copy(update={"seed": 1}), "", tmp_path, generator=GENERATED_HF) != path


def vllm_python() -> Path | None:
    """A vLLM engine venv of this host, if one was built (its torch, safetensors and transformers)."""
    candidates = sorted((cache_dir() / "engines").glob("vllm-*/bin/python"), key=lambda p: -p.stat().st_mtime)
    for python in candidates:
        if "aarch64" in python.parent.parent.name:
            continue
        probe = subprocess.run([str(python), "-c", "import safetensors.torch, transformers"], capture_output=True,
                               timeout=120)
        if probe.returncode == 0:
            return python
    return None


VLLM_VENV_CHECK = textwrap.dedent("""
    import json, sys
    import numpy as np, torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, AutoTokenizer
    directory, expected = sys.argv[1], np.load(sys.argv[2])
    tensors = load_file(directory + "/model.safetensors")
    bits = tensors["model.layers.0.self_attn.q_proj.weight"].view(torch.int16).numpy().view(np.uint16)
    from_floats = torch.from_numpy(np.load(sys.argv[3])).to(torch.bfloat16).view(torch.int16).numpy()
    tokenizer = AutoTokenizer.from_pretrained(directory)
    model, info = AutoModelForCausalLM.from_pretrained(directory, output_loading_info=True)
    print(json.dumps({"same": bool((bits == expected).all()), "torch_rounding": bool((from_floats.view(np.uint16)
                      == expected).all()), "norm": tensors["model.norm.weight"].float().tolist()[:2],
                      "tokens": len(tokenizer), "ids": tokenizer("the cluster").input_ids,
                      "missing": [k for k, v in info.items() if v], "class": type(model).__name__}))
""")


def test_hf_model_loads_in_the_vllm_venv(tmp_path):
    """safetensors, torch's bf16 rounding and transformers' own loaders agree with what was written."""
    python = vllm_python()
    if python is None:
        print("skipped: no vLLM engine venv built on this host")
        pytest.skip("no vLLM engine venv built on this host")
    spec = small_spec("qwen2-1.5b")
    hf_model.write_hf_model(spec, tmp_path / "model")
    plan = next(p for p in hf_model.tensor_plans(spec) if p.name == "model.layers.0.self_attn.q_proj.weight")
    floats = np.concatenate(list(hf_model.tensor_chunks(spec.seed, plan))).reshape(plan.shape)
    np.save(tmp_path / "floats.npy", floats)
    np.save(tmp_path / "expected.npy", hf_model.bfloat16_bits(floats.copy()))
    # transformers' model classes import torch's inductor, which makes its cache directory in /tmp unless told
    result = subprocess.run([str(python), "-c", VLLM_VENV_CHECK, str(tmp_path / "model"),
                             str(tmp_path / "expected.npy"), str(tmp_path / "floats.npy")],
                            capture_output=True, text=True, timeout=300,
                            env={"HF_HUB_OFFLINE": "1", "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")})
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report == {"same": True, "torch_rounding": True, "norm": [1.0, 1.0], "tokens": 2000,
                      "ids": report["ids"], "missing": [], "class": "Qwen2ForCausalLM"}
    from tokenizers import Tokenizer

    assert report["ids"] == Tokenizer.from_file(str(tmp_path / "model" / "tokenizer.json")).encode("the cluster").ids
