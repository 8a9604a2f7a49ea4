"""A run's deployment: the nodes provisioned, and for each engine the campaign's modes use its
build, the model in its format, both placed on the nodes, and its shared services started; each
mode whose `build:` differs (another target, a commit) gets its own build, placed the same way. An
engine that starts no servers (`Engine.starts_servers`) gets none of that: only the node tools where
telemetry and the load generator run."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from servebench.builds.cache import hold_in_use
from servebench.builds.prerequisites import require
from servebench.config.campaign import Campaign, GeneratedModelSpec, ModelSpec, ModeSpec, variant_label
from servebench.config.sweep import configurations
from servebench.engines.base import ExternalServer
from servebench.models.artifact import vocab_size
from servebench.orchestration.context import EngineRun, RunContext, first_line
from servebench.planning.memory import resolved_model_path
from servebench.planning.placement import split_client_node
from servebench.progress import reporter
from servebench.providers import Node, Provider
from servebench.serving.deployment import ClientNode, Deployment
from servebench.tasks.build import build_engine
from servebench.tasks.distribute import place_artifacts, place_node_tools
from servebench.tasks.land import land_build, land_nodes, land_placements, land_run_update
from servebench.tasks.model import prepare_model
from servebench.tasks.provision import provision
from servebench.tasks.roofline import land_roofline, measure_roofline, measure_server_runtime
from servebench.tasks.shared import start_shared_services
from servebench.warehouse.landing import RunUpdate


def deploy(ctx: RunContext) -> None:
    """Provision the nodes; for each engine the campaign's modes use: build it, prepare the model in
    its format, place both on the nodes, start its shared services."""
    campaign, results = ctx.campaign, ctx.results
    reporter().stage("provisioning nodes; " + ctx.plan.client.describe())
    with ctx.stages.stage("provision", hosts=len(campaign.provider.node_specs())):
        nodes, inventories, offsets = provision(ctx.provider)
    servers, client = split_client_node(nodes, [n.name for n in campaign.provider.node_specs()], ctx.plan.client.node)
    land_nodes(results, nodes, inventories, offsets, client_node=client.name if client else None)
    land_run_update(results, RunUpdate(provider_kind=ctx.provider.kind, allocation=allocation_text(ctx.provider)))
    used = {campaign.engine_kind(mode) for mode in campaign.modes}
    placements = []
    for kind, run in ctx.engines.items():
        if kind in used and not run.engine.starts_servers:
            placements += deploy_external(ctx, run, servers, client, inventories, offsets)
        elif kind in used:
            placements += deploy_engine(ctx, run, servers, client, inventories, offsets)
    land_placements(results, placements)
    reporter().cells_planned(len(ctx.plan.cells))
    if ctx.planned_cells > len(ctx.plan.cells):
        reporter().stage(f"and at most {ctx.planned_cells - len(ctx.plan.cells)} capacity probes (cells too)")


def deploy_engine(ctx: RunContext, run: EngineRun, servers: list[Node], client: Node | None,
                  inventories: dict[str, dict], offsets: dict[str, float | None]) -> list[dict]:
    """One engine's build, model, placement and shared services (its `Deployment`, and its modes' own
    builds); what was placed on each node."""
    campaign, results, kind = ctx.campaign, ctx.results, run.engine.kind
    named = "" if run is ctx.primary else f" {kind}"
    reporter().stage(f"building the engine{named}")
    require(run.engine.build_prerequisites(run.spec), f"engine {kind}: {run.spec.describe()}")
    build = build_engine(run.engine.build_recipe(run.spec))
    run.build_hold = hold_in_use(Path(build.venv_path).parent, build.key)
    land_build(results, build)
    served = [mode for mode in configurations(campaign) if campaign.engine_kind(mode) == kind]
    variant = served[0].model if served else {}  # the engine's deployment serves its first model variant
    reporter().stage(f"preparing the model{named and ' for' + named}"
                     + (f" ({variant_label(variant)})" if variant else ""))
    model_dir = prepare_model(campaign.model_variant(variant), build, str(ctx.campaign_dir), run.engine.kind)
    if run is ctx.primary:
        land_run_update(results, RunUpdate(model_path=model_dir))
    run.vocab = vocab_size(Path(model_dir))
    reporter().stage(f"placing the engine build{named} and the model on every node"
                     + (f", the load generator on {client.name}" if client else ""))
    with ctx.stages.stage("placement", hosts=len(servers) + (client is not None), subject=kind):
        placed = place_artifacts(ctx.provider, servers, client, inventories, build, model_dir)
    # docs/roofline.md; measured again past the campaign's `roofline:` age and busy share
    rooflines = measure_roofline(ctx.provider, servers, inventories, build, campaign.roofline)
    land_roofline(results, rooflines)
    # what a server process holds there before any model: the next plan's memory check reads it
    measure_server_runtime(ctx.provider, servers, inventories, build, run.engine.runtime_modules)
    load_client = None if client is None else ClientNode(
        provider=ctx.provider, node=client, tree=placed.load_tree, clock_offset_s=offsets.get(client.name))
    run.deployment = Deployment(campaign=served_campaign(campaign, variant), engine=run.engine, spec=run.spec,
                                provider=ctx.provider, nodes=servers, build=build, model_dir=model_dir,
                                served_name=ctx.served_name, run_dir=str(ctx.run_dir), tools_dir=placed.tools_dir,
                                clock_offsets=offsets, client=load_client, variant=variant, rooflines=rooflines)
    reporter().stage(f"starting the services the{named} modes share, if any")
    modes = [mode for mode in campaign.modes if campaign.engine_kind(mode) == kind]
    with ctx.stages.stage("shared-services", hosts=len(servers), subject=kind):   # a Ray cluster: its start
        shared = start_shared_services(run.engine, run.spec, modes, servers, build, ctx.provider, str(ctx.run_dir))
    for line in shared.notes if shared is not None else []:
        reporter().stage(line)
    run.deployment = replace(run.deployment, shared=shared)
    return ([p.model_dump() for p in placed.placements]
            + deploy_build_variants(ctx, run, served, servers, inventories))  # a commit axis's too


def deploy_external(ctx: RunContext, run: EngineRun, servers: list[Node], client: Node | None,
                    inventories: dict[str, dict], offsets: dict[str, float | None]) -> list[dict]:
    """An engine whose servers run already: no build, model, placement, roofline or shared services; its
    `Deployment` is the nodes telemetry watches and the load generator's node (the node tools and the load
    generator's tree placed there), and the prompts' vocabulary comes from the model's shape; what was
    placed on each node."""
    campaign, kind = ctx.campaign, run.engine.kind
    reporter().stage(f"engine {kind}: no build, no placement, no roofline: "
                     + "; ".join(server.describe() for server in external_servers(ctx, run))
                     + " not servebench's to start")
    with ctx.stages.stage("placement", hosts=len(servers) + (client is not None), subject=kind):
        placed = place_node_tools(ctx.provider, servers, client, inventories)
    run.vocab = served_vocab(campaign.model, ctx.campaign_dir)
    load_client = None if client is None else ClientNode(
        provider=ctx.provider, node=client, tree=placed.load_tree, clock_offset_s=offsets.get(client.name))
    run.deployment = Deployment(campaign=campaign, engine=run.engine, spec=run.spec, provider=ctx.provider,
                                nodes=servers, build=None, model_dir="", served_name=ctx.served_name,
                                run_dir=str(ctx.run_dir), tools_dir=placed.tools_dir, clock_offsets=offsets,
                                client=load_client)
    return [p.model_dump() for p in placed.placements]


def external_servers(ctx: RunContext, run: EngineRun) -> list[ExternalServer]:
    """The servers an engine that starts none measures: its modes' (one each), without repeats."""
    found = (run.engine.external_server(run.spec, mode) for mode in configurations(ctx.campaign)
             if ctx.engine_run(mode) is run)
    return list(dict.fromkeys(server for server in found if server is not None))


