"""What `servebench plan` prints: the cells and the exact server commands, without running anything."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import cast

from servebench.builds.builders import inputs_and_key
from servebench.builds.model import ModelGenerator
from servebench.campaign.placement import split_client_node
from servebench.campaign.plan import Plan
from servebench.engines import LaunchRequest, get_engine
from servebench.engines.base import PortSource
from servebench.paths import cache_dir
from servebench.providers import Node, get_provider
from servebench.serving.deployment import mode_nodes
from servebench.serving.server import node_argv
from servebench.spec.campaign import GeneratedModelSpec


def describe_plan(plan: Plan, file: Path) -> str:
    campaign = plan.campaign
    specs = campaign.engine_specs()
    engines = {kind: get_engine(kind) for kind in specs}
    keys = {kind: build_key_or_why(engines[kind], spec) for kind, spec in specs.items()}
    models = {kind: model_path(campaign, file, engines[kind].default_model) for kind in specs}
    served = (campaign.model.generate if isinstance(campaign.model, GeneratedModelSpec)
              else Path(campaign.model.path).name)
    provider = get_provider(campaign, plan.client.reserved_on_nodes)
    nodes, _ = split_client_node(provider.nodes(), [n.name for n in campaign.provider.node_specs()],
                                 plan.client.node)
    lines = [
        f"campaign {campaign.name}  spec hash {campaign.spec_hash()}  file {file}",
        *(f"engine   {spec.describe()}  build key {keys[kind]}" for kind, spec in specs.items()),
        *(f"model    {path}" for path in dict.fromkeys(models.values())),
        "nodes    " + "; ".join(f"{n.name} @ {n.address} cpus {n.cpus}" for n in nodes),
        f"client   {plan.client.describe()}, nice {campaign.load.client.nice}",
        f"cells    {len(plan.cells)} = {len(plan.modes())} modes x "
        f"{len(plan.cells) // len(plan.modes()) // campaign.load.repeats} load points x {campaign.load.repeats} repeats"
        + (f" (modes: {len(campaign.modes)} x the knob axes {', '.join(campaign.knobs)})" if campaign.knobs else ""),
        *(f"knobs    {kind}: " + (", ".join(sorted(engine.knobs)) or "none")
          + " (the engine's; docs/tuning.md)" for kind, engine in engines.items()),
        *([] if campaign.search is None else [f"search   {search_line(campaign, len(plan.modes()))}"]),
        "",
    ]
    by_name = {n.name: n for n in nodes}
    for mode, cells in plan.modes():
        kind = campaign.engine_kind(mode)
        spec, key = specs[kind], keys[kind]
        if mode.build:
            spec = campaign.engine_spec_for(mode)
            key = build_key_or_why(engines[kind], spec)
        build_dir = str(cache_dir() / "engines" / key)
        launch = engines[kind].launch(LaunchRequest(
            python=str(Path(build_dir) / "bin" / "python"), build_dir=build_dir, spec=spec, mode=mode,
            model_dir=models[kind], served_name=served, dtype=campaign.model.dtype, nodes=mode_nodes(nodes, mode),
            # planning=True: the engines only print a port into the command shown, so "PORT" may stand in
            # for the int a PortSource gives
            ports=cast(PortSource, PlaceholderPorts()), planning=True))
        engine_note = (f" engine={kind}" if len(specs) > 1 else "") + \
            (f" build {spec.describe()} key {key}" if mode.build else "")
        lines.append(f"mode {mode.name} (tp={mode.tp} pp={mode.pp} executor={mode.executor}{engine_note}) "
                     f"on {launch.api.node}:")
        for process in launch.processes:
            env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(process.env.items()))
            where = "" if process.api else f"and on {process.node}: "
            command = provider.command(by_name[process.node], node_argv(by_name[process.node], process.argv))
            lines.append(f"  {where}{env} \\\n    {shlex.join(command)}")
        for cell in cells:
            lines.append(f"  cell {cell.key:<24} seed {cell.seed}")
        lines.append("")
    lines.append("PORT is a free port chosen when the server starts.")
    return "\n".join(lines)


def build_key_or_why(engine, spec) -> str:
    """The build's key, or why it has none yet (a build this host cannot make: see `build --dry-run`)."""
    try:
        return inputs_and_key(engine.build_recipe(spec), cache_dir())[1]
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
