"""What `servebench plan` prints: the cells and the exact server commands, without running anything."""

from __future__ import annotations

import shlex
from pathlib import Path

from servebench.build.model import generated_model_path
from servebench.build.venv import build_key
from servebench.campaign.placement import split_client_node
from servebench.campaign.plan import Plan
from servebench.campaign.schema import GeneratedModelSpec
from servebench.engines import LaunchRequest, get_engine
from servebench.paths import cache_dir
from servebench.providers import Node, get_provider


def describe_plan(plan: Plan, file: Path) -> str:
    campaign = plan.campaign
    engine = get_engine(campaign.engine.kind)
    key = build_key(engine.build_recipe(campaign.engine))
    build_dir = str(cache_dir() / "engines" / key)
    if isinstance(campaign.model, GeneratedModelSpec):
        model_dir = str(generated_model_path(campaign.model, cache_dir()))
        served = campaign.model.generate
    else:
        model_dir = str((file.parent / campaign.model.path).resolve())
        served = Path(campaign.model.path).name
    provider = get_provider(campaign, plan.client.reserved_on_nodes)
    nodes, _ = split_client_node(provider.nodes(), [n.name for n in campaign.provider.node_specs()],
                                 plan.client.node)
    lines = [
        f"campaign {campaign.name}  spec hash {campaign.spec_hash()}  file {file}",
        f"engine   {campaign.engine.describe()}  build key {key}",
        f"model    {model_dir}",
        "nodes    " + "; ".join(f"{n.name} @ {n.address} cpus {n.cpus}" for n in nodes),
        f"client   {plan.client.describe()}, nice {campaign.load.client.nice}",
        f"cells    {len(plan.cells)} = {len(plan.modes())} modes x "
        f"{len(plan.cells) // len(plan.modes()) // campaign.load.repeats} load points x {campaign.load.repeats} repeats"
        + (f" (modes: {len(campaign.modes)} x the knob axes {', '.join(campaign.knobs)})" if campaign.knobs else ""),
        "knobs    " + (", ".join(sorted(getattr(engine, "knobs", {}))) or "none") + " (the engine's; docs/tuning.md)",
        *([] if campaign.search is None else [f"search   {search_line(campaign, len(plan.modes()))}"]),
        "",
    ]
    by_name = {n.name: n for n in nodes}
    for mode, cells in plan.modes():
        launch = engine.launch(LaunchRequest(
            python=str(Path(build_dir) / "bin" / "python"), build_dir=build_dir, spec=campaign.engine, mode=mode,
            model_dir=model_dir, served_name=served, dtype=campaign.model.dtype, nodes=nodes, ports=_port,
            planning=True))
        lines.append(f"mode {mode.name} (tp={mode.tp} pp={mode.pp} executor={mode.executor}) on {launch.api.node}:")
        for process in launch.processes:
            env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(process.env.items()))
            where = "" if process.api else f"and on {process.node}: "
            command = provider.command(by_name[process.node], process.argv)
            lines.append(f"  {where}{env} \\\n    {shlex.join(command)}")
        for cell in cells:
            lines.append(f"  cell {cell.key:<24} seed {cell.seed}")
        lines.append("")
    lines.append("PORT is a free port chosen when the server starts.")
    return "\n".join(lines)


def _port(node: Node) -> str:
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
