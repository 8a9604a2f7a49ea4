"""Problems a well-typed campaign can still have: modes the nodes, the engine or the model
cannot hold (their CPUs, and their memory: servebench/planning/memory.py), CPUs this host does not
have. Pure: the engine, the provider's class, the host's CPUs and its available memory are given
(the memory by default read from /proc/meminfo, for nodes on this host only)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable, Iterable

from servebench.config.campaign import (
    QUANTIZATIONS,
    Campaign,
    GeneratedModelSpec,
    KnobValue,
    ModelSpec,
    ModeSpec,
    quantization_format,
    split_for_replicas,
    variant_label,
)
from servebench.engines.base import EngineSpecError
from servebench.planning.balancing import balancing_problems
from servebench.planning.memory import ModeMemory, campaign_memory, memory_problems, this_host_available_bytes
from servebench.planning.placement import ClientPlacement, client_placement, server_cpus, server_node_specs

Problem = tuple[tuple, str]  # (path of the field in the file, message)


def check_feasibility(campaign: Campaign, engine_of: Callable[[str], Any], provider, base_dir: Path | None,
                      host_cpus: set[int], host_memory: Callable[[], int | None] | None = None) -> list[Problem]:
    """`engine_of`: an engine kind -> its Engine; `provider`: the provider's class (spec checks only);
    `host_memory`: this host's available bytes (read only for nodes on this host)."""
    problems = _engine_problems(campaign)
    if problems:
        return problems
    names = [mode.name for mode in campaign.modes]
    engines = {kind: engine_of(kind) for kind in campaign.engine_specs()}
    problems += _external_server_problems(campaign, engines, engine_of)
    fmt = model_format(campaign.model, base_dir)
    problems += [(("model",), problem) for engine in engines.values()
                 if (problem := engine.model_problem(campaign.model))]
    problems += _quantization_problems(campaign.model, engines.values())
    problems += _model_axes_problems(campaign, engines)
    for index, mode in enumerate(campaign.modes):
        engine = engines[campaign.engine_kind(mode)]
        if fmt is not None and fmt not in engine.model_formats:
            format_field = ("model", "path") if mode.engine is None else ("modes", index, "engine")
            problems.append((format_field, f"engine {engine.kind!r} serves models as "
                             f"{', '.join(engine.model_formats)}; this model is {fmt}"))
    shape, shape_problem = model_shape(campaign.model, base_dir) if fmt in ("hf", None) else (None, None)
    if shape_problem:
        problems.append((("model", "path"), shape_problem))
    client = client_placement(campaign, host_cpus)
    problems += provider.spec_problems(campaign.provider, host_cpus)
    problems += _client_problems(campaign, host_cpus, client)
    node_specs = server_node_specs(campaign)
    here = campaign.provider.nodes_on_this_host and client.node is None
    nodes = [server_cpus(node.cpus, client) if here else node.cpus for node in node_specs]
    for index, mode in enumerate(campaign.modes):
        engine = engines[campaign.engine_kind(mode)]
        where = ("modes", index)
        size_field = where + ("tp" if mode.tp > 1 else "pp",)
        if mode.name in names[:index]:
            problems.append((where + ("name",), f"mode name {mode.name!r} is used more than once"))
        if mode.executor not in engine.executors:
            problems.append((where + ("executor",), f"engine {engine.kind!r} has no executor {mode.executor!r}; "
                             f"it has: {', '.join(engine.executors)}"))
            continue
        if not engine.starts_servers:  # its server's layout is its own: _external_server_problems refuses one
            continue
        unsupported = _parallel_support_problems(mode, engine, where)
        unsupported += replica_problems(mode, [n.name for n in node_specs], where)
        problems += unsupported
        problem = (_engine_mode_problem(engine, mode, nodes, [n.name for n in node_specs])
                   if nodes and all(nodes) and not unsupported else None)
        if problem:
            reason = problem.split("): ", 1)[1] if problem.startswith("replica r") else problem  # the engine's words
            field = "ep" if mode.ep and reason.startswith("ep: ") else "dp" if mode.dp > 1 else size_field[-1]
            field = "replicas" if reason.startswith("replicas: ") else "pp" if reason.startswith("pp > 1") else field
            problems.append((where + (field,), problem if mode.dp == 1 and not mode.ep and mode.replicas == 1
                             else f"mode {mode.name}: {problem}"))
        if shape and shape["heads"] % mode.tp:
            problems.append((where + ("tp",), f"the model's {shape['heads']} attention heads are not "
                             f"divisible by tp={mode.tp}"))
        if shape and shape["layers"] < mode.pp:
            problems.append((where + ("pp",), f"pp={mode.pp} stages but the model has only "
                             f"{shape['layers']} layers"))
        elif shape and shape["layers"] % mode.pp:
            problems.append((where + ("pp",), f"mode {mode.name}: pp={mode.pp} does not divide the model's "
                             f"{shape['layers']} layers (stages of {shape['layers'] // mode.pp} and "
                             f"{shape['layers'] // mode.pp + 1} layers: the slowest stage sets the pace)"))
        if shape and mode.ep and not unsupported:
            problems += _expert_problems(mode, shape.get("experts", 0), where)
    knob_problems = [p for kind in engines for p in _knob_problems(campaign, engines[kind], kind)]
    problems += (_target_problems(campaign) + _network_problems(campaign) + _fault_problems(campaign)
                 + list(dict.fromkeys(knob_problems)))
    problems += _bf16_build_problems(campaign, engines, base_dir)
    problems += balancing_problems(campaign)   # nginx asked for where there is none (servebench/planning/balancing.py)
    if problems or not all(nodes):  # a mode the nodes cannot hold has no memory layout to check
        return problems
    return _memory_problems(campaign, engine_of, list(zip([n.name for n in node_specs], nodes)), base_dir,
                            host_memory)


