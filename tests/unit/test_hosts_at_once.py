"""Per-node stages bounded by the provider block's `hosts_at_once`, and the block's `placement` way:
what the campaign says reaches the fan-out and `place_on_nodes`, a way the provider lacks is refused
by field, and a block at its defaults keeps its spec hash."""

from __future__ import annotations

import threading
import time

import pytest
from pydantic import ValidationError

from servebench.distribution.artifacts import placement_way
from servebench.providers.fanout import DEFAULT_HOSTS_AT_ONCE, each_node, hosts_at_once, outcomes
from servebench.providers.local.spec import LocalProviderSpec
from servebench.providers.slurm.spec import SlurmProviderSpec
from servebench.providers.ssh.spec import SshProviderSpec

SSH_BLOCK = {"kind": "ssh", "hosts": [{"name": "h1", "address": "198.18.0.1", "cpus": [0]}]}


def test_at_most_the_limit_run_at_once_and_results_keep_the_order() -> None:
    running, most = 0, 0
    lock = threading.Lock()

    def work(item: int) -> int:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        time.sleep(0.02)
        with lock:
            running -= 1
        return item * 10

    assert each_node(list(range(12)), work, limit=3) == [item * 10 for item in range(12)]
    assert 1 < most <= 3


def test_every_node_is_done_before_the_first_failure_is_raised_with_the_others_named() -> None:
    done: list[int] = []

    def work(item: int) -> int:
        if item in (1, 3):
            raise RuntimeError(f"node {item} is down")
        done.append(item)
        return item

    with pytest.raises(RuntimeError, match="node 1 is down") as raised:
        each_node([0, 1, 2, 3, 4], work, limit=2, name=lambda item: f"h{item}")
    assert sorted(done) == [0, 2, 4]
    assert raised.value.__notes__ == ["also h3: node 3 is down"]
    kept = outcomes([0, 1], work, limit=2)
    assert kept[0].result == 0 and isinstance(kept[1].error, RuntimeError)


def test_the_campaign_sets_the_limit_and_the_way() -> None:
    class Provider:
        spec = SshProviderSpec.model_validate(SSH_BLOCK | {"hosts_at_once": 32, "placement": "relay"})

    assert hosts_at_once(Provider()) == 32
    assert placement_way(Provider()) == "relay"  # type: ignore[arg-type]  # only its spec is read
    assert hosts_at_once(object()) == DEFAULT_HOSTS_AT_ONCE


def test_a_broadcast_only_a_provider_with_one_may_choose() -> None:
    with pytest.raises(ValidationError, match="placement 'sbcast' needs a broadcast this provider does not have"):
        SshProviderSpec.model_validate(SSH_BLOCK | {"placement": "sbcast"})
    with pytest.raises(ValidationError, match="placement"):
        LocalProviderSpec.model_validate({"kind": "local", "placement": "sbcast"})
    slurm = SlurmProviderSpec.model_validate({"kind": "slurm", "nodes": 2, "cpus_per_node": 2, "time_limit": "00:30:00",
                                             "placement": "sbcast"})
    assert slurm.placement == "sbcast"
    with pytest.raises(ValidationError, match="hosts_at_once"):
        SshProviderSpec.model_validate(SSH_BLOCK | {"hosts_at_once": 0})


def test_a_block_at_its_defaults_dumps_as_before_the_fields_existed() -> None:
    plain = SshProviderSpec.model_validate(SSH_BLOCK).model_dump()
    assert "placement" not in plain and "hosts_at_once" not in plain
    chosen = SshProviderSpec.model_validate(SSH_BLOCK | {"placement": "relay", "hosts_at_once": 4}).model_dump()
    assert chosen["placement"] == "relay" and chosen["hosts_at_once"] == 4