def served_vocab(model: ModelSpec, campaign_dir: Path) -> int:
    """The vocabulary the prompts' token ids are drawn from, for a server whose model servebench did not
    make: a generated model's shape's, else the model directory's or GGUF file's own."""
    if isinstance(model, GeneratedModelSpec):
        return model.shape().vocab_size
    path = resolved_model_path(model, campaign_dir)
    assert path is not None  # a model that is not generated has a path
    return vocab_size(path)


def deploy_build_variants(ctx: RunContext, run: EngineRun, modes: list[ModeSpec], servers: list,
                          inventories: dict) -> list[dict]:
    """Modes whose `build:` differs from their engine's block (another target CPU, a commit of a
    commit axis) or whose model variant (`model_axes`) differs from the deployment's: each distinct
    build is made (or found by key) and each distinct model prepared, once, recorded and placed like
    the engine's; the rest of the deployment (nodes, shared services) is the engine's."""
    deployment = run.deployment
    assert deployment is not None  # deploy_engine made the engine's deployment before its variants
    placements: list[dict] = []
    for mode in modes:
        spec = ctx.campaign.engine_spec_for(mode)
        made = [deployment, *run.variants]
        if any(d.spec == spec and d.variant == mode.model for d in made):
            continue
        build = next((d.build for d in made if d.spec == spec), None)
        if build is None:
            reporter().stage(f"building the engine {spec.describe()}")
            require(run.engine.build_prerequisites(spec), f"engine {run.engine.kind}: {spec.describe()}")
            build = build_engine(run.engine.build_recipe(spec))
            run.variant_holds.append(hold_in_use(Path(build.venv_path).parent, build.key))
            land_build(ctx.results, build)
        model_dir = next((d.model_dir for d in made if d.variant == mode.model), None)
        if model_dir is None:
            reporter().stage(f"preparing the model ({variant_label(mode.model)})")
            model_dir = prepare_model(ctx.campaign.model_for(mode), build, str(ctx.campaign_dir), run.engine.kind)
        placed = place_artifacts(ctx.provider, servers, None, inventories, build, model_dir)
        placements += [p.model_dump() for p in placed.placements]
        run.variants.append(replace(deployment, spec=spec, build=build, model_dir=model_dir, variant=mode.model,
                                    campaign=served_campaign(ctx.campaign, mode.model)))
    return placements


def served_campaign(campaign: Campaign, variant: dict[str, str]) -> Campaign:
    """The campaign as a deployment of this model variant serves it: its `model` the variant's (what the
    mode's server is started with: dtype, weights' memory)."""
    return campaign if not variant else campaign.model_copy(update={"model": campaign.model_variant(variant)})


def allocation_text(provider: Provider) -> str | None:
    """What the provider holds (or held: after release, how it ended), as JSON for `runs.allocation`."""
    try:
        return json.dumps(provider.allocation_record())
    except Exception as exc:  # a controller that no longer answers must not hide the run's outcome
        return json.dumps({"error": first_line(exc)})
