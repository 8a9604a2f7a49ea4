"""Workloads: what each request asks for, rendered to request bodies before sending.

- random, no tokenizer: prompts are lists of random token ids (completions endpoint), so
  every prompt is exactly `input_len` tokens with no tokenizer on the client;
- random, with a tokenizer: random text whose tokenization is exactly `input_len` tokens
  (needed for the chat endpoint, which takes text);
- a JSONL file of prompts, or a ShareGPT JSON file, sampled with the data seed;
- a workload block (workload_spec.py): lengths from distributions, a dataset, shared prefixes or
  a trace; every prompt of these is token ids (exact counts), except a dataset's text.

Bodies are serialized once, up front: the send path only writes bytes.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict, Unpack

import orjson

from servebench.load.datasets import WorkItem, load_prompts_jsonl, load_sharegpt
from servebench.load.distributions import WorkloadError
from servebench.load.traces import replay_offsets, trace_prompt
from servebench.load.workload_spec import (
    DatasetWorkload,
    SessionsWorkload,
    SharedPrefixWorkload,
    SyntheticWorkload,
    TraceWorkload,
    WorkloadSpec,
)

if TYPE_CHECKING:
    from tokenizers import Tokenizer

FIRST_ID = 3  # token ids below this (the tiny model's specials) are never drawn without a tokenizer

__all__ = ["FIRST_ID", "WorkItem", "Workload", "WorkloadError", "WorkloadSettings", "load_prompts_jsonl",
           "load_sharegpt", "request_body"]


def token_prompt(index: int, input_len: int, vocab_size: int, seed: int) -> list[int]:
    """Prompt `index` of a seeded stream of random token ids: the same index gives the same ids."""
    rng = random.Random(seed * 1_000_003 + index)
    return [rng.randrange(FIRST_ID, vocab_size) for _ in range(input_len)]


def load_tokenizer(path: Path) -> Tokenizer:
    """The model's own tokenizer: tokenizer.json, or the model directory holding it."""
    from tokenizers import Tokenizer

    file = path / "tokenizer.json" if path.is_dir() else path
    if not file.exists():
        raise WorkloadError(f"--tokenizer: no tokenizer.json at {path}")
    return Tokenizer.from_file(str(file))


class TokenCounter:
    """Counts text's tokens with the model's tokenizer (a dataset's prompts and replies)."""

    def __init__(self, tokenizer_path: str):
        self.tokenizer = load_tokenizer(Path(tokenizer_path))

    def count(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False).ids)


class ExactTextPrompts:
    """Random text that a given tokenizer turns into exactly N tokens.

    Prompts are built from whole-word pieces: single tokens that decode to a space and a
    word and encode back to one token. Pre-tokenizers split text at spaces, so N pieces
    make N tokens; every prompt is still checked, and adjusted a piece at a time.
    """

    SAMPLE = 5000  # vocabulary entries examined for the piece pool

    def __init__(self, tokenizer_path: str):
        path = Path(tokenizer_path)
        self.tokenizer = load_tokenizer(path)
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


class _WorkloadBasics(TypedDict):
    endpoint: str
    input_len: int
    output_len: int
    vocab_size: int
    data_seed: int


class WorkloadSettings(_WorkloadBasics, total=False):
    """What a workload is made from: the endpoint, the fixed lengths and vocabulary of random prompts,
    the data seed, and at most one source of prompts (a prompts file, a ShareGPT file or a workload
    block); `tokenizer` for exact-length text, `max_context` to refuse what the model cannot hold."""

    tokenizer: str | None
    prompts_file: str | None
    sharegpt_file: str | None
    spec: WorkloadSpec | None
    max_context: int | None