def _parallel_support_problems(mode, engine, where: tuple) -> list[Problem]:
    """dp or ep on an engine without data or expert parallelism, at the field, naming the mode."""
    fields = engine.parallel_fields
    problems: list[Problem] = []
    if mode.dp > 1 and "dp" not in fields:
        problems.append((where + ("dp",), f"mode {mode.name}: engine {engine.kind!r} has no data parallelism "
                         f"(dp={mode.dp}): its modes take {', '.join(sorted(fields))} only (serve copies side by "
                         "side as separate modes instead)"))
    if mode.ep and "ep" not in fields:
        problems.append((where + ("ep",), f"mode {mode.name}: engine {engine.kind!r} has no expert parallelism "
                         f"(ep: true): its modes take {', '.join(sorted(fields))} only"))
    return problems


def replica_problems(mode: ModeSpec, server_names: list[str], where: tuple) -> list[Problem]:
    """A `replicas` mode whose nodes (its `nodes:`, else every server node) do not split in order into
    `replicas` equal shares, each replica a server on nodes of its own (docs/parallel-modes.md)."""
    if mode.replicas == 1:
        return []
    names = mode.nodes or server_names
    given = f"{len(names)} node{'s' if len(names) != 1 else ''} ({', '.join(names)})"
    if len(names) < mode.replicas:
        return [(where + ("replicas",), f"mode {mode.name}: replicas: {mode.replicas} runs each replica on nodes "
                 f"of its own, so it needs at least {mode.replicas} server nodes; it has {given}: give the mode "
                 "more `nodes:` (or the provider more nodes), or fewer replicas")]
    if len(names) % mode.replicas:
        return [(where + ("replicas",), f"mode {mode.name}: replicas: {mode.replicas} splits the mode's {given} "
                 f"in order, the same number to each replica, and {mode.replicas} does not divide "
                 f"{len(names)}: give it a multiple of {mode.replicas} nodes (`nodes:`)")]
    return []


