"""`servebench` command lines a test starts as processes of their own (to kill them, or to run
two at once), with the test-only echo engine and plain provider plugged in."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from servebench import warehouse
from servebench.paths import CHECKOUT
from tests.support.prefect_session import session_api_url


def echo_campaign_dir(tmp_path: Path, campaigns: dict[str, str]) -> Path:
    """The echo engine's model directory and the campaign files (name -> YAML text) in tmp_path."""
    (tmp_path / "model").mkdir(exist_ok=True)
    (tmp_path / "model" / "config.json").write_text(json.dumps(
        {"vocab_size": 500, "num_attention_heads": 4, "num_hidden_layers": 2}))
    for name, text in campaigns.items():
        (tmp_path / name).write_text(text)
    return tmp_path


def servebench(tmp_path: Path, *args: str) -> subprocess.Popen:
    """`servebench ARGS` in a session of its own (stdout and stderr together, as text)."""
    env = os.environ | {"SERVEBENCH_PLUGINS": "tests.support.plugins", "SERVEBENCH_RUNS": str(tmp_path / "runs"),
                        "SERVEBENCH_CACHE": str(tmp_path / "cache"), "PYTHONPATH": str(CHECKOUT),
                        "PREFECT_API_URL": session_api_url()}  # not a temporary server of its own: 15 s each
    return subprocess.Popen([sys.executable, "-m", "servebench", *args], env=env, cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)


def finish(process: subprocess.Popen, timeout: float = 600) -> tuple[int, str]:
    out, _ = process.communicate(timeout=timeout)
    return process.returncode, out


def cells_of(db: Path, run_id: str | None = None) -> list[tuple]:
    """(cell key, status, requests landed) of every cell (of one run), by key."""
    con = warehouse.connect(db, read_only=True)
    try:
        where, params = ("where run_id = ?", [run_id]) if run_id else ("", [])
        return con.execute("select cell_key, status, (select count(*) from requests r where r.cell_id = c.cell_id) "
                           f"from cells c {where} order by cell_key", params).fetchall()
    finally:
        con.close()


def run_echo_campaign(tmp_path: Path, warehouse_path: Path, monkeypatch, campaign_text: str) -> dict:
    """The campaign (test-only echo engine and plain provider, registered for this test only)
    through the real flow in this process (reporting to the session's Prefect server); its outcome."""
    import servebench.engines
    import servebench.providers
    from servebench.flows.campaign import campaign_run
    from tests.support.echo_engine import EchoEngine
    from tests.support.plain_provider import PlainProvider

    monkeypatch.setitem(servebench.engines._ENGINES, EchoEngine.kind, EchoEngine)
    monkeypatch.setitem(servebench.providers._PROVIDERS, PlainProvider.kind, PlainProvider)
    monkeypatch.setenv("SERVEBENCH_CACHE", str(tmp_path / "cache"))
    echo_campaign_dir(tmp_path, {"campaign.yaml": campaign_text})
    session_api_url()  # the flow reports to the session's Prefect server
    return campaign_run(campaign_file=str(tmp_path / "campaign.yaml"), warehouse_path=str(warehouse_path))


# One echo engine of 100 ms a request, one at a time (10 req/s), searched for its capacity under a
# 400 ms p99 TTFT: tests/e2e/test_resume.py kills it midway, resumes it and checks what the search landed.
CAPACITY_CAMPAIGN = """
name: capacity
provider: {kind: plain, nodes: [{name: a, cpus: "0"}]}
engine: {kind: echo, token_delay_ms: 1, prefill_ms: 100}   # one engine, 100 ms a request: 10 req/s
model: {path: model}
modes: [{name: single}]
load: {rates: [1], requests: 20, arrival: constant, input_len: 4, output_len: 4, client: {cpus: "1"}}
slo: {ttft_p99_ms: 400}
search: {start: 2}
validity: {on_invalid: warn}
"""


def run_shipped_campaign(source: Path, tmp_path: Path, warehouse_path: Path, change) -> dict:
    """A shipped campaign file, lightened by `change(data)` (the parsed YAML, edited in place), run
    through the real flow in this process (reporting to the session's Prefect server); its outcome."""
    import yaml

    from servebench.flows.campaign import campaign_run

    data = yaml.safe_load(source.read_text())
    change(data)
    campaign = tmp_path / source.name
    campaign.write_text(yaml.safe_dump(data, sort_keys=False))
    session_api_url()  # the flow reports to the session's Prefect server
    return campaign_run(campaign_file=str(campaign), warehouse_path=str(warehouse_path))
