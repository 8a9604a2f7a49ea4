"""Ray's start-up and health timeouts by what the nodes run: Ray's own, unless the plan finds a host
oversubscribed (ranks' threads, node samplers and the load generator outnumbering its cores) or the
campaign's `engine.ray_timeouts` says otherwise; the plan says so in a note."""

from __future__ import annotations

import socket

import pytest
from pydantic import ValidationError

from servebench.config.campaign import ModeSpec
from servebench.engines import LaunchRequest, get_engine
from servebench.engines.vllm.ray_cluster import (
    BUSY_HOST_TIMEOUTS,
    STOP_ENV,
    RayCluster,
    TimeoutChoice,
    cluster_loads,
    host_loads,
    inventories,
    plan_cluster,
    timeouts_note,
)
from servebench.engines.vllm.spec import VllmEngineSpec
from servebench.providers import Node
from tests.support.ports import CountingPorts

TWO_LOCAL = [Node(name="node0", address="127.0.1.1", cpus=[0, 1]), Node(name="node1", address="127.0.1.2", cpus=[0, 1])]
TWO_REMOTE = [Node(name="a", address="10.0.0.1", cpus=list(range(8))),
              Node(name="b", address="10.0.0.2", cpus=list(range(8)))]


@pytest.fixture(autouse=True)
def no_inherited_ray_settings(monkeypatch):
    for name in [*BUSY_HOST_TIMEOUTS, *STOP_ENV]:
        monkeypatch.delenv(name, raising=False)


def test_loopback_nodes_are_the_orchestrators_host_with_its_cores_and_the_load_generator():
    (local,) = host_loads(TWO_LOCAL, {"node0": 2, "node1": 2}, local_cores=2)
    # beside the ranks: a sampler and Ray's daemons per node, the API server on the head, the load generator
    assert (local.nodes, local.rank_threads, local.others, local.cores) == (("node0", "node1"), 4, 6, 2)
    assert local.oversubscribed and "4 rank threads and 6 other processes" in local.text()
    (roomy,) = host_loads(TWO_LOCAL[:1], {"node0": 2}, local_cores=16)
    assert not roomy.oversubscribed and roomy.rank_threads + roomy.others == 6


def test_without_inventories_another_address_is_a_host_of_the_cpus_the_campaign_gives_it():
    loads = host_loads(TWO_REMOTE, {"a": 4, "b": 8})   # a: 4 + 3 (the head's API server); b: 8 + 2
    assert [(load.host, load.cores, load.oversubscribed) for load in loads] == [("10.0.0.1", 8, False),
                                                                               ("10.0.0.2", 8, True)]


def test_with_inventories_the_nodes_of_one_hostname_are_one_host_of_its_logical_cores():
    facts = {"a": {"hostname": "big", "logical_cores": 64}, "b": {"hostname": "big", "logical_cores": 64}}
    (big,) = host_loads(TWO_REMOTE, {"a": 8, "b": 8}, facts)
    assert (big.host, big.nodes, big.rank_threads, big.others, big.cores) == ("big", ("a", "b"), 16, 5, 64)
    assert not big.oversubscribed
    shared = {"a": {"hostname": "small", "logical_cores": 8}, "b": {"hostname": "small", "logical_cores": 8}}
    assert host_loads(TWO_REMOTE, {"a": 8, "b": 8}, shared)[0].oversubscribed   # two nodes on one 8-core host


def test_hosts_of_their_own_names_that_share_one_cores_ranks_count_as_busy():
    """Two hosts of one core each for servers on a 2-core machine (the testbed's h1 and h2): a rank's thread,
    a sampler and Ray's daemons on each, the API server on the first, outnumber the 2 cores each reports."""
    hosts = [Node(name="h1", address="198.18.106.1", cpus=[0]), Node(name="h2", address="198.18.106.2", cpus=[0])]
    facts = {"h1": {"hostname": "h1", "logical_cores": 2}, "h2": {"hostname": "h2", "logical_cores": 2}}
    assert [load.oversubscribed for load in cluster_loads(hosts, 1, facts)] == [True, True]


def test_rays_own_timeouts_unless_a_host_is_oversubscribed_or_the_campaign_says():
    roomy = cluster_loads(TWO_REMOTE, 1, {"a": {"hostname": "a", "logical_cores": 32},
                                          "b": {"hostname": "b", "logical_cores": 32}})
    busy = cluster_loads(TWO_LOCAL, 1, local_cores=2)
    assert timeouts_note("auto", roomy) is None and timeouts_note("ray", busy) is None
    note = timeouts_note("auto", busy)
    assert note is not None and f"host {socket.gethostname()} (node node0, node1)" in note
    assert "ray_timeouts: ray" in note
    assert "busy-host" in (timeouts_note("busy-host", roomy) or "")
    with pytest.raises(ValueError, match="one of auto, ray, busy-host"):
        timeouts_note("sometimes", roomy)


