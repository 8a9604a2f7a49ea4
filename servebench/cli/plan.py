"""What `servebench plan` prints: the cells and the exact server commands, without running anything."""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import cast

from servebench.builds.builders import inputs_and_key
from servebench.campaign.priority import nice_text, this_process
from servebench.config.campaign import Campaign, GeneratedModelSpec, variant_label
from servebench.engines import LaunchRequest, get_engine
from servebench.engines.base import PortSource
from servebench.models.artifact import ModelGenerator
from servebench.offline import NeedsNetwork, no_network
from servebench.paths import cache_dir
from servebench.planning.balancing import balancing_choice
from servebench.planning.feasibility import variant_memory
from servebench.planning.memory import (
    GIB,
    ModeMemory,
    gib,
    model_weights,
    resolved_model_path,
    share_weight_bytes,
    startup_timeout_s,
    this_host_available_bytes,
)
from servebench.planning.placement import split_client_node
from servebench.planning.plan import Plan
from servebench.providers import Node, get_provider
from servebench.serving.balancer import plan_lines
from servebench.serving.deployment import replica_nodes
from servebench.serving.server import node_argv


def architecture_line(nodes: list, on_this_host: bool) -> str:
    """Which nodes are emulated, where, and which are real: what the campaign's numbers can say."""
    emulated = [n for n in nodes if n.emulate]
    where = "on this host" if on_this_host else "on each node's own host"
    parts = [f"{', '.join(n.name for n in emulated if n.emulate == name)} emulated {name} (qemu-user {where})"
             for name in dict.fromkeys(n.emulate for n in emulated)]
    native = [n.name for n in nodes if not n.emulate]
    if native:
        parts.append(f"{', '.join(native)} " + ("this host's own CPU" if on_this_host else
                                                 "their own CPU, not emulated (the inventory tells the architecture)"))
    return "; ".join(parts) + ("; emulated numbers say a path works and answers right, not how fast its CPU is"
                               if emulated else "")


def describe_plan(plan: Plan, file: Path) -> str:
    campaign = plan.campaign
    specs = campaign.engine_specs()
    engines = {kind: get_engine(kind) for kind in specs}
    keys = {kind: build_key_or_why(engines[kind], spec) for kind, spec in specs.items()
            if engines[kind].starts_servers}
    models = {kind: model_path(campaign, file, engines[kind].default_model) for kind in specs}
    served = (campaign.model.generate if isinstance(campaign.model, GeneratedModelSpec)
              else Path(campaign.model.path).name)
    provider = get_provider(campaign, plan.client.reserved_on_nodes)
    nodes, _ = split_client_node(provider.nodes(), [n.name for n in campaign.provider.node_specs()],
                                 plan.client.node)
    predicted = plan_prediction_lines(plan, file, nodes) if keys else ([], {})  # each mode's start-up: [1]
    lines = header_lines(plan, file, engines, keys, [models[kind] for kind in keys], nodes, provider)
    lines += [*predicted[0], ""]
    by_name = {n.name: n for n in nodes}
    host = this_host_available_bytes() if campaign.provider.nodes_on_this_host else None
    memory = {m.mode.name: m for m in variant_memory(campaign, get_engine, [(n.name, n.cpus) for n in nodes],
                                                     file.parent, host)}
    for mode, cells in plan.modes():
        kind = campaign.engine_kind(mode)
        if not engines[kind].starts_servers:
            lines += external_mode_lines(mode, cells, engines[kind], specs[kind])
            continue
        spec, key = specs[kind], keys[kind]
        if mode.build:
            spec = campaign.engine_spec_for(mode)
            key = build_key_or_why(engines[kind], spec)
        build_dir = str(cache_dir() / "engines" / key)
        model = campaign.model_for(mode)  # its model variant's (`model_axes`), else the campaign's
        model_dir = models[kind] if not mode.model else model_path(
            campaign.model_copy(update={"model": model}), file, engines[kind].default_model)
        launches = [engines[kind].launch(LaunchRequest(
            python=str(Path(build_dir) / "bin" / "python"), build_dir=build_dir, spec=spec, mode=mode,
            model_dir=model_dir, served_name=served, dtype=model.dtype, nodes=share,
            # planning=True: the engines only print a port into the command shown, so "PORT" may stand in
            # for the int a PortSource gives
            ports=cast(PortSource, PlaceholderPorts()), planning=True)) for share in replica_nodes(nodes, mode)]
        engine_note = (f" engine={kind}" if len(specs) > 1 else "") + \
            (f" build {spec.describe()} key {key}" if mode.build else "") + \
            (f" model {variant_label(mode.model)}{gguf_note(model, engines[kind])}" if mode.model else "")
        parallel = (f" dp={mode.dp}" if mode.dp > 1 else "") + (f" ep={mode.ep_size}" if mode.ep else "") + \
            (f" replicas={mode.replicas} balancer={mode.balancer_policy}" if mode.replicas > 1 else "")
        where = ", ".join(f"r{index} {launch.api.node}" for index, launch in enumerate(launches)) \
            if mode.replicas > 1 else launches[0].api.node
        lines.append(f"mode {mode.name} (tp={mode.tp} pp={mode.pp}{parallel} executor={mode.executor}{engine_note}) "
                     f"on {where}:")
        for index, launch in enumerate(launches):
            indent = "  " if mode.replicas == 1 else "    "
            if mode.replicas > 1:
                lines.append(f"  replica r{index} on {', '.join(dict.fromkeys(p.node for p in launch.processes))}:")
            if mode.dp > 1 or mode.ep:
                lines.append(f"{indent}ranks    {mode.world_size} workers: {placement_text(launch)}")
            lines += command_lines(launch, provider, by_name, indent)
            lines += [f"{indent}note     {note}" for note in launch.notes]
        if mode.replicas > 1:
            lines += balancer_plan_lines(mode, launches, by_name, plan.client.node, campaign)
        shown = memory_lines(memory.get(mode.name))
        if shown and mode.replicas > 1:
            each = f"each of the {mode.replicas} holds the same on its own nodes"
            shown[0] = shown[0].rstrip(":") + f", replica r0's ({each}):"
        lines += shown + predicted[1].get(mode.name, [])
        for cell in cells:
            lines.append(f"  cell {cell.key:<24} seed {cell.seed}")
        lines.append("")
    if keys:
        lines.append("PORT is a free port chosen when the server starts.")
    return "\n".join(lines)