def _engine_mode_problem(engine, mode: ModeSpec, server_cpus: list[list[int]], names: list[str]) -> str | None:
    """The engine's `mode_problem` on the mode's nodes; a `replicas` mode's on each replica's share of them
    (every replica is a whole server of the mode on its own nodes), the first replica that cannot hold it."""
    if mode.replicas == 1:
        return engine.mode_problem(mode, server_cpus, names)
    cpus_by_name = dict(zip(names, server_cpus))
    if any(name not in cpus_by_name for name in mode.nodes or []):
        return None   # _target_problems names the node
    for index, share in enumerate(split_for_replicas(mode.nodes or names, mode.replicas)):
        problem = engine.mode_problem(mode, [cpus_by_name[name] for name in share], share)
        if problem:
            return f"replica r{index} (on {', '.join(share)}): {problem}"
    return None


def _expert_problems(mode, experts: int, where: tuple) -> list[Problem]:
    """ep on a model without routed experts, or over more ranks than experts, or a split that does not divide
    them (vLLM would give the first experts % ranks ranks one expert more). Called for modes with ep only."""
    if not experts:
        return [(where + ("ep",), f"mode {mode.name}: ep: true but the model is dense (no routed experts): "
                 "expert parallelism splits an MoE layer's experts over the ranks; drop ep or serve an MoE model")]
    ranks = mode.ep_size
    if ranks > experts:
        return [(where + ("ep",), f"mode {mode.name}: ep: true splits the model's {experts} routed experts over "
                 f"dp x tp = {ranks} ranks: {ranks - experts} of them would hold none")]
    if experts % ranks:
        return [(where + ("ep",), f"mode {mode.name}: ep: true splits the model's {experts} routed experts over "
                 f"dp x tp = {ranks} ranks, which does not divide them (ranks of {experts // ranks} and "
                 f"{experts // ranks + 1} experts: the fullest rank sets the pace); choose dp x tp dividing "
                 f"{experts}")]
    return []


def _memory_problems(campaign: Campaign, engine_of: Callable[[str], Any], nodes: list[tuple[str, list[int]]],
                     base_dir: Path | None, host_memory: Callable[[], int | None] | None) -> list[Problem]:
    """Modes whose weights, KV cache and working set a node cannot hold (servebench/planning/memory.py),
    at the mode's name."""
    host = (host_memory or this_host_available_bytes)() if campaign.provider.nodes_on_this_host else None
    modes = variant_memory(campaign, engine_of, nodes, base_dir, host)
    return list(dict.fromkeys((("modes", index, "name"), message) for index, message in memory_problems(modes)))


def variant_memory(campaign: Campaign, engine_of: Callable[[str], Any], nodes: list[tuple[str, list[int]]],
                   base_dir: Path | None, host: int | None) -> list[ModeMemory]:
    """`campaign_memory` of every configuration with the weights of its own model variant (`model_axes`:
    a q4_0 file is a quarter of the f16 one); a `replicas` mode's is its first replica's, on that replica's
    nodes (each replica holds the same on its own)."""
    campaign = first_replicas(campaign)
    if campaign.model_axes is None:
        return campaign_memory(campaign, engine_of, nodes, base_dir, host)
    result: list[ModeMemory] = []
    for variant in campaign.model_axes.variants():
        served = campaign.model_copy(update={"model": campaign.model_variant(variant)})
        result += [m for m in campaign_memory(served, engine_of, nodes, base_dir, host) if m.mode.model == variant]
    return result


def first_replicas(campaign: Campaign) -> Campaign:
    """The campaign with each `replicas` mode narrowed to its first replica's nodes (memory is per server)."""
    servers = [node.name for node in server_node_specs(campaign)]
    narrowed = [mode.model_copy(update={"nodes": split_for_replicas(mode.nodes or servers, mode.replicas)[0]})
                if mode.replicas > 1 else mode for mode in campaign.modes]
    return campaign.model_copy(update={"modes": narrowed}) if narrowed != campaign.modes else campaign


