"""Traces replayed on their own schedule: Mooncake JSONL and Azure-style CSV.

A Mooncake line is `{"timestamp": ms, "input_length": N, "output_length": M, "hash_ids": [...]}`;
each hash id stands for a block of 512 prompt tokens, and equal ids are equal blocks: the replay
gives every hash id its own seeded block of token ids, so requests that share hash ids share
exactly those prompt tokens and a prefix cache sees the reuse the trace recorded. An Azure LLM
inference trace is a CSV of TIMESTAMP (a date and time, or seconds), ContextTokens and
GeneratedTokens. Files are checked whole before anything is sent: a malformed line, a negative
length or a timestamp earlier than the line before is refused, naming the file and line.
"""

from __future__ import annotations

import csv
import random
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from servebench.load.datasets import json_lines


@dataclass(frozen=True, slots=True)
class TraceRow:
    time_s: float                    # from the trace's start
    input_len: int
    output_len: int
    hash_ids: tuple[int, ...] | None  # mooncake: one per block of the prompt
    line: int                        # where in the file, for messages


def read_trace(path: Path, fmt: str) -> list[TraceRow]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ValueError(f"{path}: {exc.strerror or exc}") from None
    rows = read_mooncake(path, text) if fmt == "mooncake" else read_azure(path, text)
    if not rows:
        raise ValueError(f"{path}: no requests in the trace")
    return rows


def read_mooncake(path: Path, text: str) -> list[TraceRow]:
    rows: list[TraceRow] = []
    first: float | None = None
    for number, entry in json_lines(path, text.splitlines(), ValueError):
        if not isinstance(entry, dict):
            raise ValueError(f"{path}:{number}: each line is a JSON object")
        missing = [k for k in ("timestamp", "input_length", "output_length") if k not in entry]
        if missing:
            raise ValueError(f"{path}:{number}: missing {', '.join(missing)}")
        stamp = _number(entry["timestamp"], path, number, "timestamp")
        input_len = _count(entry["input_length"], path, number, "input_length")
        output_len = _count(entry["output_length"], path, number, "output_length")
        hash_ids = entry.get("hash_ids", [])
        if not isinstance(hash_ids, list) or not all(isinstance(h, int) and not isinstance(h, bool)
                                                     for h in hash_ids):
            raise ValueError(f"{path}:{number}: hash_ids must be a list of integers")
        first = stamp if first is None else first
        rows.append(_checked(rows, TraceRow((stamp - first) / 1000.0, input_len, output_len, tuple(hash_ids), number),
                             path, stamp_text=f"{stamp:g} ms"))
    return rows


AZURE_COLUMNS = {"timestamp": ("timestamp",), "context": ("contexttokens", "context_tokens", "input_length"),
                 "generated": ("generatedtokens", "generated_tokens", "output_length")}


def read_azure(path: Path, text: str) -> list[TraceRow]:
    reader = csv.reader(text.splitlines())
    header = next(reader, None)
    if header is None:
        return []
    names = [h.strip().lower() for h in header]
    where = {}
    for key, accepted in AZURE_COLUMNS.items():
        found = [names.index(a) for a in accepted if a in names]
        if not found:
            raise ValueError(f"{path}:1: the header needs a column {accepted[0]!r} (TIMESTAMP, ContextTokens, "
                             f"GeneratedTokens), got {header}")
        where[key] = found[0]
    rows: list[TraceRow] = []
    first: float | None = None
    for number, fields in enumerate(reader, 2):
        if not fields or not "".join(fields).strip():
            continue
        if len(fields) < len(header):
            raise ValueError(f"{path}:{number}: {len(fields)} fields, the header has {len(header)}")
        stamp = _azure_time(fields[where["timestamp"]].strip(), path, number)
        input_len = _count(_int_text(fields[where["context"]], path, number, "ContextTokens"), path, number,
                           "ContextTokens")
        output_len = _count(_int_text(fields[where["generated"]], path, number, "GeneratedTokens"), path, number,
                            "GeneratedTokens")
        first = stamp if first is None else first
        rows.append(_checked(rows, TraceRow(stamp - first, input_len, output_len, None, number), path,
                             stamp_text=fields[where["timestamp"]].strip()))
    return rows


