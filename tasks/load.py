"""Load stage: one cell's load, run by `servebench load` in its own process.

A separate process keeps the flow's own threads (Prefect's logging and events) off the
generator's event loop; the cell's JSON result stays in the run directory.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from prefect import task
from prefect.cache_policies import NONE

from servebench.cpus import format_cpu_list
from servebench.engines import Engine
from servebench.load.config import LoadConfig, to_argv
from servebench.load.runner import load_result
from servebench.campaign.placement import ClientPlacement
from servebench.campaign.schema import Campaign
from servebench.campaign.sweep import Cell


def cell_load_config(campaign: Campaign, cell: Cell, base_url: str, served_name: str, vocab_size: int,
                     client: ClientPlacement, engine: Engine) -> LoadConfig:
    """The cell's load with the engine's request extensions, run on the generator's own CPUs and
    judged by the campaign's validity limits."""
    load, validity = campaign.load, campaign.validity
    return LoadConfig(
        base_url=base_url, model=served_name, rate=cell.point.rate, clients=cell.point.clients,
        arrival=load.arrival, input_len=load.input_len, output_len=load.output_len, vocab_size=vocab_size,
        requests=load.requests, duration=load.duration, warmup=load.warmup, seed=cell.seed,
        timeout_s=load.timeout_s, max_schedule_lag_ms=validity.max_schedule_lag_ms,
        min_achieved_fraction=validity.min_achieved_fraction, max_client_cpu=validity.max_client_cpu,
        cpus=format_cpu_list(client.cpus) if client.cpus else None, nice=load.client.nice,
        request_extras=dict(engine.request_extras), token_counter=engine.generation_tokens_metric,
    )


def requests_csv_path(output: str) -> str:
    return str(Path(output).with_suffix(".requests.csv"))


@task(name="load", cache_policy=NONE)
def run_cell_load(config: LoadConfig, output: str) -> dict:
    """Run the load; raise with the generator's own words if it did not produce a result."""
    argv = [sys.executable, "-m", "servebench", "load", *to_argv(config), "--output-json", output,
            "--requests-csv", requests_csv_path(output), "--quiet"]
    done = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if done.returncode != 0 or not Path(output).exists():
        raise RuntimeError(f"load generator exited {done.returncode}: {(done.stderr or done.stdout)[-2000:]}")
    return load_result(Path(output))