def _quantization_problems(model: ModelSpec, engines: Iterable[Any]) -> list[Problem]:
    """`quantization` is a GGUF file's matrix type: an engine whose generated model is another format
    (a Hugging Face directory, written in `dtype`) would silently serve it unquantized."""
    if not isinstance(model, GeneratedModelSpec) or model.quantization is None:
        return []
    wanted = quantization_format(model.quantization)
    return [(("model", "quantization"), f"engine {engine.kind!r} serves the generated model as "
             f"{engine.default_model.format}, not {wanted}: quantization {model.quantization!r} is a {wanted} "
             f"format ({', '.join(QUANTIZATIONS[engine.default_model.format])} for this engine)")
            for engine in engines if engine.default_model.format != wanted]


def _model_axes_problems(campaign: Campaign, engines: dict[str, Any]) -> list[Problem]:
    """`model_axes` values an engine of the campaign cannot serve: a quantization axis needs an engine that
    serves the generated model as GGUF; a GGUF engine computes in its file's types, which have no bfloat16
    (sweep its quantization instead)."""
    axes = campaign.model_axes
    if axes is None:
        return []
    kinds = dict.fromkeys(campaign.engine_kind(mode) for mode in campaign.modes)
    problems: list[Problem] = []
    for kind in kinds:
        engine = engines[kind]
        gguf = engine.default_model.format == "gguf"
        foreign = [value for value in axes.quantization if quantization_format(value) != engine.default_model.format]
        if foreign:
            problems.append((("model_axes", "quantization"), f"engine {kind!r} serves the generated model as "
                             f"{engine.default_model.format}, not {quantization_format(foreign[0])}: "
                             f"{', '.join(foreign)} are not its formats (its: "
                             f"{', '.join(QUANTIZATIONS[engine.default_model.format])})"))
        unservable = [value for value in axes.dtype if gguf and value == "bfloat16"]
        if unservable and isinstance(campaign.model, GeneratedModelSpec):
            problems.append((("model_axes", "dtype"), f"engine {kind!r} serves GGUF files (f32, f16, q8_0, q4_0), "
                             "none of them bfloat16: sweep model_axes.quantization instead"))
    for variant in axes.variants():
        model = campaign.model_variant(variant)
        problems += [(("model_axes",), f"{variant_label(variant)}: {problem}") for kind in kinds
                     if (problem := engines[kind].model_problem(model))]
    return list(dict.fromkeys(problems))


def _bf16_build_problems(campaign: Campaign, engines: dict[str, Any], base_dir: Path | None) -> list[Problem]:
    """A mode whose build for another architecture cannot serve the model in bfloat16 (`dtype: bfloat16`, or
    `auto` and the model's own dtype is bf16): a prebuilt wheel's extension leaves OpenBLAS's bf16 GEMM unbound
    and the model's bf16 kernels call it (servebench/builds/blas_shim.py; docs/builds.md, "bf16 on aarch64")."""
    from servebench.builds.blas_shim import bf16_problem

    models = ([campaign.model] if campaign.model_axes is None
              else [campaign.model_variant(variant) for variant in campaign.model_axes.variants()])
    served = [served_dtype_and_architectures(model, base_dir) for model in models]
    problems: list[Problem] = []
    for index, mode in enumerate(campaign.modes):
        try:
            spec = campaign.engine_spec_for(mode)
        except ValueError:
            continue   # _target_problems names it
        if spec.build_target() is None:
            continue
        recipe = engines[campaign.engine_kind(mode)].build_recipe(spec)
        for dtype, architectures in served:
            hf = engines[campaign.engine_kind(mode)].default_model.format != "gguf"   # GGUF: its file's types
            if hf and (problem := no_bf16_target_problem(spec.build_target(), dtype)):
                problems.append((("modes", index, "build") if mode.build else ("modes", index, "name"),
                                 f"mode {mode.name}: {problem}"))
                break
            if problem := bf16_problem(recipe, dtype, architectures):
                problems.append((("modes", index, "build") if mode.build else ("modes", index, "name"),
                                 f"mode {mode.name}: build {spec.describe()} cannot serve this model: {problem}"))
                break
    return problems