def header_lines(plan: Plan, file: Path, engines: dict, keys: dict[str, str], model_paths: list[str],
                 nodes: list, provider) -> list[str]:
    """The plan's head: the campaign, each engine with its build key (or what it will not do), the model,
    the nodes and the load generator, the site setup, the cells, the knobs and the search."""
    campaign = plan.campaign
    specs = campaign.engine_specs()
    return [
        f"campaign {campaign.name}  spec hash {campaign.spec_hash()}  file {file}",
        *(f"engine   {spec.describe()}  build key {keys[kind]}" if kind in keys
          else external_engine_line(campaign, engines[kind], spec) for kind, spec in specs.items()),
        *(f"model    {path}" for path in dict.fromkeys(model_paths)),
        *model_lines(campaign, {kind: engine for kind, engine in engines.items() if kind in keys}, file),
        *([] if len(keys) == len(specs) else [shape_only_line(campaign)]),
        "nodes    " + "; ".join(f"{n.name} @ {n.address} cpus {n.cpus}" for n in nodes),
        f"arch     {architecture_line(nodes, campaign.provider.nodes_on_this_host)}",
        f"client   {plan.client.describe()}, {nice_text(campaign.load.client.nice, this_process(), plan.client.node)}",
        *setup_lines(campaign.provider, provider),
        f"cells    {len(plan.cells)} = {len(plan.modes())} modes x "
        f"{len(plan.cells) // len(plan.modes()) // campaign.load.repeats} load points x {campaign.load.repeats} repeats"
        + (f" (modes: {len(campaign.modes)} x the knob axes {', '.join(campaign.knobs)})" if campaign.knobs else "")
        + (f" (model variants: {', '.join(variant_label(v) for v in campaign.model_axes.variants())})"
           if campaign.model_axes else ""),
        *(f"knobs    {kind}: " + (", ".join(sorted(engine.knobs)) or "none")
          + " (the engine's; docs/tuning.md)" for kind, engine in engines.items() if kind in keys),
        *([] if campaign.search is None else [f"search   {search_line(campaign, len(plan.modes()))}"]),
    ]