class Workload:
    """The seeded sequence of work items for one load run; `offsets` is a trace's own schedule."""

    def __init__(self, **settings: Unpack[WorkloadSettings]):
        required, optional = WorkloadSettings.__required_keys__, WorkloadSettings.__optional_keys__
        missing, unknown = required - settings.keys(), settings.keys() - required - optional
        if missing or unknown:  # what a signature of named parameters would refuse
            problems = [f"{what} {', '.join(sorted(names))}" for what, names in (("missing", missing),
                                                                                 ("unknown", unknown)) if names]
            raise TypeError(f"Workload(): {'; '.join(problems)}")
        endpoint, output_len, seed = settings["endpoint"], settings["output_len"], settings["data_seed"]
        tokenizer, spec = settings.get("tokenizer"), settings.get("spec")
        self.endpoint, self.input_len, self.output_len = endpoint, settings["input_len"], output_len
        self.vocab_size, self.seed, self.spec = settings["vocab_size"], seed, spec
        self.max_context = settings.get("max_context")
        self.text = ExactTextPrompts(tokenizer) if tokenizer and not isinstance(spec, DatasetWorkload) else None
        self.counter = (TokenCounter(tokenizer) if isinstance(spec, DatasetWorkload) and tokenizer else self.text)
        self._session: tuple[int, list[WorkItem]] | None = None  # the session built most recently (its turns)
        self.pool = self._pool(settings.get("prompts_file"), settings.get("sharegpt_file"))
        if self.pool is None and endpoint == "chat" and self.text is None:
            raise WorkloadError("--endpoint chat needs text prompts: give --tokenizer (for random prompts of "
                                "exact length), --prompts, --sharegpt or a dataset workload")
        if endpoint == "chat" and isinstance(spec, (SharedPrefixWorkload, TraceWorkload, SessionsWorkload)):
            raise WorkloadError(f"workload {spec.kind}: prompts are token ids, which only --endpoint completions "
                                "takes")
        self._check_context()

    def _pool(self, prompts_file: str | None, sharegpt_file: str | None) -> list[WorkItem] | None:
        """Every item, made up front, when they come from a file or a trace (None: drawn per index)."""
        spec, seed = self.spec, self.seed
        if prompts_file:
            return _shuffled(load_prompts_jsonl(Path(prompts_file), self.output_len, self.endpoint, self.counter),
                             seed)
        if sharegpt_file:
            return _shuffled(load_sharegpt(Path(sharegpt_file), self.output_len, self.counter), seed)
        if isinstance(spec, DatasetWorkload):
            return _shuffled(self._dataset(spec), seed)
        if isinstance(spec, TraceWorkload):
            return [WorkItem(trace_prompt(row, i, spec.block_size, self.vocab_size, seed, FIRST_ID),
                             row.output_len, row.input_len, f"{spec.path}:{row.line}")
                    for i, row in enumerate(spec.window())]
        return None

    def _dataset(self, spec: DatasetWorkload) -> list[WorkItem]:
        path = Path(spec.path)
        items = load_prompts_jsonl(path, self.output_len, self.endpoint, self.counter) if spec.format == "jsonl" \
            else load_sharegpt(path, self.output_len, self.counter)
        if spec.output is not None:  # the spec's lengths instead of the file's, drawn per item
            items = [WorkItem(item.prompt, spec.output.sample(random.Random(f"{self.seed}/output/{i}")),
                              item.expected_input_tokens, item.source) for i, item in enumerate(items)]
        return items

    def _check_context(self) -> None:
        """Refuse, before anything is sent, a prompt and answer longer than the model's context."""
        if self.max_context is None:
            return
        if self.pool is not None:
            for item in self.pool:
                if (item.expected_input_tokens or 0) + item.output_len > self.max_context:
                    raise WorkloadError(f"{item.source or 'a prompt'}: {item.expected_input_tokens} prompt + "
                                        f"{item.output_len} answer tokens exceed the model's context of "
                                        f"{self.max_context}")
            return
        longest_in = self.spec.upper_input() if self.spec is not None else self.input_len
        longest_out = self.spec.upper_output() if self.spec is not None else self.output_len
        if longest_in is not None and longest_out is not None and longest_in + longest_out > self.max_context:
            field = "workload" if self.spec is not None else "--input-len + --output-len"
            raise WorkloadError(f"{field}: prompts up to {longest_in} and answers up to {longest_out} tokens exceed "
                                f"the model's context of {self.max_context} (lower the lengths or their max)")

    def check_bounded(self) -> None:
        """For a run whose requests are made as they are sent (a duration): with a known context, every
        length needs a bound, so no request can be found too long after sending has begun."""
        if self.max_context is not None and self.pool is None and self.spec is not None and \
                None in (self.spec.upper_input(), self.spec.upper_output()):
            raise WorkloadError(f"workload {self.spec.label}: with --duration and the model's context known "
                                f"({self.max_context}), give every normal or lognormal length a max")

    def offsets(self, rate: float | None) -> list[float] | None:
        """A trace's own schedule (seconds from t0; with a rate, scaled to that mean rate); None otherwise."""
        if not isinstance(self.spec, TraceWorkload):
            return None
        try:
            return replay_offsets(self.spec.window(), self.spec.time_scale, rate)
        except ValueError as exc:
            raise WorkloadError(f"{self.spec.path}: {exc}") from None

    def item(self, index: int) -> WorkItem:
        if self.pool is not None:
            item = self.pool[index % len(self.pool)]
        elif isinstance(self.spec, SyntheticWorkload):
            item = self._synthetic(self.spec, index)
        elif isinstance(self.spec, SharedPrefixWorkload):
            item = self._shared_prefix(self.spec, index)
        elif isinstance(self.spec, SessionsWorkload):
            item = self._session_turn(self.spec, index)
        elif self.text is not None:
            return WorkItem(self.text.prompt(index, self.input_len, self.seed), self.output_len, self.input_len)
        else:
            return WorkItem(token_prompt(index, self.input_len, self.vocab_size, self.seed), self.output_len,
                            self.input_len)
        if self.max_context is not None and (item.expected_input_tokens or 0) + item.output_len > self.max_context:
            raise WorkloadError(f"request {index}: {item.expected_input_tokens} prompt + {item.output_len} answer "
                                f"tokens exceed the model's context of {self.max_context}: give the lengths a max")
        return item

    def _synthetic(self, spec: SyntheticWorkload, index: int) -> WorkItem:
        rng = random.Random(f"{self.seed}/synthetic/{index}")
        input_len, output_len = spec.input.sample(rng), spec.output.sample(rng)
        if self.text is not None:
            return WorkItem(self.text.prompt(index, input_len, self.seed), output_len, input_len)
        return WorkItem(rng.choices(range(FIRST_ID, self.vocab_size), k=input_len), output_len, input_len)

    def _session_turn(self, spec: SessionsWorkload, index: int) -> WorkItem:
        """Request `index` is turn index mod T of session index // T (a session's turns are consecutive)."""
        session, turn = divmod(index, spec.turns)
        if self._session is None or self._session[0] != session:
            self._session = session, self._conversation(spec, session)
        return self._session[1][turn]

    def _conversation(self, spec: SessionsWorkload, session: int) -> list[WorkItem]:
        """Every turn of one session: the prompt so far, a new user message, and after the turn its
        answer as filler ids of the asked length (what the next turn's prompt carries)."""
        rng = random.Random(f"{self.seed}/session/{session}")
        ids = range(FIRST_ID, self.vocab_size)
        prompt: list[int] = []
        turns = []
        for turn in range(spec.turns):
            message = (spec.first_input if turn == 0 else spec.turn_input).sample(rng)
            prompt = prompt + rng.choices(ids, k=message)
            output_len = spec.output.sample(rng)
            turns.append(WorkItem(prompt, output_len, len(prompt), session=session, turn=turn))
            prompt = prompt + rng.choices(ids, k=output_len)
        return turns

    def think_s(self, session: int, turn: int) -> float:
        """Seconds the session waits after turn `turn`'s answer before its next turn (seeded)."""
        spec = self.spec
        if not isinstance(spec, SessionsWorkload) or spec.think_s == 0:
            return 0.0
        if spec.think == "fixed":
            return spec.think_s
        drawn = random.Random(f"{self.seed}/think/{session}/{turn}").expovariate(1 / spec.think_s)
        return min(drawn, spec.think_bound_s())

    def _shared_prefix(self, spec: SharedPrefixWorkload, index: int) -> WorkItem:
        group = spec.group(index)
        prefix = random.Random(f"{self.seed}/prefix/{group}").choices(range(FIRST_ID, self.vocab_size),
                                                                       k=spec.prefix_len)
        rng = random.Random(f"{self.seed}/suffix/{index}")
        suffix_len, output_len = spec.suffix_len.sample(rng), spec.output.sample(rng)
        prompt = prefix + rng.choices(range(FIRST_ID, self.vocab_size), k=suffix_len)
        return WorkItem(prompt, output_len, len(prompt), group=group)


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


def _shuffled(items: list[WorkItem], seed: int) -> list[WorkItem]:
    order = list(items)
    random.Random(seed).shuffle(order)
    return order
