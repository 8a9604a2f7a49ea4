"""A cell's load, run by the load generator in a process of its own, on the orchestrator's host or
on the campaign's client node.

A separate process keeps the orchestrator's own threads (Prefect's logging and events) off the
generator's event loop; the cell's JSON result stays in the run directory. On a client node
the generator runs from its own tree (`servebench.distribution.load_tree`) and its files are brought
back, its start moved onto the orchestrator's clocks. Either way a run that outlives its
deadline (`servebench.load.config.deadline_s`) is stopped and the cell fails saying so.

Then the result gets what the server nodes' cores did over the cell's window (`summary.node_cpu`,
`node_cpu_in_window`): the node samplers' tick counts (servebench/telemetry/node_sampler.py,
`CpuAccount`) of the samples inside it, read from the run's telemetry files as they are written, so
the cell's verdict (`servebench.campaign.outcome`) can tell a server that lost its cores to another
process. The samples of a node on another host come back only when its sampler stops, after the
mode: such a node is not in `node_cpu`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from servebench.cpus import format_cpu_list
from servebench.load.config import LoadConfig, deadline_s
from servebench.load.on_node import REQUESTS_NAME, RESULT_NAME
from servebench.load.runner import load_result, write_result
from servebench.logs import tail_text
from servebench.providers.node_tools import INSTRUMENT_VARIABLE, MARK_VARIABLE
from servebench.serving.deployment import ClientNode
from servebench.telemetry.timebase import load_result_in_orchestrator_time
from servebench.waiting import poll

POLL_S = 0.5
TOP_NAMED = 3          # foreign processes a cell names, the busiest first
SAMPLES_AFTER_S = 3.0  # how long to wait for each node's first sample after the window (its sampler at >= 1 Hz)
LOG_TAIL_LINES = 20   # of the load generator's log, in the error of a cell whose generator failed on a node


def requests_csv_path(output: str) -> str:
    return str(Path(output).with_suffix(".requests.csv"))


def progress_path(output: str) -> Path:
    """Where a local load generator keeps its live counts (an `after_requests` fault reads them);
    not `.json`: a cell's `<key>.json` in the run directory is its complete result."""
    return Path(output).with_suffix(".progress")


def run_cell_load(config: LoadConfig, output: str, client: ClientNode | None = None, mark: str | None = None) -> dict:
    """Run the load (here, or on the client node); raise with the generator's own words if it
    did not produce a result. `mark`: the run's process mark, carried by the generator here (a
    resume finds it if the orchestrator is killed; on a node the provider marks it)."""
    result = _run_cell_load(config, output, client, mark)
    return with_node_cpu(result, Path(output))


def _run_cell_load(config: LoadConfig, output: str, client: ClientNode | None, mark: str | None) -> dict:
    if client is not None:
        return run_load_on_node(client, config, Path(output))
    argv = [sys.executable, "-m", "servebench.load.on_node", "--config-json", config.model_dump_json(),
            "--output-json", output, "--requests-csv", requests_csv_path(output),
            "--progress-file", str(progress_path(output))]
    limit = deadline_s(config)
    env = os.environ | {INSTRUMENT_VARIABLE: "1"} | ({MARK_VARIABLE: mark} if mark else {})
    try:
        done = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=limit, env=env)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"load generator still running after its deadline of {limit:.0f} s: stopped") from None
    if done.returncode != 0 or not Path(output).exists():
        raise RuntimeError(f"load generator exited {done.returncode}: {(done.stderr or done.stdout)[-2000:]}")
    return load_result(Path(output))


def run_load_on_node(client: ClientNode, config: LoadConfig, output: Path) -> dict:
    """Start the generator on the client node, wait for it (at most its deadline), bring its
    files back and land them beside the run's other cells in the orchestrator's time base."""
    provider, node = client.provider, client.node
    remote = f"{provider.scratch_dir(node)}/load/{output.stem}"
    argv = [client.python, "-S", "-m", "servebench.load.on_node", "--config-json", config.model_dump_json(),
            "--output-json", f"{remote}/{RESULT_NAME}", "--requests-csv", f"{remote}/{REQUESTS_NAME}"]
    log = output.with_suffix(".load.log")
    output.parent.mkdir(parents=True, exist_ok=True)
    limit = deadline_s(config)
    process = provider.start(node, argv, {"PYTHONPATH": client.tree, INSTRUMENT_VARIABLE: "1"}, log)
    try:
        if not poll(lambda: not process.alive(), limit, interval_s=POLL_S):
            raise RuntimeError(f"load generator on node {node.name} still running after its deadline of "
                               f"{limit:.0f} s: stopped")
    finally:
        code = provider.stop(process, grace_s=5)
    code = process.exit_code() if code is None else code
    if code != 0:
        raise RuntimeError(f"load generator on node {node.name} exited {code}: {tail_text(log, LOG_TAIL_LINES)}")
    with tempfile.TemporaryDirectory(dir=output.parent, prefix=f".{output.stem}.") as scratch:
        fetched = Path(scratch)
        if not provider.get_tree(node, remote, fetched) or not (fetched / RESULT_NAME).exists():
            raise RuntimeError(f"load generator on node {node.name} left no result in {remote}: "
                               f"{tail_text(log, LOG_TAIL_LINES)}")
        result = load_result(fetched / RESULT_NAME)
        if client.clock_offset_s is not None:
            result = load_result_in_orchestrator_time(result, client.clock_offset_s, time.monotonic() - time.time())
        result["summary"].setdefault("client", {})["node"] = node.name
        shutil.move(fetched / REQUESTS_NAME, requests_csv_path(str(output)))
        write_result(result, output)  # last: its presence means the cell's files are complete
    return result


