"""The network as a sweep axis, through the real flow: a campaign over ssh on a 2-host testbed whose
cells run under a plain link and under 5 ms added on the server's host link (a real delay line,
servebench/devtools/testbed/links.py), with the test-only echo engine (seconds to start: this test is about
the axis, not the engine).

Asserted: the cells carry their setting (key, columns), the same workload runs under each, the
delayed cells' TTFT is at least one added round trip (2 x 5 ms) above the plain ones (physics, not
a tuned threshold), and the links are plain again after the run.
"""

from __future__ import annotations

import pytest

import servebench.engines
from servebench import warehouse
from tests.support.echo_engine import EchoEngine
from tests.support.testbed import echo_model, own_testbed, ssh_provider_yaml

pytestmark = [pytest.mark.testbed, pytest.mark.root]  # the echo engine's flow on testbed hosts

CAMPAIGN = """
name: network-axis
{provider}engine: {{kind: echo, token_delay_ms: 1}}
model: {{path: {model}}}
modes:
  - {{name: single}}
network:
  testbed: {testbed}
  links:
    - {{delay_ms: 0}}
    - {{delay_ms: 5, hosts: [h1]}}
load: {{clients: [1], requests: 20, input_len: 8, output_len: 4, client: {{cpus: "1"}}}}
validity: {{on_invalid: warn}}
"""


def test_cells_run_under_each_link_setting_and_the_delay_shows_in_ttft(isolated, tmp_path, monkeypatch):
    from servebench.devtools.testbed.links import link_state
    from servebench.flows.campaign import campaign_run
    from tests.support.prefect_session import session_api_url

    monkeypatch.setitem(servebench.engines._ENGINES, EchoEngine.kind, EchoEngine)
    monkeypatch.setenv("SERVEBENCH_CACHE", str(tmp_path / "cache"))
    model = echo_model(tmp_path / "model")
    with own_testbed("net", 2) as layout:
        campaign = tmp_path / "campaign.yaml"
        campaign.write_text(CAMPAIGN.format(provider=ssh_provider_yaml(layout), model=model, testbed=layout.name))
        session_api_url()  # the flow reports to the session's Prefect server
        outcome = campaign_run(campaign_file=str(campaign), warehouse_path=str(isolated))
        links_after = link_state(layout)

    assert outcome["status"] == "completed", outcome
    assert all(link["delay_ms"] == 0 and link["rate_mbit"] is None and link["delay_line"] is None
               and not link["problems"] for link in links_after.values()), links_after  # plain again
    con = warehouse.connect(isolated, read_only=True)
    cells = {key: rest for key, *rest in con.execute(
        "select cell_key, link, link_delay_ms, seed, ttft_p50_ms from cells").fetchall()}
    con.close()
    assert set(cells) == {"single.plain.c1.r0", "single.d5ms.c1.r0"}
    plain, delayed = cells["single.plain.c1.r0"], cells["single.d5ms.c1.r0"]
    assert plain[:2] == ["plain", 0.0] and delayed[:2] == ["d5ms", 5.0]
    assert plain[2] == delayed[2]  # the same workload under both settings
    assert delayed[3] - plain[3] >= 2 * 5.0 * 0.95, (plain, delayed)  # at least one added round trip
