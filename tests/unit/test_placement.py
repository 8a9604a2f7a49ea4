from servebench.engines.vllm.placement import node_bindings, ray_slots_per_node, workers_per_node

TWO_NODES = [[0, 1], [0, 1]]


def test_ray_spreads_workers_evenly():
    assert workers_per_node("ray", 2, TWO_NODES) == [1, 1]
    assert workers_per_node("ray", 4, TWO_NODES) == [2, 2]
    assert workers_per_node("ray", 3, [[0, 1], [2, 3], [4, 5]]) == [1, 1, 1]
    assert workers_per_node("ray", 1, TWO_NODES) == [1, 0]


def test_mp_uses_one_node_and_multinode_one_worker_per_node():
    assert workers_per_node("mp", 2, [[0], [1, 2]]) == [0, 2]
    assert workers_per_node("mp-multinode", 2, TWO_NODES) == [1, 1]
    # more workers than nodes: only a data-parallel mode's (tp x pp engines whole on a node; a dp = 1 mode
    # that needs more nodes is refused at plan time by mode_problem)
    assert workers_per_node("mp-multinode", 4, TWO_NODES) == [2, 2]
    assert workers_per_node("mp-multinode", 4, TWO_NODES, 2) == [2, 2]


def test_ray_slots_are_the_most_workers_any_mode_puts_on_a_node():
    assert ray_slots_per_node([2, 2, 4], nodes=2) == 2
    assert ray_slots_per_node([2], nodes=2) == 1
    assert ray_slots_per_node([], nodes=2) == 1


def test_bindings_split_each_nodes_cores_among_its_workers():
    assert node_bindings("ray", 4, ["a", "b"], TWO_NODES) == {"a": "0|1", "b": "0|1"}
    assert node_bindings("ray", 2, ["a", "b"], TWO_NODES) == {"a": "0-1", "b": "0-1"}
    assert node_bindings("mp", 2, ["a", "b"], TWO_NODES) == {"a": "0|1"}
    assert node_bindings("ray", 2, ["a", "b"], [[0, 1, 2, 3], [4, 5, 6, 7]]) == {"a": "0-3", "b": "4-7"}


def test_the_generator_gets_the_cpus_no_node_uses_or_shares_when_there_are_none():
    from servebench.planning.placement import place_client, server_cpus

    spare = place_client("auto", [[0, 1]], host_cpus={0, 1, 2, 3})
    assert spare.cpus == [2, 3] and spare.dedicated
    full = place_client("auto", [[0, 1], [0, 1]], host_cpus={0, 1})
    assert full.cpus is None and not full.dedicated and "load.client.cpus" in full.why
    assert place_client("shared", [[0]], host_cpus={0, 1}).cpus is None
    asked = place_client([1], [[0, 1]], host_cpus={0, 1})
    assert asked.cpus == [1] and server_cpus([0, 1], asked) == [0]
    assert server_cpus([0, 1], full) == [0, 1]


def test_an_oversubscribed_mp_mode_takes_the_first_node_and_shares_its_cores():
    assert workers_per_node("mp", 2, [[0]]) == [2]
    assert node_bindings("mp", 2, ["a"], [[0]]) == {"a": "0|0"}


def test_a_client_node_gives_the_generator_its_cpus_and_serves_nothing():
    from servebench.planning.placement import place_on_client_node, split_client_node

    auto = place_on_client_node("auto", "h3", [0, 1])
    assert (auto.cpus, auto.node, auto.reserved_on_nodes) == ([0, 1], "h3", [])  # nothing kept from servers
    assert "on node h3" in auto.describe()
    assert place_on_client_node([1], "h3", [0, 1]).cpus == [1]
    assert place_on_client_node("shared", "h3", [0, 1]).cpus is None
    # found by its place among the declared names: Slurm names its nodes only once granted
    servers, client = split_client_node(["tb1", "tb2", "tb3"], ["node1", "node2", "node3"], "node3")
    assert (servers, client) == (["tb1", "tb2"], "tb3")
    assert split_client_node(["a", "b"], ["a", "b"], None) == (["a", "b"], None)