GENERIC_ARM = "armv8-a"   # a build for every 64-bit Arm CPU, not one CPU: its nodes decide


def no_bf16_target_problem(target: str | None, dtype: str | None) -> str | None:
    """bfloat16 asked of an Arm target whose CPU has no bf16 instructions (A64FX, Neoverse N1): refused, as
    there is nothing to compute it with but a scalar fallback; the dtypes it has are named."""
    from servebench.platform.targets import TargetError, profile

    if dtype != "bfloat16" or target is None:
        return None
    try:
        chosen = profile(target)
    except TargetError:
        return None   # _target_problems names it
    if chosen.arch != "aarch64" or "bf16" in chosen.features or chosen.name == GENERIC_ARM:
        return None   # a generic build (PyPI's aarch64 wheel) computes bf16 where the node's CPU has it
    has = "float16 and float32" if "fphp" in chosen.features else "float32"
    return (f"target {target} ({chosen.description}) has no bf16 instructions, so it cannot serve bfloat16: "
            f"serve it {has} (`model: {{dtype: float32}}` on the mode, or the campaign's `model.dtype`)")


def served_dtype_and_architectures(model: ModelSpec, base_dir: Path | None) -> tuple[str | None, list[str]]:
    """The dtype a model is served in (`auto`: a generated model's bf16, a local one's config.json
    `torch_dtype`) and its config.json `architectures` (a generated model's presets have no layer that needs
    more than the build: none)."""
    if isinstance(model, GeneratedModelSpec):
        return model.served_dtype(), []
    model_dir = Path(os.path.expanduser(model.path))
    if not model_dir.is_absolute() and base_dir is not None:
        model_dir = base_dir / model_dir
    try:
        config = json.loads((model_dir / "config.json").read_text())
    except (OSError, ValueError):
        return (None if model.dtype == "auto" else model.dtype), []   # model_shape says what is wrong
    text_config = config.get("text_config") or {}
    dtype = model.dtype if model.dtype != "auto" else (
        config.get("torch_dtype") or config.get("dtype") or text_config.get("torch_dtype") or text_config.get("dtype"))
    return dtype, [str(name) for name in config.get("architectures") or []]


def _target_problems(campaign: Campaign) -> list[Problem]:
    """Emulated nodes and per-mode builds: a known profile with an emulator model, the nodes a mode
    names, build fields its engine takes, and a build of the architecture of every node it runs on
    (whether the CPU *features* fit is measured before serving: servebench/serving/preflight.py)."""
    from servebench.platform.targets import TargetError, host_arch, profile

    problems: list[Problem] = []
    arches: dict[str, str | None] = {}   # None: another host, whose architecture its inventory tells (at placement)
    node_field = campaign.provider.nodes_field
    for index, node in enumerate(campaign.provider.node_specs()):
        arches[node.name] = host_arch() if campaign.provider.nodes_on_this_host else None
        if node.emulate is None:
            continue
        try:
            target = profile(node.emulate)
        except TargetError as exc:
            problems.append((("provider", node_field, index, "emulate"), str(exc)))
            continue
        if target.emulator_cpu is None:
            problems.append((("provider", node_field, index, "emulate"), f"{target.name} is this host's "
                             "architecture: nothing to emulate (emulate: an aarch64 profile)"))
        arches[node.name] = target.arch
    servers = [node.name for node in server_node_specs(campaign)]
    for index, mode in enumerate(campaign.modes):
        mode_nodes = mode.nodes or []
        for position, name in enumerate(mode_nodes):
            if name not in servers:
                problems.append((("modes", index, "nodes", position), f"node {name!r} is not a server node "
                                 f"of the provider ({', '.join(servers)})"))
            elif name in mode_nodes[:position]:
                problems.append((("modes", index, "nodes", position), f"node {name!r} is named twice"))
        try:
            spec = campaign.engine_spec_for(mode)
        except ValueError as exc:
            problems.append((("modes", index, "build"), f"not a build of engine {campaign.engine_kind(mode)!r}: "
                             + "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
                             if hasattr(exc, "errors") else str(exc)))
            continue
        build_target = spec.build_target()
        build_arch = profile(build_target).arch if build_target else host_arch()
        for name in (mode.nodes or servers):
            if arches.get(name) not in (None, build_arch):
                where = ("modes", index, "build") if mode.build else ("modes", index, "name")
                problems.append((where, f"mode {mode.name} runs on node {name} ({arches[name]}) but its build is "
                                 f"for {build_arch}: give the mode `build: {{target: PROFILE}}` of that architecture"
                                 + ("" if mode.nodes else " and `nodes:` to run on")))
                break
    return problems


