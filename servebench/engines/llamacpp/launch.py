"""A llama.cpp mode's processes.

- executor `local`: one `llama-server` on the first node, every layer on its CPU;
- executor `rpc` with `pp: N`: N `ggml-rpc-server` workers, one on each of the first N nodes
  (round robin when there are fewer), started side by side (`hosts_at_once` at a time), and once
  every one accepts, `llama-server --rpc w1,w2,... -ngl 999` on the first node: the layers are split evenly over the
  workers (`--tensor-split 1,1,...`), the head keeps the embeddings and sampling.

A worker serves one client at a time and can die silently: every mode has workers of its own
(never shared between servers), and the serving stage watches their PIDs like the server's, so a
dead worker fails the cell with its cause and the next cell gets a restarted mode.
Every process gets an explicit thread count (the node's CPUs, or the `threads` knob): llama.cpp's
own default counts the host's physical cores, not the node's share of them.

llama-server asks for the run's token (`LaunchRequest.secret_file`) with `--api-key-file PATH`: the path on
its command line, the key only in the file. A `ggml-rpc-server` has no authentication at all (llama.cpp
says never to expose one): it binds the node's own address (`-H`), never every interface, and the plan
says so for every mode that starts one.
"""

from __future__ import annotations

from pathlib import Path

from servebench.engines.base import LaunchRequest, ProcessLaunch, ServerLaunch
from servebench.engines.llamacpp.knobs import knob_args
from servebench.providers.base import Node

ALL_LAYERS = "999"
BASE_ENV = {"GGML_NO_BACKTRACE": "1",   # else ggml may attach gdb to print a backtrace on an abort
            "LLAMA_ARG_ENDPOINT_METRICS": "1"}


def tool(request: LaunchRequest, name: str) -> str:
    return str(Path(request.build_dir) / "bin" / name)


def threads(request: LaunchRequest, node: Node) -> str:
    return str(request.mode.knobs.get("threads") or max(1, len(node.cpus)))


def api_key_args(request: LaunchRequest) -> list[str]:
    """llama-server's key: the run's token file (none without one)."""
    return [] if request.secret_file is None else ["--api-key-file", request.secret_file]


def rpc_note(mode_pp: int, endpoints: list[str]) -> str:
    """What the plan says of a mode's RPC workers: unauthenticated, and where they listen."""
    return (f"{mode_pp} ggml-rpc-server worker(s) at {', '.join(endpoints)}: no authentication (llama.cpp's RPC "
            "runs what it is sent); each binds its node's address only, so the network between the campaign's "
            "nodes must admit no one else (docs/security.md)")


def launch_mode(request: LaunchRequest) -> ServerLaunch:
    mode, nodes = request.mode, request.nodes
    head = nodes[0]
    env = {**BASE_ENV, **request.spec.env, **mode.env}
    processes: list[ProcessLaunch] = []
    rpc_args: list[str] = []
    endpoints: list[str] = []
    if mode.executor == "rpc":
        for index in range(mode.pp):
            node = nodes[index % len(nodes)]
            port = request.ports.free_port(node)
            endpoints.append(f"{node.address}:{port}")
            processes.append(ProcessLaunch(
                node=node.name, env=env, ready_port=port, label=f"rpc{index}.{node.name}", chain=index,
                argv=[tool(request, "ggml-rpc-server"), "-H", node.address, "-p", str(port),
                      "-t", threads(request, node)]))
        rpc_args = ["--rpc", ",".join(endpoints), "-ngl", ALL_LAYERS, "--tensor-split", ",".join(["1"] * mode.pp)]
    else:
        rpc_args = ["-ngl", "0"]
    port = request.ports.free_port(head)
    argv = [tool(request, "llama-server"), "-m", request.model_dir, "-a", request.served_name,
            "--host", head.address, "--port", str(port), "-t", threads(request, head),
            "-tb", threads(request, head), "--metrics", "--slots", "--no-webui", "-fit", "off",
            *rpc_args, *api_key_args(request), *knob_args(mode.knobs), *mode.args]
    processes.append(ProcessLaunch(node=head.name, argv=argv, env=env, api=True, stage=1 if endpoints else 0))
    notes = (rpc_note(mode.pp, endpoints),) if mode.executor == "rpc" else ()
    return ServerLaunch(processes=processes, port=port, notes=notes)
