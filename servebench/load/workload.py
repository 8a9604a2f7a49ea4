"""Prompts: random token ids, so every prompt is exactly input_len tokens with no tokenizer
on the client (the completions endpoint takes a list of ids as its prompt)."""

from __future__ import annotations

import random

FIRST_ID = 3  # the tiny model's specials are 0-2; ids below this are never drawn


def token_prompt(index: int, input_len: int, vocab_size: int, seed: int) -> list[int]:
    """Prompt `index` of a seeded stream: the same index always gives the same ids."""
    rng = random.Random(seed * 1_000_003 + index)
    return [rng.randrange(FIRST_ID, vocab_size) for _ in range(input_len)]
