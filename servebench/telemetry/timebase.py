"""One time base for every node's samples: the orchestrator's.

A node on this host samples with the load generator's own monotonic clock, so its samples
fall inside cells as they are. A node on another host has clocks of its own: its sampler
writes its wall-clock time, the provider measured how far that clock is ahead of the
orchestrator's (`Provider.clock_offset`), and each sample is moved onto the orchestrator's
wall clock, then onto its monotonic clock (`t_mono`, what cells and requests use). The
node's own readings are kept as `t_wall_node`. A load generator on a client node is moved
the same way (`load_result_in_orchestrator_time`), so cells and samples share one time base.
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone
from pathlib import Path


def to_orchestrator_time(lines: list[str], offset_s: float, mono_minus_wall: float) -> list[dict]:
    """Samples (JSON lines; anything else a sampler printed is skipped) in the orchestrator's time."""
    rows = []
    for line in lines:
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if not isinstance(row, dict) or "t_wall" not in row:
            continue
        row["t_wall_node"] = row["t_wall"]
        row["t_wall"] = row["t_wall"] - offset_s
        row["t_mono"] = row["t_wall"] + mono_minus_wall
        rows.append(row)
    return rows


def rewrite_in_orchestrator_time(raw: Path, out: Path, offset_s: float) -> int:
    """Write `raw`'s samples to `out` in the orchestrator's time base; return how many."""
    try:
        lines = raw.read_text(errors="replace").splitlines()
    except OSError:
        return 0
    rows = to_orchestrator_time(lines, offset_s, time.monotonic() - time.time())
    out.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return len(rows)


def load_result_in_orchestrator_time(result: dict, offset_s: float, mono_minus_wall: float) -> dict:
    """A load result measured on a client node, its start moved onto the orchestrator's clocks
    (request times are relative to it, so they follow); the node's own readings are kept."""
    t0 = dict(result["t0"])
    node_wall = datetime.fromisoformat(t0["wall"]).timestamp()
    wall = node_wall - offset_s
    moved = {"monotonic": wall + mono_minus_wall, "wall": datetime.fromtimestamp(wall, timezone.utc).isoformat(),
             "monotonic_node": t0["monotonic"], "wall_node": t0["wall"], "clock_offset_s": offset_s}
    return {**result, "t0": moved}
