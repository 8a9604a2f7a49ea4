"""`servebench plan`, `predict` and `build --dry-run` make no network request: every shipped campaign
planned with the network cut (every socket's connect refused, so a download attempt fails loudly instead of
timing out) and an empty cache, none fails for it, and nothing is fetched into the cache. What a build
would fetch is a line of the dry run, naming the command that fetches it."""

from __future__ import annotations

import socket

import pytest

from servebench.campaign.loading import shipped_campaigns
from servebench.cli import main

CONNECTS: list[object] = []


@pytest.fixture
def network_cut(monkeypatch, tmp_path):
    """No socket may connect (a Unix socket too: nothing a plan does needs one); an empty cache."""
    def refused(self, address):
        CONNECTS.append(address)
        raise OSError(f"network cut by the test: connect to {address!r}")

    CONNECTS.clear()
    monkeypatch.setattr(socket.socket, "connect", refused)
    monkeypatch.setattr(socket.socket, "connect_ex", refused)
    monkeypatch.setenv("SERVEBENCH_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def fetched(cache) -> list[str]:
    return sorted(str(p.relative_to(cache)) for p in (cache / "sources").rglob("*")) if (cache / "sources").exists() \
        else []


def test_every_shipped_campaign_plans_without_the_network(network_cut, capsys):
    campaigns = shipped_campaigns()
    assert len(campaigns) > 20
    failed = {}
    for path in campaigns:
        code = main(["plan", str(path)])
        out = capsys.readouterr()
        if code != 0 or "Traceback" in out.err:
            failed[path.name] = (code, out.err[-400:])
    assert failed == {}
    assert CONNECTS == [] and fetched(network_cut) == []


def test_predict_and_the_dry_run_fetch_nothing_and_say_what_build_fetches(network_cut, capsys):
    assert main(["predict", "llamacpp-workloads"]) == 0
    main(["build", "--dry-run", "llamacpp-workloads"])
    out = capsys.readouterr().out
    assert "the sdist llama-cpp-python==" in out and "`servebench build CAMPAIGN` fetches it" in out
    assert CONNECTS == [] and fetched(network_cut) == []