def external_engine_line(campaign: Campaign, engine, spec) -> str:
    """What a run will not do for an engine whose servers run already: the servers its modes measure."""
    urls = dict.fromkeys(server.url for mode in campaign.modes if campaign.engine_kind(mode) == spec.kind
                         if (server := engine.external_server(spec, mode)) is not None)
    return (f"engine   {spec.describe()}: no build, no placement, no roofline: the server at "
            f"{', '.join(urls)} is not servebench's (not started, not stopped, no memory plan, no prediction)")


def shape_only_line(campaign: Campaign) -> str:
    """What `model:` is for a server servebench did not start: the shape the prompts' vocabulary comes from."""
    what = (f"the {campaign.model.generate} shape" if isinstance(campaign.model, GeneratedModelSpec)
            else f"{campaign.model.path}'s config")
    return f"model    {what}, for the prompts' vocabulary only: nothing generated, placed or served by servebench"


def external_mode_lines(mode, cells: list, engine, spec) -> list[str]:
    """A mode measuring a server servebench did not start: where it answers, the key's variable (its name,
    never its value, and whether it is set), what the gate compares it with, its cells."""
    server = engine.external_server(spec, mode)
    reference = engine.external_server(spec, engine.reference_mode("reference"))
    key = "no key"
    if server.api_key_env:
        found = "set" if os.environ.get(server.api_key_env) else "NOT SET: the run will refuse to measure the mode"
        key = f"key from ${server.api_key_env} ({found})"
    problem = engine.reference_problem(spec)
    gate = f"not checked: {problem}" if problem is not None else f"against the reference at {reference.describe()}"
    return [f"mode {mode.name} (executor={mode.executor}) measures the server at {server.url}:",
            f"  model    {server.served_name!r}, {key}, health {server.health_path}",
            f"  metrics  {telemetry_text(engine.for_spec(spec, get_engine))}",
            f"  gate     {gate}",
            *(f"  cell {cell.key:<24} seed {cell.seed}" for cell in cells), ""]


def telemetry_text(engine) -> str:
    """What telemetry reads of a server: its /metrics (as which engine's) and its nodes' samplers."""
    api = engine.api
    if not api.metrics:
        return "its /metrics not read (metrics: false): node samples only"
    return (f"/metrics read for {', '.join(dict.fromkeys(api.metrics.values()))}, plus the samplers of the "
            "provider's nodes")


def plan_prediction_lines(plan: Plan, file: Path, nodes: list, inputs=None) -> tuple[list[str], dict[str, list[str]]]:
    """What the performance model says of the plan (docs/performance-model.md): the figures it reads, a warning
    for a dtype without fast kernels on a node (naming the dtype that has them), the campaign's predicted
    duration; per mode its predicted start-up and the ready timeout derived from it. `inputs`: the
    prediction's inputs (default: the nodes' cached rooflines)."""
    from servebench.cli.predict import prediction_inputs
    from servebench.prediction.campaign import ModeModel
    from servebench.prediction.plan import mode_models, mode_startup, predict_all
    from servebench.prediction.startup import campaign_duration_s

    try:
        inputs = inputs or prediction_inputs(plan, file)
        models = mode_models(plan, inputs)
    except Exception as exc:  # the prediction is context, never a reason for the plan to fail
        return [f"predict  not predicted: {str(exc).splitlines()[0] if str(exc) else repr(exc)}"], {}
    header = [line.replace("figures  ", "predict  figures ", 1) for line in inputs.notes]
    per_mode: dict[str, list[str]] = {}
    startups = []
    for name, model in models.items():
        if not isinstance(model, ModeModel):
            per_mode[name] = [f"  start-up not predicted: {model}"]
            continue
        startup = mode_startup(plan.campaign, model, inputs.efficiency, nodes)
        startups.append(startup.total_s)
        emulated = any(n.emulate for n in nodes if n.name in model.nodes)
        configured = plan.campaign.engine_spec_for(model.mode).ready_timeout_s
        weights = share_weight_bytes(model.weights, model.largest)
        by_bytes = startup_timeout_s(configured, weights, emulated)
        timeout = startup_timeout_s(configured, weights, emulated, startup.total_s)
        per_mode[name] = [f"  start-up predicted {startup.describe()}; ready timeout derived {timeout:.0f} s (twice "
                          f"the prediction, at least ready_timeout_s {configured:g} + the weights' load: "
                          f"{by_bytes:.0f})"]
        if startup.total_s > by_bytes:
            header.append(f"warning  mode {name}: its predicted start-up of {startup.total_s:.0f} s is longer than "
                          f"ready_timeout_s + the weights' load ({by_bytes:.0f} s): give engine.ready_timeout_s "
                          f"{timeout:.0f}")
        if (warning := model.figures.slow_dtype_warning(model.work.dtype)) is not None:
            header.append(f"warning  mode {name}: {warning}")
    cells = [p.simulated.duration_s for _, p in predict_all(plan, inputs, models) if not isinstance(p, str)]
    total = campaign_duration_s(startups, cells)
    steady = plan.campaign.load.warm_until_steady
    extra = f", and up to {steady.max_s * len(plan.cells) / 60:.0f} min more warming cells until steady" \
        if steady is not None else ""
    header.append(f"predict  duration {total / 60:.1f} min: {len(startups)} start-ups {sum(startups) / 60:.1f} min, "
                  f"{len(cells)} cells {(total - sum(startups)) / 60:.1f} min{extra} (servebench predict: per cell)")
    return header, per_mode


