"""Write a tiny random-weight Llama with a locally trained byte-level BPE tokenizer.

Nothing is downloaded: the tokenizer is trained on text generated here, the weights are
drawn from a seeded generator. vLLM's CPU attention needs head_dim in a fixed set (32 is
the smallest), so the defaults are hidden 128 / 4 heads.

    python -m servebench_engine.tiny_llama --out DIR --config '{"seed": 0, ...}'
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

WORDS = (
    "the a cluster node core cache token request serve model layer tensor pipeline stage "
    "worker memory network latency throughput batch prompt decode prefill queue client "
    "rate shard attention kernel thread socket rank gloo shared ring vector matrix float "
    "bench nightly regression campaign warehouse report chart sample metric series"
).split()


CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)


def corpus(seed: int, lines: int = 4000) -> list[str]:
    rng = random.Random(seed)
    text = []
    for _ in range(lines):
        words = [rng.choice(WORDS) for _ in range(rng.randint(4, 16))]
        text.append(" ".join(words) + rng.choice([".", ",", "!", "?", ";"]) + f" {rng.randint(0, 9999)}")
    return text


def train_tokenizer(seed: int, vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<s>", "</s>", "<unk>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus(seed), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
        model_max_length=1_000_000,
    )
    fast.chat_template = CHAT_TEMPLATE  # so the chat endpoint can be benchmarked too
    return fast


def write_model(out: Path, cfg: dict) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = train_tokenizer(cfg["seed"], cfg["vocab_size"])
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=cfg["hidden"],
        intermediate_size=cfg["intermediate"],
        num_hidden_layers=cfg["layers"],
        num_attention_heads=cfg["heads"],
        num_key_value_heads=cfg["kv_heads"],
        max_position_embeddings=cfg["max_position"],
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=False,
        torch_dtype="bfloat16",
    )
    torch.manual_seed(cfg["seed"])
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    (out / "servebench-model.json").write_text(json.dumps({"generator": "tiny-llama", **cfg}, indent=2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--config", required=True, help="JSON: seed, layers, hidden, heads, kv_heads, ...")
    args = parser.parse_args()
    write_model(args.out, json.loads(args.config))


if __name__ == "__main__":
    main()
