"""A cell's load, run by the load generator in a process of its own, on the orchestrator's host or
on the campaign's client node.

A separate process keeps the orchestrator's own threads (Prefect's logging and events) off the
generator's event loop; the cell's JSON result stays in the run directory. On a client node
the generator runs from its own tree (`servebench.distribution.load_tree`) and its files are brought
back, its start moved onto the orchestrator's clocks. Either way a run that outlives its
deadline (`servebench.load.config.deadline_s`) is stopped and the cell fails saying so.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from servebench.load.config import LoadConfig, deadline_s
from servebench.load.on_node import REQUESTS_NAME, RESULT_NAME
from servebench.load.runner import load_result, write_result
from servebench.logs import tail_text
from servebench.providers.node_tools import INSTRUMENT_VARIABLE, MARK_VARIABLE
from servebench.serving.deployment import ClientNode
from servebench.telemetry.timebase import load_result_in_orchestrator_time
from servebench.waiting import poll

POLL_S = 0.5
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
