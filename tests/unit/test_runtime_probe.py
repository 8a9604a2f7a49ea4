"""What a server process holds before any model, measured on a node for a build: the probe run by a real
python through a provider, kept per host and build, read back by the plan's lookup, refused where it cannot
be measured."""

from __future__ import annotations

import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

from servebench.builds.venv import EngineBuild
from servebench.planning import runtime_probe
from tests.support.plain_provider import PlainProvider, PlainProviderSpec


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SERVEBENCH_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def provider():
    made = PlainProvider(PlainProviderSpec(nodes=[{"name": "a", "cpus": "0"}]), run_id="probe-test")
    made.allocate()
    yield made
    made.release()


def build_of(tmp_path: Path, python: str = sys.executable) -> EngineBuild:
    """A build whose bin/python is `python` (this test's interpreter stands for an engine's)."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True, exist_ok=True)
    if not (venv / "bin" / "python").exists():
        (venv / "bin" / "python").symlink_to(python)
    return EngineBuild(key="engine-0123456789abcdef", engine="e", engine_version="1", packages=[],
                       python_version="3.11", platform="x86_64", venv_path=str(venv), pip_freeze="",
                       build_seconds=None, created_at=datetime.now(timezone.utc))


def test_a_node_is_measured_once_per_build_and_its_figure_is_what_the_process_held(cache, provider, tmp_path):
    node = provider.nodes()[0]
    build = build_of(tmp_path)
    said: list[str] = []
    first = runtime_probe.measure_nodes(provider, [node], {"a": {"hostname": "host-a"}}, build,
                                        ("json", "email.parser"), log=said.append)
    figures = first["a"]
    assert figures["cached"] is False and figures["hostname"] == "host-a" and figures["build_key"] == build.key
    # a python with two standard modules imported: megabytes, never the whole machine's memory
    assert 2 * 2 ** 20 < figures["pss_bytes"] <= figures["rss_bytes"] < 200 * 2 ** 20, figures
    # its own (anonymous) memory and the files it maps make up what it holds
    assert figures["private_bytes"] > 0 and figures["private_bytes"] + figures["shared_bytes"] == figures["rss_bytes"]
    assert said[0].startswith("node a: a server process's runtime ") and "json, email.parser imported" in said[0]
    again = runtime_probe.measure_nodes(provider, [node], {"a": {"hostname": "host-a"}}, build,
                                        ("json", "email.parser"), log=said.append)
    assert again["a"]["cached"] is True and again["a"]["private_bytes"] == figures["private_bytes"]
    # the plan finds it under the host's name, for that build and those modules only
    assert runtime_probe.cached_runtime(["other", "host-a"], build.key, ("json", "email.parser"))["private_bytes"] \
        == figures["private_bytes"]
    assert runtime_probe.cached_runtime(["host-a"], "engine-another", ("json", "email.parser")) is None
    assert runtime_probe.cached_runtime(["host-a"], build.key, ("json",)) is None


def test_a_probe_that_fails_is_said_and_leaves_the_fallback(cache, provider, tmp_path):
    node = provider.nodes()[0]
    said: list[str] = []
    found = runtime_probe.measure_nodes(provider, [node], {}, build_of(tmp_path), ("no_such_module_here",),
                                        log=said.append)
    assert found == {}
    assert said and said[0].startswith("node a: a server process's runtime not measured: exit 1") \
        and "no_such_module_here" in said[0], said
    assert not list(cache.glob(f"{runtime_probe.FOLDER}/*.json"))   # nothing kept for the next plan


def test_an_engine_without_python_servers_or_a_build_without_python_is_not_probed(cache, provider, tmp_path):
    node = provider.nodes()[0]
    binaries = build_of(tmp_path).model_copy(update={"python_version": ""})
    assert runtime_probe.measure_nodes(provider, [node], {}, binaries, ("json",)) == {}
    assert runtime_probe.measure_nodes(provider, [node], {}, build_of(tmp_path), ()) == {}


def test_what_the_probe_printed_instead_of_figures_is_named():
    with pytest.raises(ValueError, match="the probe printed no figures: 'Traceback"):
        runtime_probe.parse("Traceback (most recent call last): ...\n")
    printed = 'noise\n{"private_bytes": 5, "shared_bytes": 1, "import_s": 0.1}\n'
    assert runtime_probe.parse(printed)["private_bytes"] == 5


def test_the_plan_reads_a_local_node_s_measurement_kept_under_this_host_s_name(cache):
    import socket

    from servebench.campaign.loading import load_campaign
    from servebench.engines import get_engine

    campaign = load_campaign(Path(__file__).parents[1] / "campaigns" / "good" / "e2e.yaml")
    engine, spec = get_engine("vllm"), campaign.engine_specs()["vllm"]
    key = runtime_probe.build_key(engine, spec)
    assert key and key.startswith("vllm-")
    names = [node.name for node in campaign.provider.node_specs()]
    assert runtime_probe.measured_runtimes(campaign, engine, spec, names) == {}
    kept = {"private_bytes": 430 * 2 ** 20, "shared_bytes": 200 * 2 ** 20, "import_s": 9.0, "measured_at": 1}
    runtime_probe.keep(cache, runtime_probe.cache_key(socket.gethostname(), key, engine.runtime_modules), kept)
    assert runtime_probe.measured_runtimes(campaign, engine, spec, names) == {name: kept for name in names}
    assert runtime_probe.measured_runtimes(campaign, get_engine("llamacpp"), spec, names) == {}  # no python servers