def with_node_cpu(result: dict, output: Path) -> dict:
    """The result with what each server node's cores did over its window (`summary.node_cpu`), written
    back to its file; as it was when no samples of the window are on this host."""
    window = measured_window(result)
    if window is None:
        return result
    telemetry = output.parent.parent / "telemetry"  # <run>/cells/<key>.json beside <run>/telemetry
    found = node_cpu_in_window(sorted(telemetry.glob("*.node.*.jsonl")), *window)
    if not found:
        return result
    result["summary"]["node_cpu"] = found
    write_result(result, output)
    return load_result(output)


def measured_window(result: dict) -> tuple[float, float] | None:
    """(t0, the last token or send) of the result, monotonic; None without a request."""
    ends = [r.get("last_token_s") or r.get("sent_s") or 0.0 for r in result.get("requests") or []]
    if not ends:
        return None
    t0 = float(result["t0"]["monotonic"])
    return t0, t0 + max(ends)


def node_cpu_in_window(paths: list[Path], t0: float, t_end: float, wait_s: float = SAMPLES_AFTER_S) -> list[dict]:
    """Per node sample file whose sampler follows a server (`cpu_ticks`) and was sampling during the
    window: the cores' ticks of the samples whose interval's middle lies in [t0, t_end], as shares of
    the cores' time. Waits (at most `wait_s`) for a sample after the window's end."""
    found = []
    started_wall = time.time() - (time.monotonic() - t0)
    for path in paths:
        if path.name.endswith(".raw.jsonl") or not _written_since(path, started_wall):
            continue  # another host's samples in its clock, or a sampler that stopped before the window
        if not _samples_since(path, t0):
            continue  # a sampler following no server: the client node's
        samples = poll(lambda: _samples_since(path, t0), wait_s, interval_s=0.1,
                       until=lambda rows: bool(rows) and rows[-1]["t_mono"] >= t_end)
        figures = _window_figures(samples, t0, t_end)
        if figures is not None:
            found.append(figures)
    return found


def _written_since(path: Path, wall: float) -> bool:
    try:
        return path.stat().st_mtime >= wall
    except OSError:
        return False


def _samples_since(path: Path, t0: float, block: int = 1 << 16) -> list[dict]:
    """The file's samples that carry `cpu_ticks`, from the last one before t0 on (read from its end)."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as handle:
            start = size
            while True:
                start = max(0, start - block)
                handle.seek(start)
                lines = handle.read(size - start).split(b"\n")
                rows = [row for line in (lines if start == 0 else lines[1:]) if (row := _row(line))]
                if start == 0 or (rows and rows[0]["t_mono"] < t0):
                    return rows
                block *= 2
    except OSError:
        return []


def _row(line: bytes) -> dict | None:
    try:
        row = json.loads(line)
    except ValueError:  # a line being written
        return None
    return row if isinstance(row, dict) and "cpu_ticks" in row and "t_mono" in row else None


def _window_figures(samples: list[dict], t0: float, t_end: float) -> dict | None:
    keys = ("all", "server", "servebench", "foreign")
    totals = dict.fromkeys(keys, 0)
    foreign: dict[str, int] = {}
    covered = 0.0
    for before, row in zip(samples, samples[1:]):
        if not t0 <= (before["t_mono"] + row["t_mono"]) / 2 <= t_end:
            continue
        covered += row["t_mono"] - before["t_mono"]
        ticks = row["cpu_ticks"]
        for key in keys:
            totals[key] += ticks.get(key, 0)
        for name, used in (ticks.get("foreign_top") or {}).items():
            foreign[name] = foreign.get(name, 0) + used
    if totals["all"] <= 0:
        return None
    cores = format_cpu_list([int(c) for c in samples[-1].get("cpu_pct_per_core", {})])
    top = sorted(foreign.items(), key=lambda item: -item[1])[:TOP_NAMED]
    return {"node": samples[-1]["node"], "cores": cores, "seconds": round(covered, 3),
            **{f"{key}_share": round(min(1.0, totals[key] / totals["all"]), 4)
               for key in ("server", "servebench", "foreign")},
            "top_foreign": ", ".join(f"{name}: {used / totals['all']:.2f}" for name, used in top) or None}
