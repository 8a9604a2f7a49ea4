"""A tiny random-weight Llama as one GGUF file, for llama.cpp (written offline with numpy and the
PyPI `gguf` package; nothing downloaded).

The vocabulary is SentencePiece-style ('llama' tokenizer): <unk>, <s>, </s>, the 256 byte tokens
<0x00>..<0xFF> (byte fallback, so any text tokenizes), '▁' (a space) and short words '▁w1', '▁w2',
... up to `vocab_size`. The load generator sends token-id prompts, which llama.cpp uses verbatim
(no BOS), so a prompt of N ids is N tokens: counts are exact without a tokenizer on the client.
Every tensor is float32, the model's shape is the campaign's (`layers`, `hidden`, `heads`,
`kv_heads`, `intermediate`, `max_position` = context_length, which caps each slot's context).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from servebench.spec.campaign import GeneratedModelSpec

SPECIALS = ["<unk>", "<s>", "</s>"]
BYTE_TOKENS = [f"<0x{value:02X}>" for value in range(256)]
WEIGHT_SCALE = 0.02


def vocabulary(size: int) -> tuple[list[str], list[int], list[float]]:
    """Tokens, their types (gguf.TokenType values) and scores for a vocabulary of `size` entries."""
    from gguf import TokenType

    words = ["\u2581"] + [f"\u2581w{index}" for index in range(1, size - len(SPECIALS) - len(BYTE_TOKENS))]
    tokens = SPECIALS + BYTE_TOKENS + words
    types = [TokenType.UNKNOWN, TokenType.CONTROL, TokenType.CONTROL] + [TokenType.BYTE] * 256 \
        + [TokenType.NORMAL] * len(words)
    scores = [0.0] * (len(SPECIALS) + len(BYTE_TOKENS)) + [-float(index) for index in range(len(words))]
    return tokens, [int(t) for t in types], scores


def write_tiny_gguf(spec: GeneratedModelSpec, path: Path) -> Path:
    """Write the model to `path` (a .gguf file); return it."""
    import gguf

    tokens, types, scores = vocabulary(spec.vocab_size)
    head_dim = spec.hidden // spec.heads
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name(f"servebench tiny llama seed {spec.seed}")
    writer.add_context_length(spec.max_position)
    writer.add_embedding_length(spec.hidden)
    writer.add_block_count(spec.layers)
    writer.add_feed_forward_length(spec.intermediate)
    writer.add_head_count(spec.heads)
    writer.add_head_count_kv(spec.kv_heads)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_unk_token_id(0)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    writer.add_add_space_prefix(False)
    for name, array in _tensors(spec, head_dim):
        writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _tensors(spec: GeneratedModelSpec, head_dim: int):
    """(name, float32 array) in llama.cpp's names; numpy shapes are (out, in) like a torch Linear."""
    rng = np.random.default_rng(spec.seed)

    def matrix(rows: int, columns: int) -> np.ndarray:
        return (rng.standard_normal((rows, columns)) * WEIGHT_SCALE).astype(np.float32)

    hidden, vocab = spec.hidden, spec.vocab_size
    yield "token_embd.weight", matrix(vocab, hidden)
    yield "output_norm.weight", np.ones(hidden, np.float32)
    yield "output.weight", matrix(vocab, hidden)
    for layer in range(spec.layers):
        prefix = f"blk.{layer}."
        yield prefix + "attn_norm.weight", np.ones(hidden, np.float32)
        yield prefix + "ffn_norm.weight", np.ones(hidden, np.float32)
        yield prefix + "attn_q.weight", matrix(spec.heads * head_dim, hidden)
        yield prefix + "attn_k.weight", matrix(spec.kv_heads * head_dim, hidden)
        yield prefix + "attn_v.weight", matrix(spec.kv_heads * head_dim, hidden)
        yield prefix + "attn_output.weight", matrix(hidden, spec.heads * head_dim)
        yield prefix + "ffn_gate.weight", matrix(spec.intermediate, hidden)
        yield prefix + "ffn_up.weight", matrix(spec.intermediate, hidden)
        yield prefix + "ffn_down.weight", matrix(hidden, spec.intermediate)


def gguf_vocab_size(path: Path) -> int:
    """The number of tokens in a GGUF file's vocabulary (what token-id prompts draw from)."""
    from gguf import GGUFReader

    reader = GGUFReader(str(path))
    field = reader.fields.get("tokenizer.ggml.tokens")
    if field is None:
        raise ValueError(f"{path}: no tokenizer.ggml.tokens in this GGUF file")
    return len(field.data)