def setup_lines(spec, provider) -> list[str]:
    """The campaign's site setup, once: what every node command runs first, the env's names (not values)."""
    lines = [f"setup    {line}" for line in spec.setup]
    if spec.env:
        lines.append(f"env      {', '.join(sorted(spec.env))} (values not printed; a remote node reads them "
                     "from the run's 0600 prelude)")
    return lines + [f"export   {line}" for line in provider.environment_lines()]


def command_lines(launch, provider, by_name: dict, indent: str) -> list[str]:
    """A server's processes as the provider runs them, in start order (each other than the API with its node)."""
    lines = []
    for process in launch.processes:
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(process.env.items()))
        where = "" if process.api else f"and on {process.node}: "
        command = provider.command(by_name[process.node], node_argv(by_name[process.node], process.argv))
        lines.append(f"{indent}{where}{env} \\\n{indent}  {shlex.join(command)}")
    return lines


def balancer_plan_lines(mode, launches: list, by_name: dict, client_node: str | None,
                        campaign: Campaign | None = None) -> list[str]:
    """A replicas mode's balancing (`choice`: the mode's, else the campaign's, else nginx where one is found):
    nginx where the load generator runs, its policy, each replica's URL; or the load generator itself."""
    urls = {f"r{index}": f"http://{by_name[launch.api.node].address}:PORT" for index, launch in enumerate(launches)}
    where = f"node {client_node} (the load generator's)" if client_node else "this host (127.0.0.1, beside the " \
        "load generator)"
    return plan_lines(mode.name, mode.balancer_policy, urls, where,
                      balancing_choice(campaign, mode) if campaign is not None else None)


def placement_text(launch) -> str:
    """Where a data- or expert-parallel mode's processes run and on which cores: each process's node and
    its core lists (the engine's binding variable, one list per local worker, '|' between them)."""
    parts = []
    for process in launch.processes:
        binds = [value for key, value in process.env.items() if key.endswith("OMP_THREADS_BIND")]
        role = "API server" if process.api else "headless"
        parts.append(f"{process.node} ({role}" + (f", cores {binds[0]}" if binds else "") + ")")
    return "; ".join(parts)


def model_lines(campaign, engines: dict, file: Path) -> list[str]:
    """A generated model's parameter count and KV bytes a token, in the dtype each engine keeps its cache."""
    if not isinstance(campaign.model, GeneratedModelSpec):
        return []
    shape = campaign.model.shape()
    lines = [f"shape    {campaign.model.generate}: {shape.parameters():,} parameters, {shape.layers} layers"]
    for kind, engine in engines.items():
        weights = model_weights(campaign.model, engine, resolved_model_path(campaign.model, file.parent))
        per_token = weights.kv_bytes_per_token(shape.layers)
        lines.append(f"         {kind}: weights as {weights.stored_as}, KV {per_token:,} bytes a token "
                     f"({weights.kv_dtype}, all layers)")
    return lines