def in_window(rows: list[TraceRow], start_s: float, duration_s: float | None,
              max_requests: int | None) -> list[TraceRow]:
    """The rows from start_s (trace seconds after its first request) for duration_s, at most
    max_requests, their times moved so the window's first request is at 0."""
    end = None if duration_s is None else start_s + duration_s
    chosen = [r for r in rows if r.time_s >= start_s and (end is None or r.time_s < end)]
    chosen = chosen[:max_requests] if max_requests else chosen
    if not chosen:
        return []
    base = chosen[0].time_s
    return [TraceRow(r.time_s - base, r.input_len, r.output_len, r.hash_ids, r.line) for r in chosen]


def replay_offsets(rows: list[TraceRow], time_scale: float = 1.0, rate: float | None = None) -> list[float]:
    """Seconds from t0 at which each row is sent: its trace time times `time_scale`; or, with a
    `rate`, times the scale that makes the window's mean arrival rate that rate."""
    if rate is not None:
        span = rows[-1].time_s - rows[0].time_s
        if len(rows) < 2 or span <= 0:
            raise ValueError("a trace replayed at a rate needs two requests at different times")
        time_scale = (len(rows) - 1) / (span * rate)
    return [r.time_s * time_scale for r in rows]


def block_tokens(hash_id: int, block_size: int, vocab_size: int, seed: int, first_id: int) -> list[int]:
    """The token ids hash id `hash_id` stands for: the same for every request that names it."""
    rng = random.Random(f"{seed}/block/{hash_id}")
    return rng.choices(range(first_id, vocab_size), k=block_size)


def trace_prompt(row: TraceRow, index: int, block_size: int, vocab_size: int, seed: int,
                 first_id: int) -> list[int]:
    """Exactly `row.input_len` token ids: the hash ids' blocks in order (a last partial block is that
    block's beginning), then, where the hash ids cover fewer tokens, ids of this request's own."""
    prompt: list[int] = []
    for hash_id in row.hash_ids or ():
        if len(prompt) >= row.input_len:
            break
        prompt += block_tokens(hash_id, block_size, vocab_size, seed, first_id)
    del prompt[row.input_len:]
    if len(prompt) < row.input_len:
        rng = random.Random(f"{seed}/trace/{index}")
        prompt += rng.choices(range(first_id, vocab_size), k=row.input_len - len(prompt))
    return prompt


def _checked(rows: list[TraceRow], row: TraceRow, path: Path, stamp_text: str) -> TraceRow:
    if rows and row.time_s < rows[-1].time_s:
        raise ValueError(f"{path}:{row.line}: timestamp {stamp_text} is earlier than line {rows[-1].line}'s: "
                         "a trace's timestamps never go backwards")
    return row


def _number(value: object, path: Path, number: int, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise ValueError(f"{path}:{number}: {name} must be a number (got {value!r})")
    return float(value)


def _count(value: object, path: Path, number: int, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{path}:{number}: {name} must be a positive integer (got {value!r})")
    return value


def _int_text(text: str, path: Path, number: int, name: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise ValueError(f"{path}:{number}: {name} must be an integer (got {text.strip()!r})") from None


_FRACTION = re.compile(r"(\.\d{6})\d+")


def _azure_time(text: str, path: Path, number: int) -> float:
    """Seconds: a number as it is, or a date and time as Azure's traces write it ('YYYY-MM-DD
    HH:MM:SS.fffffff', fractions cut to microseconds) as seconds since the epoch."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(_FRACTION.sub(r"\1", text)).timestamp()
    except ValueError:
        raise ValueError(f"{path}:{number}: TIMESTAMP {text!r} is neither seconds nor a date and time") from None