# what a mode sets about how servebench starts its server, at the value that starts none of its own
STARTING_FIELDS: dict[str, Any] = {"tp": 1, "pp": 1, "dp": 1, "ep": False, "replicas": 1, "oversubscribe": False,
                                   "args": [], "env": {}, "nodes": None, "build": {}}


def _external_server_problems(campaign: Campaign, engines: dict[str, Any],
                              engine_of: Callable[[str], Any]) -> list[Problem]:
    """For an engine that measures servers it did not start (`starts_servers` False): its block's fields that
    name an engine there is none of (`Engine.for_spec`), its modes' fields that only a server servebench
    starts can have, and the campaign's faults and model axes, which act on such a server's processes and
    model files."""
    problems: list[Problem] = []
    external = [kind for kind, engine in engines.items() if not engine.starts_servers]
    for index, (kind, spec) in enumerate(campaign.engine_specs().items()):
        if kind not in external:
            continue
        block = ("engine",) if index == 0 else ("engines", index - 1)
        try:
            engines[kind].for_spec(spec, engine_of)
        except EngineSpecError as exc:
            problems.append((block + (exc.field,), str(exc)))
    why = "servebench did not start the server it measures"
    for index, mode in enumerate(campaign.modes):
        if campaign.engine_kind(mode) in external:
            problems += [(("modes", index, name), f"mode {mode.name}: {name} sets how servebench starts a "
                          f"server, and {why} (leave {name} out)")
                         for name, plain in STARTING_FIELDS.items() if getattr(mode, name) != plain]
    if external and campaign.faults:
        problems.append((("faults",), f"faults act on the processes of the servers a run starts, and {why} "
                         f"(engine {', '.join(external)}): leave `faults` out"))
    if external and campaign.model_axes is not None:
        problems.append((("model_axes",), f"model variants are model files a run serves, and {why} "
                         f"(engine {', '.join(external)}): leave `model_axes` out"))
    return problems


def _engine_problems(campaign: Campaign) -> list[Problem]:
    """An engine kind given twice, or a mode naming an engine the campaign does not list."""
    kinds = [campaign.engine.kind]
    problems: list[Problem] = []
    for index, spec in enumerate(campaign.engines):
        if spec.kind in kinds:
            problems.append((("engines", index, "kind"), f"engine {spec.kind!r} is given already: each kind once "
                             f"(the campaign's engine is {campaign.engine.kind!r})"))
        kinds.append(spec.kind)
    for index, mode in enumerate(campaign.modes):
        if mode.engine is not None and mode.engine not in kinds:
            problems.append((("modes", index, "engine"), f"engine {mode.engine!r} is not among the campaign's "
                             f"engines ({', '.join(kinds)}): add it under `engines:`"))
    return problems