def gguf_note(model, engine) -> str:
    """' (GGUF q4_0)': the file type a variant of a generated model is written in for a GGUF engine."""
    if isinstance(model, GeneratedModelSpec) and engine.default_model.format == "gguf":
        return f" (GGUF {model.gguf_type()})"
    return ""


def kv_capacity_text(memory: ModeMemory) -> str:
    """The tokens a rank's KV pool serves: the pool less what the engine keeps for itself (vLLM's null block)."""
    pool = memory.kv_capacity_tokens or 0
    if not memory.reserved_tokens:
        return f"KV capacity {pool:,} tokens"
    return (f"KV capacity {pool - memory.reserved_tokens:,} tokens: a pool of {pool:,} less the "
            f"{memory.reserved_tokens:,} the engine keeps")


def memory_lines(memory: ModeMemory | None) -> list[str]:
    """Per node of the mode, in GiB: weights, KV cache, working set, their total and what the node has."""
    if memory is None:
        return []
    if memory.why_unknown:
        return [f"  memory   unknown: {memory.why_unknown}"]
    capacity = "" if memory.kv_capacity_tokens is None else f" ({kv_capacity_text(memory)})"
    lines = [f"  memory   GiB per node{capacity}:"]
    for node in memory.nodes:
        ranks = ", ".join(rank.share.label for rank in node.ranks)
        available = gib(node.available) if node.available is not None else "unknown"
        lines.append(f"    {node.node} ({ranks}): weights {gib(node.part('weights'))} + KV {gib(node.part('kv'))} + "
                     f"working set {gib(node.part('working_set'))} = {gib(node.need)} of {available} available "
                     f"({node.available_from})")
    if memory.shared_host is not None:
        total = sum(node.need or 0 for node in memory.nodes)
        lines.append(f"    these nodes share this host: {total / GIB:.2f} of {gib(memory.shared_host)} available")
    if memory.runtime_note:
        lines.append(f"  note     {memory.runtime_note}")
    return lines


def build_key_or_why(engine, spec) -> str:
    """The build's key, or why it has none yet: its source not fetched (a plan downloads nothing), or a
    build this host cannot make (see `build --dry-run`)."""
    try:
        with no_network():
            return inputs_and_key(engine.build_recipe(spec), cache_dir())[1]
    except NeedsNetwork:
        return "<no key until servebench build fetches its source>"
    except Exception:  # BuildError, a missing compiler: the plan is still shown
        return "<no key: see servebench build --dry-run>"


def model_path(campaign, file: Path, generator: ModelGenerator) -> str:
    """Where an engine finds the campaign's model (a generated one: where its generator puts it)."""
    if isinstance(campaign.model, GeneratedModelSpec):
        return str(generator.path(campaign.model, cache_dir()))
    return str((file.parent / campaign.model.path).resolve())


class PlaceholderPorts:
    """`servebench plan`'s ports: nothing is bound yet, so every port prints as PORT."""

    def free_port(self, node: Node) -> str:
        return "PORT"

    def free_port_range(self, node: Node, size: int) -> str:
        return "PORT"


def search_line(campaign, configurations: int) -> str:
    """What the campaign's search will launch and probe at most (docs/capacity.md, docs/tuning.md)."""
    search = campaign.search
    per_search = search.max_probes * search.repeats
    if search.kind == "capacity":
        return f"capacity over {search.over} in each of {configurations} modes: at most {per_search} probes each"
    launched = min(search.trials, configurations) if search.strategy == "optuna" else configurations
    return (f"tune ({search.strategy}) over {search.over}: {launched} of {configurations} configurations, then the "
            f"default again: {launched + 1} server launches, at most {(launched + 1) * per_search} probes")


def add_plan_parser(sub) -> None:
    from servebench.cli.common import campaign_arg

    plan = sub.add_parser("plan", help="validate a campaign, print its cells and server commands")
    campaign_arg(plan)
    plan.set_defaults(func=cmd_plan)


def cmd_plan(args) -> int:
    from servebench.campaign.loading import load_campaign
    from servebench.cli.common import EXIT_OK
    from servebench.planning.plan import make_plan
    from servebench.providers import Provider, get_provider_class

    campaign = load_campaign(args.file)
    provider_class: type[Provider] = get_provider_class(campaign.provider.kind)
    print(describe_plan(make_plan(campaign, provider_class.host_cpus()), Path(args.file)))
    return EXIT_OK
