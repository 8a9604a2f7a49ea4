"""What `servebench plan` prints: the cells and the exact server commands, without running anything."""

from __future__ import annotations

import shlex
from pathlib import Path

from servebench.build.venv import build_key
from servebench.engines import get_engine
from servebench.build.model import model_cache_key
from servebench.paths import cache_dir
from servebench.providers import get_provider
from servebench.serving.server import plan_launch, server_node
from servebench.campaign.schema import Campaign, GeneratedModelSpec, client_placement
from servebench.campaign.sweep import expand

PORT_PLACEHOLDER = 0  # chosen free at run time


def describe_plan(campaign: Campaign, file: Path) -> str:
    engine = get_engine(campaign.engine.kind)
    key = build_key(campaign.engine)
    python = str(cache_dir() / "engines" / key / "bin" / "python")
    if isinstance(campaign.model, GeneratedModelSpec):
        model_dir = str(cache_dir() / "models" / model_cache_key(campaign.model))
        served = campaign.model.generate
    else:
        model_dir = str((file.parent / campaign.model.path).resolve())
        served = Path(campaign.model.path).name
    nodes = get_provider(campaign).nodes()
    cells = expand(campaign)
    lines = [
        f"campaign {campaign.name}  spec hash {campaign.spec_hash()}  file {file}",
        f"engine   {campaign.engine.package}  venv key {key}",
        f"model    {model_dir}",
        "nodes    " + "; ".join(f"{n.name} @ {n.address} cpus {n.cpus}" for n in nodes),
        f"client   {client_placement(campaign).describe()}, nice {campaign.load.client.nice}",
        f"cells    {len(cells)} = {len(campaign.modes)} modes x {len(cells) // len(campaign.modes) // campaign.load.repeats}"
        f" load points x {campaign.load.repeats} repeats",
        "",
    ]
    for mode in campaign.modes:
        node = server_node(mode, nodes)
        launch = plan_launch(engine, python=python, spec=campaign.engine, mode=mode, model_dir=model_dir,
                             served_name=served, nodes=nodes, port=PORT_PLACEHOLDER,
                             ray_address="RAY_HEAD:PORT" if mode.executor == "ray" else None,
                             dtype=campaign.model.dtype)
        argv = list(launch.argv)
        argv[argv.index("--port") + 1] = "PORT"
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(launch.env.items()))
        lines.append(f"mode {mode.name} (tp={mode.tp} pp={mode.pp} executor={mode.executor}) on {node.name}:")
        lines.append(f"  {env} \\\n    taskset -c {','.join(map(str, node.cpus))} {shlex.join(argv)}")
        by_name = {n.name: n for n in nodes}
        for name, companion in launch.companions:
            companion_env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(companion.env.items()))
            lines.append(f"  and on {name}: {companion_env} \\\n    taskset -c "
                         f"{','.join(map(str, by_name[name].cpus))} {shlex.join(companion.argv)}")
        for cell in (c for c in cells if c.mode.name == mode.name):
            lines.append(f"  cell {cell.key:<24} seed {cell.seed}")
        lines.append("")
    lines.append("PORT is a free port chosen when the server starts.")
    return "\n".join(lines)