def _knob_problems(campaign: Campaign, engine, kind: str) -> list[Problem]:
    """Knobs the engine (of kind `kind`) does not have or values it does not take, on its modes and
    on the campaign's axes (which every mode gets); two configurations with one name."""
    from servebench.config.sweep import configurations

    problems: list[Problem] = []
    engine_knobs = engine.knobs
    known = ", ".join(sorted(engine_knobs)) or "none"
    served = [(index, mode) for index, mode in enumerate(campaign.modes) if campaign.engine_kind(mode) == kind]
    settings: list[tuple[tuple, str, KnobValue]] = [
        (("knobs", name, index), name, value) for name, values in campaign.knobs.items()
        for index, value in enumerate(values)] if served else []
    settings += [(("modes", index, "knobs", name), name, value) for index, mode in served
                 for name, value in mode.knobs.items()]
    for where, name, value in settings:
        knob = engine_knobs.get(name)
        if knob is None:
            problems.append((where[:-1] if where[0] == "knobs" else where,
                             f"engine {engine.kind!r} has no knob {name!r}; it has: {known}"))
        elif (problem := knob.problem(value)) is not None:
            problems.append((where, f"knob {name!r} {problem}"))
    for index, mode in enumerate(campaign.modes):
        for name in sorted(set(mode.knobs) & set(campaign.knobs)):
            problems.append((("modes", index, "knobs", name), f"knob {name!r} is set here and swept by the "
                             "campaign's knobs axis: give it in one place"))
    names = [mode.name for mode in configurations(campaign)]
    clashes = sorted({name for name in names if names.count(name) > 1})
    if clashes and campaign.knobs:
        problems.append((("knobs",), f"modes and knob values give configurations the same name: {', '.join(clashes)}"))
    return list(dict.fromkeys(problems))


def _network_problems(campaign: Campaign) -> list[Problem]:
    """A provider that cannot shape its nodes' links; two link settings that would give cells the same key."""
    from servebench.providers import capability_problem
    from servebench.providers.base import LINK_SHAPING

    if campaign.network is None:
        return []
    problem = capability_problem(campaign.provider.kind, LINK_SHAPING, "the network axis")
    labels = [link.label for link in campaign.network.links]
    return ([(("network",), problem)] if problem else []) + [
        (("network", "links", index), f"link setting {label!r} is given more than once (to measure a setting "
                                      "again, give the second one a `name:`)")
        for index, label in enumerate(labels) if label in labels[:index]]


def _fault_problems(campaign: Campaign) -> list[Problem]:
    """A fault for a cell the campaign does not have, or on a node it does not have, or one its provider
    cannot inject (an allocation to cancel from a provider that holds none, a link it cannot cut)."""
    from servebench.config.sweep import expand
    from servebench.providers import capability_problem
    from servebench.providers.base import CANCEL_ALLOCATION, LINK_SHAPING

    needs = {"cancel-allocation": CANCEL_ALLOCATION, "cut-host": LINK_SHAPING}

    keys = {cell.key for cell in expand(campaign)}
    nodes = [node.name for node in campaign.provider.node_specs()]
    problems: list[Problem] = []
    for index, fault in enumerate(campaign.faults):
        if fault.cell not in keys:
            problems.append((("faults", index, "cell"), f"no cell {fault.cell!r} in this campaign; its cells: "
                             f"{', '.join(sorted(keys)[:8])}{' ...' if len(keys) > 8 else ''}"))
        if fault.node is not None and fault.node not in nodes:
            problems.append((("faults", index, "node"), f"the provider has no node {fault.node!r}; its nodes: "
                             f"{', '.join(nodes)}"))
        if fault.after_requests is not None and campaign.load.client.node is not None:
            problems.append((("faults", index, "after_requests"), "counted from the load generator's progress "
                             "file on this host: the generator must run here (no load.client.node)"))
        if fault.after_requests is not None and "at_s" in fault.model_fields_set:
            problems.append((("faults", index, "after_requests"), "give at_s or after_requests, not both"))
        problem = capability_problem(campaign.provider.kind, needs[fault.action], f"a {fault.action} fault") \
            if fault.action in needs else None
        if problem:
            problems.append((("faults", index, "action"), problem))
    return problems


