"""A `replicas` mode without nginx: where nginx is looked for (the campaign's binary, PATH, /usr/sbin/nginx),
who balances (a mode's `balanced_by`, the campaign's `balancing`, else nginx where found and the load
generator otherwise), the refusal when nginx is asked for and missing, what the plan and the build's dry run
say, and the load generator spreading requests itself: least outstanding requests first, ties in turn,
each request's replica in its record (servebench/planning/balancing.py, servebench/load/balance.py)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from servebench.campaign.loading import SpecError, parse_campaign
from servebench.load.balance import ReplicaPicker
from servebench.load.config import LoadConfig, to_argv
from servebench.load.runner import run_load
from servebench.planning import balancing
from servebench.planning.balancing import (
    NginxFound,
    balancing_choice,
    balancing_prerequisites,
    find_nginx,
    remote_lookup_argv,
)
from servebench.serving.balancer import plan_lines
from tests.support.fake_openai_server import FakeServer

CAMPAIGN = """
name: t
provider: {kind: local, nodes: [{name: n0, cpus: "0"}, {name: n1, cpus: "1"}]}
model: {generate: tiny-llama}
modes: [MODES]
load: {clients: [1], requests: 4, client: {cpus: shared}}
BALANCING
"""


def campaign_text(modes: str, balancing_block: str = "") -> str:
    return CAMPAIGN.replace("MODES", modes).replace("BALANCING", balancing_block)


def fake_nginx(directory: Path, executable: bool = True) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    binary = directory / "nginx"
    binary.write_text("#!/bin/sh\nexit 0\n")
    binary.chmod(0o755 if executable else 0o644)
    return binary


@pytest.fixture
def no_nginx(tmp_path, monkeypatch) -> Path:
    """This process without nginx: a PATH of one empty directory and no Debian binary (a directory of this
    test's that holds none)."""
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.setattr(balancing, "SYSTEM_NGINX", str(tmp_path / "no-sbin" / "nginx"))
    return empty


def lookup_with(binary: str | None):
    return lambda named: NginxFound(binary, "PATH" if binary else "PATH, then /usr/sbin/nginx")


# --- where nginx is looked for


def test_nginx_is_the_named_binary_else_the_first_on_path_else_the_system_one(tmp_path):
    site = fake_nginx(tmp_path / "site" / "sbin")
    first, second = fake_nginx(tmp_path / "a"), fake_nginx(tmp_path / "b")
    system = fake_nginx(tmp_path / "sbin")
    assert find_nginx(str(site), path=f"{first.parent}", system=str(system)) == \
        NginxFound(str(site), f"the campaign's balancing.nginx {site}")
    assert find_nginx(path=f"{first.parent}:{second.parent}", system=str(system)).binary == str(first)
    assert find_nginx(path=str(tmp_path / "nowhere"), system=str(system)) == \
        NginxFound(str(system), f"PATH, then {system}")
    assert find_nginx(path=str(tmp_path / "nowhere"), system=str(tmp_path / "none")).binary is None


def test_a_named_binary_that_is_missing_or_not_executable_is_not_nginx_even_with_one_on_path(tmp_path):
    on_path = fake_nginx(tmp_path / "bin")
    flat = fake_nginx(tmp_path / "flat", executable=False)
    assert find_nginx(str(flat), path=str(on_path.parent)) == \
        NginxFound(None, f"the campaign's balancing.nginx {flat} (not executable)")
    assert find_nginx(str(tmp_path / "gone"), path=str(on_path.parent)).looked.endswith("(no such file)")


def test_a_node_of_another_host_prints_its_nginx_or_nothing(tmp_path):
    """The short command run on a client node of another host when the mode starts, here run locally."""
    site = fake_nginx(tmp_path / "site")
    env = {"PATH": f"{tmp_path / 'empty'}:/usr/bin:/bin"}

    def run(argv: list[str], path: str) -> str:
        return subprocess.run(argv, capture_output=True, text=True, env=env | {"PATH": path}, check=True).stdout.strip()

    assert run(remote_lookup_argv(str(site)), env["PATH"]) == str(site)
    assert run(remote_lookup_argv(str(tmp_path / "gone")), env["PATH"]) == ""
    assert run(remote_lookup_argv(None, system=str(tmp_path / "none")), f"{site.parent}:/usr/bin:/bin") == str(site)
    assert run(remote_lookup_argv(None, system=str(tmp_path / "none")), str(tmp_path / "empty")) == ""


# --- who balances


@pytest.mark.parametrize("modes, block, found, by, explicit", [
    ("{name: r2, replicas: 2}", "", "/opt/nginx", "nginx", False),
    ("{name: r2, replicas: 2}", "", None, "client", False),
    ("{name: r2, replicas: 2, balanced_by: client}", "", "/opt/nginx", "client", True),
    ("{name: r2, replicas: 2}", "balancing: {by: client}", "/opt/nginx", "client", True),
    ("{name: r2, replicas: 2, balanced_by: nginx}", "balancing: {by: client}", "/opt/nginx", "nginx", True),
])
def test_the_mode_then_the_campaign_choose_else_nginx_where_found_and_the_load_generator_otherwise(
        modes, block, found, by, explicit):
    campaign = parse_campaign(campaign_text(modes, block), host_cpus={0, 1})
    choice = balancing_choice(campaign, campaign.modes[0], lookup_with(found))
    assert (choice.by, choice.explicit, choice.problem) == (by, explicit, None), choice
    assert choice.nginx == (found if by == "nginx" else None)


def test_without_nginx_the_default_is_the_load_generator_and_the_plan_line_names_the_choices():
    campaign = parse_campaign(campaign_text("{name: r2, replicas: 2}"), host_cpus={0, 1})
    choice = balancing_choice(campaign, campaign.modes[0], lookup_with(None))
    line = choice.line("r2", "least-connections")
    assert line.startswith("  balancing by the load generator (least-connections: the replica with the fewest "
                           "requests in flight, ties in turn"), line
    assert "no nginx on this host (looked for: PATH, then /usr/sbin/nginx)" in line, line
    assert "`balancing: {nginx: /path/to/sbin/nginx}`" in line and "`balanced_by: client`" in line, line


@pytest.mark.parametrize("modes, block, field, said", [
    ("{name: r2, replicas: 2, balanced_by: nginx}", "", "modes[0].balanced_by", "the mode's balanced_by: nginx"),
    ("{name: r2, replicas: 2}", "balancing: {by: nginx}", "balancing.by", "the campaign's balancing.by: nginx"),
    ("{name: r2, replicas: 2}", "balancing: {nginx: /opt/site/sbin/nginx}", "balancing.nginx",
     "the campaign names /opt/site/sbin/nginx"),
])
def test_nginx_asked_for_where_there_is_none_is_refused_naming_the_field_what_is_missing_and_the_choices(
        no_nginx, modes, block, field, said):
    with pytest.raises(SpecError) as caught:
        parse_campaign(campaign_text(modes, block), host_cpus={0, 1})
    found = [(p.field, p.message) for p in caught.value.problems]
    assert len(found) == 1 and found[0][0] == field, found
    message = found[0][1]
    assert message.startswith(f"mode r2: {said}, but there is no nginx on this host (looked for: "), message
    assert "name the binary" in message and "`balanced_by: client`" in message, message


def test_a_campaign_that_names_its_own_nginx_uses_it(no_nginx, tmp_path):
    site = fake_nginx(tmp_path / "site" / "sbin")
    campaign = parse_campaign(campaign_text("{name: r2, replicas: 2}", f"balancing: {{nginx: {site}}}"),
                              host_cpus={0, 1})
    choice = balancing_choice(campaign, campaign.modes[0])
    assert (choice.by, choice.nginx, choice.why) == ("nginx", str(site), f"the campaign's balancing.nginx {site}")
    lines = plan_lines("r2", "least-connections", {"r0": "http://127.0.1.1:PORT"}, "this host", choice)
    assert lines[2].startswith("    /bin/sh -c 'trap") and f"{site} -p RUN_DIR/balancer/r2" in lines[2], lines


def test_the_fields_need_replicas_keep_older_spec_hashes_and_want_an_absolute_nginx():
    with pytest.raises(SpecError, match="balanced_by: client needs replicas > 1"):
        parse_campaign(campaign_text("{name: one, balanced_by: client}"), host_cpus={0, 1})
    with pytest.raises(SpecError, match="is not an absolute path"):
        parse_campaign(campaign_text("{name: r2, replicas: 2}", "balancing: {nginx: sbin/nginx}"), host_cpus={0, 1})
    plain = parse_campaign(campaign_text("{name: r2, replicas: 2}"), host_cpus={0, 1})
    assert "balancing" not in plain.normalized() and "balanced_by" not in plain.normalized()["modes"][0]
    spelled = parse_campaign(campaign_text("{name: r2, replicas: 2, balanced_by: null}", "balancing: {}"),
                             host_cpus={0, 1})
    chosen = parse_campaign(campaign_text("{name: r2, replicas: 2, balanced_by: client}"), host_cpus={0, 1})
    assert plain.spec_hash() == spelled.spec_hash() != chosen.spec_hash()


def test_the_plan_says_the_load_generator_balances_when_there_is_no_nginx(no_nginx, tmp_path):
    from servebench.cli.plan import describe_plan
    from servebench.planning.plan import make_plan

    file = tmp_path / "r.yaml"
    file.write_text(campaign_text("{name: r2, replicas: 2, knobs: {enforce_eager: true}}"))
    campaign = parse_campaign(file.read_text(), base_dir=tmp_path, host_cpus={0, 1})
    text = describe_plan(make_plan(campaign, {0, 1}), file)
    assert "  balancing by the load generator (least-connections: the replica with the fewest requests in " \
           "flight" in text, text
    assert "  balancer none: the load generator on this host (127.0.0.1, beside the load generator) sends to " \
           "r0 http://127.0.1.1:PORT, r1 http://127.0.1.2:PORT" in text, text
    assert "nginx -p" not in text, text


def test_the_build_dry_run_names_each_replicas_modes_balancer(no_nginx, tmp_path):
    from servebench.cli.build import balancing_text

    site = fake_nginx(tmp_path / "site")
    mixed = parse_campaign(campaign_text("{name: tp1, nodes: [n0]}, {name: r2, replicas: 2}, "
                                         "{name: r2c, replicas: 2, balanced_by: client}"), host_cpus={0, 1})
    text = balancing_text(mixed)
    assert text.splitlines()[0] == "replicas modes' balancing:" and "tp1" not in text, text
    assert "[ok     ] balancer of mode r2: the load generator (no nginx on this host" in text, text
    assert "[ok     ] balancer of mode r2c: the load generator (the mode's balanced_by: client)" in text, text
    named = parse_campaign(campaign_text("{name: r2, replicas: 2}", f"balancing: {{nginx: {site}}}"),
                           host_cpus={0, 1})
    rows = balancing_prerequisites(named)
    assert [(row.met, row.found) for row in rows] == [(True, str(site))], rows
    assert balancing_text(parse_campaign(campaign_text("{name: tp1}"), host_cpus={0, 1})) == ""


# --- least outstanding requests first


def test_the_fewest_in_flight_take_the_next_request_ties_in_turn():
    picker = ReplicaPicker(3)
    assert [picker.pick() for _ in range(3)] == [0, 1, 2]      # all tied: in turn
    picker.done(1)
    assert picker.pick() == 1                                  # the only one with fewer in flight
    picker.done(0)
    picker.done(2)
    assert picker.in_flight == [0, 1, 0] and picker.pick() == 2   # 0 and 2 tied: the one after the last (1)
    assert picker.pick() == 0 and picker.in_flight == [1, 1, 1]
    assert picker.pick() == 1 and picker.sent == [2, 3, 2]
    with pytest.raises(ValueError, match="no request in flight"):
        ReplicaPicker(2).done(0)


def test_round_robin_takes_the_replicas_in_turn_whatever_they_hold():
    picker = ReplicaPicker(2, "round-robin")
    assert [picker.pick() for _ in range(5)] == [0, 1, 0, 1, 0] and picker.in_flight == [3, 2]
    with pytest.raises(ValueError, match="replica policy 'random'"):
        ReplicaPicker(2, "random")


def load_over(servers: dict[str, FakeServer], policy: str, requests: int = 20) -> dict:
    config = LoadConfig(base_url=servers["r0"].url, model="m", clients=2, requests=requests, input_len=5,
                        output_len=4, vocab_size=100, timeout_s=10,
                        replica_urls={name: server.url for name, server in servers.items()}, replica_policy=policy,
                        request_extras={"stream_options": {"include_usage": True, "continuous_usage_stats": True}})
    return run_load(config)


def test_the_load_generator_sends_most_requests_to_the_replica_that_answers_sooner():
    """Two clients over a fast and a slow replica: least-connections gives the fast one the requests its
    quick answers free it for; round-robin splits them evenly whatever each holds."""
    with FakeServer() as fast, FakeServer(token_delay_s=0.05) as slow:
        least = load_over({"r0": fast, "r1": slow}, "least-connections")
        fast_served = len(fast.requests)
        robin = load_over({"r0": fast, "r1": slow}, "round-robin")
    served = least["summary"]["replica_requests"]
    assert sum(served.values()) == 20 and served["r0"] == fast_served and served["r0"] >= 15, served
    assert {r["replica"] for r in least["requests"]} == {"r0", "r1"}
    assert [r["replica"] for r in least["requests"]].count("r1") == served["r1"]
    assert robin["summary"]["replica_requests"] == {"r0": 10, "r1": 10}, robin["summary"]["replica_requests"]
    assert least["summary"]["completed"] == robin["summary"]["completed"] == 20


def test_one_server_keeps_its_requests_unnamed_and_its_summary_without_replicas():
    with FakeServer() as server:
        result = run_load(LoadConfig(base_url=server.url, model="m", clients=1, requests=2, input_len=5,
                                     output_len=2, vocab_size=100, timeout_s=5))
    assert [r["replica"] for r in result["requests"]] == [None, None]
    assert "replica_requests" not in result["summary"]


def test_the_replicas_travel_as_flags_and_their_text_forms_parse():
    from servebench.cli import build_parser
    from servebench.cli.load import config_from_args

    config = LoadConfig(base_url="http://h:1", model="m", clients=2, requests=4, token_counter=None,
                        replica_urls={"r0": "http://h:1", "r1": "http://h:2"}, replica_policy="round-robin")
    assert config_from_args(build_parser().parse_args(["load", *to_argv(config)])) == config
    assert LoadConfig(base_url="http://h:1", model="m", clients=1, requests=1,
                      replica_urls="r0=http://h:1, r1=http://h:2").replica_urls == config.replica_urls
    with pytest.raises(ValueError, match="give NAME=URL"):
        LoadConfig(base_url="http://h:1", model="m", clients=1, requests=1, replica_urls="http://h:1")


def test_a_cells_load_config_takes_the_replicas_the_load_generator_balances():
    from servebench.campaign.load_config import LoadTarget, cell_load_config
    from servebench.config.sweep import expand
    from servebench.engines import get_engine
    from servebench.planning.placement import client_placement
    from servebench.serving import mode_server

    campaign = parse_campaign(campaign_text("{name: r2, replicas: 2, balancer: round-robin}"), host_cpus={0, 1})
    cell = expand(campaign)[0]
    urls = {"r0": "http://127.0.1.1:8000", "r1": "http://127.0.1.2:8001"}
    mode_server.CLIENT_BALANCED[urls["r0"]] = (urls, "round-robin")
    try:
        target = LoadTarget(urls["r0"], "m", "/health", tuple(urls.values()))
        config = cell_load_config(campaign, cell, target, 500, client_placement(campaign, {0, 1}), get_engine("vllm"))
    finally:
        del mode_server.CLIENT_BALANCED[urls["r0"]]
    assert (config.replica_urls, config.replica_policy, config.metrics_urls) == \
        (urls, "round-robin", list(urls.values()))
    plain = cell_load_config(campaign, cell, LoadTarget("http://127.0.0.1:9000", "m"), 500,
                             client_placement(campaign, {0, 1}), get_engine("vllm"))
    assert plain.replica_urls == {}


def test_every_replicas_gate_verdict_is_one_the_worst():
    from servebench.serving.correctness import GateResult
    from servebench.serving.mode_server import replicas_verdict

    verdict = replicas_verdict([GateResult(status="passed", detail="equal"), GateResult(status="close", detail="near")],
                               ["r0", "r1"])
    assert verdict.status == "close" and verdict.detail == "every replica asked: r0: passed: equal; r1: close: near"
    assert replicas_verdict([GateResult(status="failed", detail="x"), GateResult(status="passed", detail="y")],
                            ["r0", "r1"]).status == "failed"


def test_no_nginx_fixture_hides_it(no_nginx):
    assert find_nginx().binary is None and os.environ["PATH"] == str(no_nginx)


SSH_REPLICAS = """
name: t
provider: {kind: ssh, hosts: [{name: h1, address: 198.18.0.1, cpus: "0"}, {name: h2, address: 198.18.0.2, cpus: "0"},
                              {name: h3, address: 198.18.0.3, cpus: "0-1"}]}
model: {generate: tiny-llama}
modes: [{name: r2, replicas: 2, nodes: [h1, h2]}]
load: {clients: [1], requests: 4, client: {node: h3}}
BALANCING
"""


@pytest.mark.parametrize("block, explicit, said", [
    ("", False, "without one there the load generator balances"),
    ("balancing: {by: nginx}", True, "the campaign's balancing.by: nginx, so the mode fails there without it"),
    ("balancing: {nginx: /opt/nginx/sbin/nginx}", True,
     "the campaign names /opt/nginx/sbin/nginx, so the mode fails there without it"),
])
def test_on_a_client_node_of_another_host_nginx_is_looked_up_there_when_the_mode_starts(no_nginx, block, explicit,
                                                                                        said):
    """Nothing of the node can be seen before the run: no refusal here (this host has no nginx), the lookup
    is left to the start, and the plan says so."""
    campaign = parse_campaign(SSH_REPLICAS.replace("BALANCING", block), host_cpus={0, 1})
    choice = balancing_choice(campaign, campaign.modes[0])
    assert (choice.by, choice.checked, choice.explicit, choice.problem) == ("nginx", False, explicit, None), choice
    assert choice.why.startswith("nginx looked up on node h3 when the mode starts (") and choice.why.endswith(said)
    assert balancing_prerequisites(campaign)[0].met


class NodeLookup:
    """A provider whose client node answers the nginx lookup with `printed` (and records the command)."""

    def __init__(self, printed: str):
        self.printed, self.commands = printed, []

    def run(self, node, argv, timeout=None):
        self.commands.append(argv)
        return subprocess.CompletedProcess(argv, 0, stdout=self.printed, stderr="")


@pytest.mark.parametrize("block, printed, expected", [
    ("", "/usr/sbin/nginx\n", ("nginx", "/usr/sbin/nginx")),
    ("", "", ("client", None)),
    ("balancing: {by: nginx}", "", "node h3 has none (looked for: PATH, then /usr/sbin/nginx)"),
    ("balancing: {nginx: /opt/nginx/sbin/nginx}", "", "node h3 has none (looked for: /opt/nginx/sbin/nginx)"),
])
def test_the_client_nodes_answer_decides_when_the_mode_starts(no_nginx, block, printed, expected):
    from types import SimpleNamespace

    from servebench.serving.balancer import BalancerFailed
    from servebench.serving.mode_server import mode_balancing

    campaign = parse_campaign(SSH_REPLICAS.replace("BALANCING", block), host_cpus={0, 1})
    provider = NodeLookup(printed)
    deployment = SimpleNamespace(campaign=campaign, provider=provider, client=SimpleNamespace(node=SimpleNamespace(
        name="h3")))
    if isinstance(expected, str):
        with pytest.raises(BalancerFailed, match=expected.replace("(", r"\(").replace(")", r"\)")):
            mode_balancing(deployment, campaign.modes[0])
    else:
        choice = mode_balancing(deployment, campaign.modes[0])
        assert (choice.by, choice.nginx) == expected, choice
    assert provider.commands == [remote_lookup_argv(campaign.balancing.nginx)]
