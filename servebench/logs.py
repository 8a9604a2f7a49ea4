"""The end of a log, for an error message: one helper for every place a run shows why a process
failed (a server's processes, an engine's shared services, a load generator, a testbed daemon).

Logs can be gigabytes (a server at debug level, a long campaign's services), so only the file's end
is read, block by block from the back, until enough lines are found. A log is written by
processes we do not control: undecodable bytes are replaced, not raised, and a missing or
unreadable file gives one line saying so instead of an exception that would hide the failure
being reported.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

BLOCK_BYTES = 64 * 1024
MAX_BYTES = 1024 * 1024     # never read more than this from the end, however few lines matched


def tail(path: Path | str, lines: int = 30, width: int = 300,
         keep: Callable[[str], bool] | None = None) -> list[str]:
    """The last `lines` non-blank lines of a text file (those `keep` accepts, if given), each
    right-stripped and cut to `width` characters (" ..." marks a cut). A missing or unreadable
    file gives `["(could not read: <why>)"]`; an empty one `[]`."""
    try:
        text = _read_end(Path(path), lines, keep)
    except OSError as exc:
        return [f"(could not read: {exc})"]
    return [_cut(line.rstrip(), width) for line in _wanted(text, keep)[-lines:]] if lines > 0 else []


def _read_end(path: Path, lines: int, keep: Callable[[str], bool] | None) -> str:
    """The file's end as text: whole lines only, enough of them to hold `lines` kept ones (or
    the whole file, or MAX_BYTES of it, whichever is less)."""
    with open(path, "rb") as file:
        end = start = file.seek(0, os.SEEK_END)
        data = b""
        while start > 0 and end - start < MAX_BYTES:
            step = min(BLOCK_BYTES, start)
            start -= step
            file.seek(start)
            data = file.read(step) + data
            if len(_wanted(_whole_lines(data, start).decode("utf-8", errors="replace"), keep)) >= lines:
                break
    return _whole_lines(data, start).decode("utf-8", errors="replace")


def _whole_lines(data: bytes, start: int) -> bytes:
    """Bytes read from offset `start` without their first line unless it starts the file: a
    read from the middle most likely begins inside a line (or a UTF-8 character). With no line
    end at all, the piece of one long line is all there is to show."""
    return data if start == 0 or b"\n" not in data else data.partition(b"\n")[2]


def _wanted(text: str, keep: Callable[[str], bool] | None) -> list[str]:
    return [line for line in text.splitlines() if line.strip() and (keep is None or keep(line))]


def _cut(line: str, width: int) -> str:
    return line if len(line) <= width else line[:width] + " ..."


def tail_text(path: Path | str, lines: int = 30, width: int = 300,
              keep: Callable[[str], bool] | None = None, sep: str = "\n") -> str:
    """`tail` as one string for an error message, "(empty log)" when there is nothing to show:
    a message never ends in a bare colon."""
    return sep.join(tail(path, lines, width, keep)) or "(empty log)"
