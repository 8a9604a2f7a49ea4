"""Datasets from local files: the prompts of a JSONL file or a ShareGPT JSON file, as work items.

Apart from workload.py so that the workload block's validation (workload_spec.py) can read a
dataset, naming the file and line of a problem, before anything is sent.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Protocol

from servebench.load.distributions import WorkloadError


def json_lines(path: Path, lines: list[str], error: type[Exception] = WorkloadError) -> Iterator[tuple[int, Any]]:
    """Each non-blank line of a JSONL file, parsed, with its line number: a line that is not JSON is
    refused naming the file and the line."""
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise error(f"{path}:{number}: not JSON: {exc}") from None
        yield number, row


@dataclass(frozen=True, slots=True)
class WorkItem:
    prompt: Any                 # list[int] | str | list[dict] (chat messages)
    output_len: int
    expected_input_tokens: int | None
    source: str | None = None   # where it came from ("file:line"), for messages
    group: int | None = None    # shared-prefix: the prefix group
    session: int | None = None  # sessions: the conversation ...
    turn: int | None = None     # ... and the turn in it (0 first)


class Counter(Protocol):
    """Counts a text's tokens with the model's tokenizer."""

    def count(self, text: str) -> int: ...


def load_prompts_jsonl(path: Path, default_output_len: int, endpoint: str | None,
                       text: Counter | None = None) -> list[WorkItem]:
    """One JSON object a line: {"prompt": "..."}, {"prompt_ids": [token ids]} or {"messages": [...]},
    optional "output_len". Text prompts are counted with the tokenizer when there is one."""
    items = []
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise WorkloadError(f"{path}: {exc.strerror or exc}") from None
    for number, row in json_lines(path, lines):
        kinds = [k for k in ("prompt", "prompt_ids", "messages") if isinstance(row, dict) and k in row]
        if len(kinds) != 1:
            raise WorkloadError(f"{path}:{number}: each line needs 'prompt' or 'messages' (or 'prompt_ids': token "
                                "ids), one of them")
        if "messages" in row and endpoint not in ("chat", None):
            raise WorkloadError(f"{path}:{number}: 'messages' needs --endpoint chat")
        output_len = row.get("output_len", default_output_len)
        if not isinstance(output_len, int) or isinstance(output_len, bool) or output_len < 1:
            raise WorkloadError(f"{path}:{number}: output_len must be a positive integer")
        source = f"{path}:{number}"
        if "prompt_ids" in row:
            ids = row["prompt_ids"]
            if not isinstance(ids, list) or not ids or not all(isinstance(t, int) and not isinstance(t, bool)
                                                               and t >= 0 for t in ids):
                raise WorkloadError(f"{source}: prompt_ids must be a non-empty list of token ids")
            if endpoint == "chat":
                raise WorkloadError(f"{source}: 'prompt_ids' are token ids, which only --endpoint completions takes")
            items.append(WorkItem(ids, output_len, len(ids), source))
            continue
        prompt = row[kinds[0]]
        if "prompt" in row and (not isinstance(prompt, str) or not prompt):
            raise WorkloadError(f"{source}: prompt must be a non-empty string")
        count = text.count(prompt) if text is not None and isinstance(prompt, str) else None
        items.append(WorkItem(prompt, output_len, count, source))
    if not items:
        raise WorkloadError(f"{path}: no prompts (an empty dataset)")
    return items


def load_sharegpt(path: Path, default_output_len: int,
                  text: Counter | None) -> list[WorkItem]:
    """First human turn as the prompt; the reply's length (with a tokenizer) as output_len."""
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise WorkloadError(f"{path}: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise WorkloadError(f"{path}:{exc.lineno}: not JSON: {exc.msg} (column {exc.colno})") from None
    if not isinstance(data, list):
        raise WorkloadError(f"{path}: expected a JSON list of conversations")
    items = []
    for position, entry in enumerate(data):
        turns = entry.get("conversations") if isinstance(entry, dict) else None
        if not isinstance(turns, list) or len(turns) < 2 or not all(isinstance(t, dict) for t in turns[:2]):
            continue
        prompt, reply = turns[0].get("value", ""), turns[1].get("value", "")
        if not isinstance(prompt, str) or not prompt or not isinstance(reply, str):
            continue
        output_len = max(1, text.count(reply)) if text and reply else default_output_len
        items.append(WorkItem(prompt, output_len, text.count(prompt) if text else None,
                              f"{path}: conversation {position}"))
    if not items:
        raise WorkloadError(f"{path}: no conversation with a prompt and a reply (an empty dataset)")
    return items


def check_dataset(path: Path, fmt: str) -> None:
    """A dataset file's structure, checked when its workload block is read (no tokenizer yet)."""
    if fmt == "jsonl":
        load_prompts_jsonl(path, 1, None)  # either endpoint
    else:
        load_sharegpt(path, 1, None)
