"""Workloads: what each request asks for, rendered to request bodies before sending.

- random, no tokenizer: prompts are lists of random token ids (completions endpoint), so
  every prompt is exactly `input_len` tokens with no tokenizer on the client;
- random, with a tokenizer: random text whose tokenization is exactly `input_len` tokens
  (needed for the chat endpoint, which takes text);
- a JSONL file of prompts, or a ShareGPT JSON file, sampled with the data seed.

Bodies are serialized once, up front: the send path only writes bytes.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

FIRST_ID = 3  # token ids below this (the tiny model's specials) are never drawn without a tokenizer


class WorkloadError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class WorkItem:
    prompt: Any                 # list[int] | str | list[dict] (chat messages)
    output_len: int
    expected_input_tokens: int | None


def token_prompt(index: int, input_len: int, vocab_size: int, seed: int) -> list[int]:
    """Prompt `index` of a seeded stream of random token ids: the same index gives the same ids."""
    rng = random.Random(seed * 1_000_003 + index)
    return [rng.randrange(FIRST_ID, vocab_size) for _ in range(input_len)]


class ExactTextPrompts:
    """Random text that a given tokenizer turns into exactly N tokens.

    Prompts are built from whole-word pieces: single tokens that decode to a space and a
    word and encode back to one token. Pre-tokenizers split text at spaces, so N pieces
    make N tokens; every prompt is still checked, and adjusted a piece at a time.
    """

    SAMPLE = 5000  # vocabulary entries examined for the piece pool

    def __init__(self, tokenizer_path: str):
        from tokenizers import Tokenizer

        path = Path(tokenizer_path)
        file = path / "tokenizer.json" if path.is_dir() else path
        if not file.exists():
            raise WorkloadError(f"--tokenizer: no tokenizer.json at {path}")
        self.tokenizer = Tokenizer.from_file(str(file))
        self.pieces = self._word_pieces()
        if len(self.pieces) < 10:
            raise WorkloadError(f"--tokenizer {path}: too few whole-word tokens to build exact-length prompts")

    def _word_pieces(self) -> list[str]:
        vocab = sorted(self.tokenizer.get_vocab().values())
        sample = random.Random(0).sample(vocab, min(self.SAMPLE, len(vocab)))
        pieces = []
        for token_id in sorted(sample):
            text = self.tokenizer.decode([token_id])
            if len(text) > 1 and text[0] == " " and text[1:].isalnum() and self.count(text) == 1:
                pieces.append(text)
        return pieces

    def count(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def prompt(self, index: int, length: int, seed: int) -> str:
        rng = random.Random(seed * 1_000_003 + index)
        words = [rng.choice(self.pieces) for _ in range(length)]
        for _ in range(4 * length + 10):
            text = "".join(words).lstrip()
            have = self.count(text)
            if have == length:
                return text
            if have > length:
                words.pop()
            else:
                words.append(rng.choice(self.pieces))
        raise WorkloadError(f"could not make a prompt of exactly {length} tokens with this tokenizer")


class Workload:
    """The seeded sequence of work items for one load run."""

    def __init__(self, *, endpoint: str, input_len: int, output_len: int, vocab_size: int, data_seed: int,
                 tokenizer: str | None = None, prompts_file: str | None = None, sharegpt_file: str | None = None):
        self.endpoint, self.input_len, self.output_len = endpoint, input_len, output_len
        self.vocab_size, self.seed = vocab_size, data_seed
        self.text = ExactTextPrompts(tokenizer) if tokenizer else None
        self.pool: list[WorkItem] | None = None
        if prompts_file:
            self.pool = _shuffled(load_prompts_jsonl(Path(prompts_file), output_len, endpoint), data_seed)
        elif sharegpt_file:
            self.pool = _shuffled(load_sharegpt(Path(sharegpt_file), output_len, self.text), data_seed)
        elif endpoint == "chat" and self.text is None:
            raise WorkloadError("--endpoint chat needs text prompts: give --tokenizer (for random prompts of "
                                "exact length), --prompts or --sharegpt")

    def item(self, index: int) -> WorkItem:
        if self.pool is not None:
            return self.pool[index % len(self.pool)]
        if self.text is not None:
            return WorkItem(self.text.prompt(index, self.input_len, self.seed), self.output_len, self.input_len)
        return WorkItem(token_prompt(index, self.input_len, self.vocab_size, self.seed), self.output_len,
                        self.input_len)


def request_body(model: str, endpoint: str, item: WorkItem, extras: dict[str, Any] | None = None) -> bytes:
    """The JSON body: greedy, at most output_len tokens, usage in the stream; the engine's
    `extras` on top (exactly output_len tokens, usage in every chunk)."""
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": item.output_len,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if endpoint == "chat":
        messages = item.prompt if isinstance(item.prompt, list) and item.prompt and isinstance(item.prompt[0], dict) \
            else [{"role": "user", "content": item.prompt}]
        body["messages"] = messages
        body["max_completion_tokens"] = item.output_len
    else:
        body["prompt"] = item.prompt
    body.update(extras or {})
    return orjson.dumps(body)


def load_prompts_jsonl(path: Path, default_output_len: int, endpoint: str) -> list[WorkItem]:
    """One JSON object a line: {"prompt": "..."} or {"messages": [...]}, optional "output_len"."""
    items = []
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise WorkloadError(f"--prompts {path}: {exc}") from exc
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise WorkloadError(f"{path}:{number}: not JSON: {exc}") from None
        if not isinstance(row, dict) or not ("prompt" in row or "messages" in row):
            raise WorkloadError(f"{path}:{number}: each line needs 'prompt' or 'messages'")
        if "messages" in row and endpoint != "chat":
            raise WorkloadError(f"{path}:{number}: 'messages' needs --endpoint chat")
        output_len = row.get("output_len", default_output_len)
        if not isinstance(output_len, int) or output_len < 1:
            raise WorkloadError(f"{path}:{number}: output_len must be a positive integer")
        items.append(WorkItem(row.get("messages", row.get("prompt")), output_len, None))
    if not items:
        raise WorkloadError(f"{path}: no prompts")
    return items


def load_sharegpt(path: Path, default_output_len: int, text: ExactTextPrompts | None) -> list[WorkItem]:
    """First human turn as the prompt; the reply's length (with a tokenizer) as output_len."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise WorkloadError(f"--sharegpt {path}: {exc}") from exc
    if not isinstance(data, list):
        raise WorkloadError(f"{path}: expected a JSON list of conversations")
    items = []
    for entry in data:
        turns = entry.get("conversations") if isinstance(entry, dict) else None
        if not turns or len(turns) < 2:
            continue
        prompt, reply = turns[0].get("value", ""), turns[1].get("value", "")
        if not prompt:
            continue
        output_len = max(1, text.count(reply)) if text and reply else default_output_len
        items.append(WorkItem(prompt, output_len, text.count(prompt) if text else None))
    if not items:
        raise WorkloadError(f"{path}: no conversation with a prompt and a reply")
    return items


def _shuffled(items: list[WorkItem], seed: int) -> list[WorkItem]:
    order = list(items)
    random.Random(seed).shuffle(order)
    return order