def test_every_ray_start_gets_the_chosen_timeouts_and_always_the_stop_setting():
    roomy = {n.name: {"hostname": n.name, "logical_cores": 32} for n in TWO_REMOTE}
    plans = plan_cluster(TWO_REMOTE, "ray", 1, {}, CountingPorts(7000), temp_root="/tmp/sb-ray-t",
                         timeouts=TimeoutChoice("auto", roomy))
    for plan in plans:
        assert not set(BUSY_HOST_TIMEOUTS) & set(plan.env) and plan.env.items() >= STOP_ENV.items()
        assert plan.timeouts_note is None
    tight = {n.name: {"hostname": n.name, "logical_cores": 8} for n in TWO_REMOTE}
    busy = plan_cluster(TWO_REMOTE, "ray", 1, {"RAY_health_check_timeout_ms": "9000"}, CountingPorts(7000),
                        temp_root="/tmp/sb-ray-t", timeouts=TimeoutChoice("auto", tight))
    for plan in busy:
        assert plan.env["RAY_raylet_start_wait_time_s"] == BUSY_HOST_TIMEOUTS["RAY_raylet_start_wait_time_s"]
        assert plan.env["RAY_health_check_timeout_ms"] == "9000"   # the campaign's engine.env wins
        assert "host a (node a): 8 rank threads and 3 other processes" in (plan.timeouts_note or "")
    forced = plan_cluster(TWO_REMOTE, "ray", 1, {}, CountingPorts(7000), temp_root="/tmp/sb-ray-t",
                          timeouts=TimeoutChoice("busy-host", roomy))
    assert forced[0].env.items() >= BUSY_HOST_TIMEOUTS.items()


def ray_launch(spec: VllmEngineSpec, nodes: list[Node], shared=None):
    return get_engine("vllm").launch(LaunchRequest(
        python="/venv/bin/python", build_dir="/venv", spec=spec, mode=ModeSpec(name="pp2", pp=2, executor="ray"),
        model_dir="/m", served_name="tiny", dtype="float32", nodes=nodes, ports=CountingPorts(9000),
        shared=shared, planning=shared is None))


def test_the_plan_says_when_a_ray_mode_gets_the_longer_timeouts_and_its_server_has_them_too(monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    busy = ray_launch(VllmEngineSpec(), TWO_LOCAL)
    assert any(n.startswith("Ray's start-up and health timeouts: the longer ones") for n in busy.notes)
    assert busy.api.env["RAY_raylet_start_wait_time_s"] == BUSY_HOST_TIMEOUTS["RAY_raylet_start_wait_time_s"]
    own = ray_launch(VllmEngineSpec(ray_timeouts="ray"), TWO_LOCAL)
    assert not any("timeouts" in n for n in own.notes) and not set(BUSY_HOST_TIMEOUTS) & set(own.api.env)
    assert own.api.env.items() >= STOP_ENV.items()
    monkeypatch.setattr("os.cpu_count", lambda: 64)
    roomy = ray_launch(VllmEngineSpec(), TWO_LOCAL[:1] + [Node(name="node1", address="127.0.1.2", cpus=[2, 3])])
    assert not any("timeouts" in n for n in roomy.notes) and not set(BUSY_HOST_TIMEOUTS) & set(roomy.api.env)


def test_a_running_clusters_choice_is_the_servers():
    plans = plan_cluster(TWO_REMOTE, "ray", 1, {}, CountingPorts(7000), temp_root="/tmp/sb-ray-t",
                         timeouts=TimeoutChoice("busy-host"))
    cluster = RayCluster(address="10.0.0.1:7000", head=TWO_REMOTE[0], plans=plans)
    launch = ray_launch(VllmEngineSpec(), TWO_REMOTE, shared=cluster)
    assert launch.api.env.items() >= BUSY_HOST_TIMEOUTS.items() and plans[0].timeouts_note in launch.notes
    calm = plan_cluster(TWO_REMOTE, "ray", 1, {}, CountingPorts(7000), temp_root="/tmp/sb-ray-t",
                         timeouts=TimeoutChoice("ray"))
    launch = ray_launch(VllmEngineSpec(), TWO_REMOTE, shared=RayCluster(address="x:1", head=TWO_REMOTE[0], plans=calm))
    assert not set(BUSY_HOST_TIMEOUTS) & set(launch.api.env)


def test_the_campaign_field_takes_only_the_three_settings():
    assert VllmEngineSpec().ray_timeouts == "auto"
    with pytest.raises(ValidationError):
        VllmEngineSpec(ray_timeouts="sometimes")


def test_the_nodes_inventories_are_read_and_a_node_that_cannot_say_is_judged_without():
    class Provider:
        def inventory(self, node):
            if node.name == "b":
                raise OSError("unreachable")
            return {"hostname": "h-a", "logical_cores": 16}

    assert inventories(Provider(), TWO_REMOTE) == {"a": {"hostname": "h-a", "logical_cores": 16}}