def _client_problems(campaign: Campaign, host_cpus: set[int], client: ClientPlacement) -> list[Problem]:
    """Generator CPUs that are not on this host, and nodes the generator's CPUs leave empty."""
    if client.node is not None:
        return _client_node_problems(campaign, client)
    problems: list[Problem] = []
    requested = campaign.load.client.cpus
    if isinstance(requested, list) and set(requested) - host_cpus:
        problems.append((("load", "client", "cpus"), f"CPUs {sorted(set(requested) - host_cpus)} are not "
                         f"available on this host (allowed: {sorted(host_cpus)})"))
    if not campaign.provider.nodes_on_this_host:
        return problems
    for index, node in enumerate(campaign.provider.node_specs()):
        if not server_cpus(node.cpus, client):
            problems.append((("provider", campaign.provider.nodes_field, index, "cpus"),
                             f"node {node.name} has no CPU left for servers: the load generator has {client.cpus} "
                             f"({client.why})"))
    return problems


def _client_node_problems(campaign: Campaign, client: ClientPlacement) -> list[Problem]:
    """A client node the provider does not have, that leaves no node to serve, or CPUs it lacks."""
    names = [node.name for node in campaign.provider.node_specs()]
    if client.node not in names:
        return [(("load", "client", "node"), f"the provider has no node {client.node!r}; its nodes: "
                 f"{', '.join(names)}")]
    if len(names) < 2:
        return [(("load", "client", "node"), f"node {client.node} is the provider's only node: none would be "
                 "left to serve")]
    node_cpus = next(node.cpus for node in campaign.provider.node_specs() if node.name == client.node)
    requested = campaign.load.client.cpus
    if isinstance(requested, list) and set(requested) - set(node_cpus):
        return [(("load", "client", "cpus"), f"CPUs {sorted(set(requested) - set(node_cpus))} are not among "
                 f"the client node {client.node}'s ({sorted(node_cpus)})")]
    return []


def model_format(model: ModelSpec, base_dir: Path | None) -> str | None:
    """'hf' (a Hugging Face directory) or 'gguf' (a .gguf file); None for the generated model,
    which is written in the format each engine serves."""
    if isinstance(model, GeneratedModelSpec):
        return None
    return "gguf" if model.path.lower().endswith(".gguf") else "hf"


def model_shape(model: ModelSpec, base_dir: Path | None) -> tuple[dict[str, int] | None, str | None]:
    """Heads and layers of the model, from its spec or its config.json."""
    if isinstance(model, GeneratedModelSpec):
        return {"heads": model.heads, "layers": model.layers, "experts": routed_experts(model.shape())}, None
    model_dir = Path(os.path.expanduser(model.path))
    if not model_dir.is_absolute() and base_dir is not None:
        model_dir = base_dir / model_dir
    config_file = model_dir / "config.json"
    try:
        config = json.loads(config_file.read_text())
    except FileNotFoundError:
        return None, f"no config.json in model directory {model_dir}"
    except (OSError, ValueError) as exc:
        return None, f"cannot read {config_file}: {exc}"
    text_config = config.get("text_config", config)
    try:
        return {"heads": int(text_config["num_attention_heads"]),
                "layers": int(text_config["num_hidden_layers"]),
                "experts": int(next((text_config[key] for key in EXPERT_KEYS if text_config.get(key)), 0))}, None
    except (KeyError, TypeError, ValueError):
        return None, f"{config_file} lacks num_attention_heads / num_hidden_layers"


# config.json's routed-experts count: DeepSeek-V2/V3, Mixtral, Qwen2/Qwen3-MoE (a dense model has none)
EXPERT_KEYS = ("n_routed_experts", "num_local_experts", "num_experts")


def routed_experts(shape: Any) -> int:
    """A generated model's routed experts per MoE layer (0: dense; servebench/models/shapes.py)."""
    return int(shape.experts)


