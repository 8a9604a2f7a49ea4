"""A campaign against a server servebench did not start: a real vLLM server of the e2e campaign's tiny model,
started by hand (tests/support/served.py) and asking for a key of its own, measured by an `engine: {kind:
endpoint}` campaign through the real flow (Prefect, the load generator, telemetry, DuckDB, the report, the
regression history), as a site's server would be.

Asserted: the run completes with its two closed-loop cells landed and valid, their requests landed, server
samples scraped from the server's /metrics with the key, the gate `unchecked` for want of a named reference
(never a pass), the server's row with no process of servebench's, no build; the report rendered; the run's
series in the regression history; the server still serving after the run (the run never stops it), and its
key in no file of the run but its 0600 key file, and not in the warehouse."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
import yaml

from servebench import warehouse
from servebench.load.run_secret import ensure_run_secret, read_token
from servebench.serving.server import is_healthy
from servebench.warehouse.history import nights, run_series
from tests.support.served import first_mode_served

SERVER_CAMPAIGN = Path(__file__).parents[1] / "campaigns" / "good" / "e2e.yaml"  # tiny-llama on CPU 0
KEY_VARIABLE = "SERVEBENCH_TEST_ENDPOINT_KEY"
CELLS = ["site.c1.r0", "site.c2.r0"]
REQUESTS = 6
pytestmark = pytest.mark.vllm


def endpoint_campaign(path: Path, url: str) -> Path:
    """Two closed-loop points of a few short requests against the server at `url`; the load generator on
    CPU 1, the node sampler watching CPU 0, where the server runs."""
    path.write_text(yaml.safe_dump({
        "name": "endpoint-e2e",
        "provider": {"kind": "local", "nodes": [{"name": "node0", "cpus": "0"}]},
        "engine": {"kind": "endpoint", "url": url, "served_model": "tiny", "api": "vllm",
                   "api_key_env": KEY_VARIABLE},
        "model": {"generate": "tiny-llama"},
        "modes": [{"name": "site"}],
        "load": {"clients": [1, 2], "requests": REQUESTS, "input_len": 16, "output_len": 8},
    }, sort_keys=False))
    return path


def test_a_vllm_server_started_by_hand_is_measured_landed_reported_and_in_the_history(isolated, tmp_path,
                                                                                        monkeypatch):
    from servebench.flows.campaign import campaign_run
    from tests.support.prefect_session import session_api_url

    server_key = ensure_run_secret(tmp_path / "server")      # the hand-started server's own key
    token = read_token(server_key)
    monkeypatch.setenv(KEY_VARIABLE, token)
    session_api_url()  # the flow reports to the session's Prefect server
    with first_mode_served(SERVER_CAMPAIGN, tmp_path / "server-logs", secret_file=server_key) as (server, _, _):
        campaign = endpoint_campaign(tmp_path / "endpoint.yaml", server.url)
        outcome = campaign_run(campaign_file=str(campaign), warehouse_path=str(isolated))
        assert is_healthy(server), "the run stopped a server it did not start"
    assert outcome["status"] == "completed", outcome
    run_id, run_dir = outcome["run_id"], Path(outcome["run_dir"])

    con = warehouse.connect(isolated, read_only=True)
    cells = con.execute("select cell_key, status, valid, correctness, client_output_tokens, server_output_tokens "
                        "from cells where run_id = ? order by cell_key", [run_id]).fetchall()
    assert [c[0] for c in cells] == CELLS
    for key, status, valid, correctness, client_tokens, server_tokens in cells:
        assert (status, valid, correctness) == ("completed", True, "unchecked"), key
        assert client_tokens == server_tokens == REQUESTS * 8, key  # vLLM's own counter, read with the key
    assert con.execute("select count(*) from requests where run_id = ?", [run_id]).fetchone()[0] == 2 * REQUESTS
    samples = con.execute("select count(*), max(generation_tokens_total) from server_samples where run_id = ? "
                          "and mode = 'site'", [run_id]).fetchone()
    assert samples[0] > 0 and samples[1] > 0, samples   # scraped with the key (the gate's tokens at least)
    row = con.execute("select engine, pid, command, build_key, correctness, correctness_detail from servers "
                      "where run_id = ?", [run_id]).fetchone()
    assert row[:5] == ("endpoint", None, [], None, "unchecked") and "not checked: no reference named" in row[5]
    assert con.execute("select count(*) from builds").fetchone()[0] == 0

    assert Path(outcome["report"]).is_file()
    series = [s["series_id"] for s in run_series(con, run_id)]
    assert len(series) == len(CELLS)
    assert {n["run_id"] for n in nights(con, series, con.execute(
        "select started_at from runs where run_id = ?", [run_id]).fetchone()[0])} == {run_id}
    con.close()

    key_file = run_dir / "secret" / f"key.{KEY_VARIABLE}"
    assert key_file.read_text() == token and stat.S_IMODE(key_file.stat().st_mode) == 0o600
    holding = [str(p) for p in run_dir.rglob("*") if p.is_file() and p != key_file and token.encode() in p.read_bytes()]
    assert holding == [] and token.encode() not in isolated.read_bytes()
