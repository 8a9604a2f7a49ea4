"""Sweep expansion: a campaign becomes an ordered list of cells.

A cell is one mode x one load point x one repeat (x one workload, with a `load.workload`
block; x one link setting, with a network axis). Its key is derived from what it measures,
never from its position, so the same campaign yields the same keys on every night and a
series can be followed across runs.
"""

from __future__ import annotations

import itertools
import re
import zlib
from typing import Literal

from pydantic import BaseModel, ConfigDict

from servebench.config.campaign import (
    Campaign,
    EngineSpecBase,
    KnobValue,
    LinkSetting,
    ModeSpec,
    commit_label,
    variant_label,
)
from servebench.load.workload_spec import SessionsWorkload, TraceWorkload, WorkloadSpec


class LoadPoint(BaseModel):
    model_config = ConfigDict(frozen=True)

    kind: Literal["closed", "open"]
    clients: int | None = None
    rate: float | None = None

    @property
    def label(self) -> str:
        return f"c{self.clients}" if self.kind == "closed" else f"rate{_number(self.rate)}"


class Cell(BaseModel):
    model_config = ConfigDict(frozen=True)

    key: str
    mode: ModeSpec
    point: LoadPoint
    repeat: int
    seed: int
    link: LinkSetting | None = None    # the network condition (campaigns with a network axis)
    workload: WorkloadSpec | None = None  # what the requests ask (campaigns with a workload block)

    @property
    def label(self) -> str:
        network = f" {self.link.label}" if self.link is not None else ""
        workload = f" {self.workload.label}" if self.workload is not None else ""
        return f"{self.mode.name}{network}{workload} {self.point.label} repeat {self.repeat}"


def load_points(campaign: Campaign) -> list[LoadPoint]:
    """Closed-loop points (low to high clients) first, then open-loop rates (low to high)."""
    closed = [LoadPoint(kind="closed", clients=n) for n in sorted(set(campaign.load.clients))]
    opened = [LoadPoint(kind="open", rate=r) for r in sorted(set(campaign.load.rates))]
    return closed + opened


def workloads(campaign: Campaign) -> list[WorkloadSpec | None]:
    """The campaign's workloads in file order; [None]: the fixed lengths of `load.input_len/output_len`."""
    return list(campaign.load.workload) or [None]


def workload_points(campaign: Campaign, workload: WorkloadSpec | None) -> list[LoadPoint]:
    """The load points a workload runs at: every point, except for a trace, which replays on its own
    schedule, rescaled to each of the campaign's rates as its mean rate, or (without rates) once at
    its own mean rate; and for sessions, whose turns follow their answers, at each of `clients` as the
    conversations at once, or (without clients) with every session at once."""
    if isinstance(workload, SessionsWorkload):
        clients = sorted(set(campaign.load.clients)) or [workload.sessions]
        return [LoadPoint(kind="closed", clients=n) for n in clients]
    if not isinstance(workload, TraceWorkload):
        return load_points(campaign)
    if campaign.load.rates:
        return [LoadPoint(kind="open", rate=rate) for rate in sorted(set(campaign.load.rates))]
    return [LoadPoint(kind="open", rate=workload.own_rate())]  # (the campaign rejects a trace without one)


def configurations(campaign: Campaign) -> list[ModeSpec]:
    """The modes as served: each of the campaign's modes once per combination of its knob axes'
    values (in file order, the first value of every axis first), named by the values that are set:
    `tp1`, `tp1-mns8`, `tp1-mns8-cpoff`. The first is the campaign's default configuration."""
    return [mode for _, mode in configuration_space(campaign)]


def configuration_space(campaign: Campaign) -> list[tuple[dict[str, KnobValue], ModeSpec]]:
    """Every configuration with the point it is in the tuning space: {"mode": name, knob: value...}; with
    `model_axes`, each once per model variant (`tp1-mns8-q4_0`: its `model:` set, "dtype"/"quantization"
    in its point)."""
    names = list(campaign.knobs)
    space = []
    for mode in campaign.modes:
        for values in itertools.product(*(campaign.knobs[name] for name in names)):
            combination = dict(zip(names, values))
            label = "-".join(knob_label(name, value) for name, value in combination.items() if value is not None)
            served = mode if not combination else mode.model_copy(update={
                "name": f"{mode.name}-{label}" if label else mode.name, "knobs": {**mode.knobs, **combination}})
            for variant in model_variants(campaign):
                point: dict[str, KnobValue] = {"mode": mode.name, **combination, **variant}
                space += at_each_commit(campaign, point, with_model_variant(served, variant))
    return space


def model_variants(campaign: Campaign) -> list[dict[str, str]]:
    """The model variants every mode is served with: the combinations of `model_axes`, or [{}] (none)."""
    return campaign.model_axes.variants() if campaign.model_axes is not None else [{}]


def with_model_variant(mode: ModeSpec, variant: dict[str, str]) -> ModeSpec:
    """The mode serving this model variant, named by it: `tp1-q4_0` (itself for {})."""
    if not variant:
        return mode
    return mode.model_copy(update={"name": f"{mode.name}-{variant_label(variant)}",
                                   "model": {**mode.model, **variant}})


def reference_knobs(numerics: set[str], modes: list[ModeSpec]) -> dict[str, KnobValue]:
    """The knobs among `numerics` (an engine's knobs that change how it computes, e.g. vLLM's
    `enforce_eager`) that every one of `modes` sets to the same value: the TP=1 reference is
    served with them, so a mode is judged against the same arithmetic in one process, not
    against another setting."""
    if not modes:
        return {}
    first = modes[0].knobs
    return {name: first[name] for name in sorted(numerics)
            if first.get(name) is not None and all(m.knobs.get(name) == first[name] for m in modes)}


def at_each_commit(campaign: Campaign, point: dict[str, KnobValue],
                   mode: ModeSpec) -> list[tuple[dict[str, KnobValue], ModeSpec]]:
    """A mode once per commit of its engine's commit axis (`source: {commits: [...]}`), named
    `<mode>-<commit>`: the first commit is the engine's own build (its answers the reference), every
    other a build of the mode's own (`build: {source: ...}`)."""
    commits = campaign.commit_axis(mode)
    if not commits:
        return [(point, mode)]
    spec = campaign.engine_spec_for(mode)
    served = []
    for index, commit in enumerate(commits):
        update: dict = {"name": f"{mode.name}-{commit_label(commit)}"}
        if index > 0:
            update["build"] = {**mode.build, **spec.at_commit(commit)}
        served.append(({**point, "commit": commit}, mode.model_copy(update=update)))
    return served


def build_specs(campaign: Campaign) -> list[tuple[str, EngineSpecBase]]:
    """Every distinct build the campaign needs, as (engine kind, engine block): each engine's
    block, then the blocks of configurations whose build differs (`build:`, a commit axis), in order."""
    specs = list(campaign.engine_specs().items())
    for mode in configurations(campaign):
        pair = (campaign.engine_kind(mode), campaign.engine_spec_for(mode))
        if pair not in specs:
            specs.append(pair)
    return specs


def variant_specs(campaign: Campaign, modes: list[ModeSpec], base: EngineSpecBase) -> list[EngineSpecBase]:
    """The distinct engine blocks of `modes` that change their build from `base` (their engine's
    block), in mode order: each is built and placed beside the engine's own build."""
    specs: list[EngineSpecBase] = []
    for mode in modes:
        spec = campaign.engine_spec_for(mode)
        if spec != base and spec not in specs:
            specs.append(spec)
    return specs


def knob_label(name: str, value: KnobValue) -> str:
    """max_num_seqs=8 -> 'mns8', chunked_prefill=False -> 'cpoff', kv_cache_gib=0.5 -> 'kcg0p5': the
    initials of the knob's words and its value, short enough for cell keys (docs/tuning.md)."""
    initials = "".join(word[0] for word in name.split("_") if word)
    if isinstance(value, bool):
        text = "on" if value else "off"
    else:
        text = (f"{value:g}" if isinstance(value, float) else str(value)).replace(".", "p")
    return initials + re.sub(r"[^A-Za-z0-9_]", "_", text)


def expand(campaign: Campaign) -> list[Cell]:
    """Every cell in run order: grouped by mode, since one server serves all of a mode's cells."""
    cells = []
    links: list[LinkSetting | None] = list(campaign.network.links) if campaign.network else [None]
    for mode in configurations(campaign):
        for link in links:  # the links change between cells; the mode's server keeps running
            for workload in workloads(campaign):
                for point in workload_points(campaign, workload):
                    for repeat in range(campaign.load.repeats):
                        cells.append(Cell(
                            key=cell_key(mode.name, point, repeat, link, workload),
                            mode=mode,
                            point=point,
                            repeat=repeat,
                            seed=cell_seed(campaign.load.seed, mode.name, point, repeat),
                            link=link,
                            workload=workload,
                        ))
    return cells


def search_cell(campaign: Campaign, mode: ModeSpec, value: float, repeat: int = 0) -> Cell:
    """A capacity search's probe as a cell: `tp1.cap.rate5.66.r0` (or `tp1.cap.c6.r0`), apart from
    the campaign's own load points, with the seed that point would have."""
    assert campaign.search is not None  # only a campaign with a capacity search probes
    over = campaign.search.over
    point = LoadPoint(kind="closed", clients=int(value)) if over == "clients" else LoadPoint(kind="open", rate=value)
    return Cell(key=f"{mode.name}.cap.{point.label}.r{repeat}", mode=mode, point=point, repeat=repeat,
                seed=cell_seed(campaign.load.seed, mode.name, point, repeat), workload=workloads(campaign)[0])


def cell_workload_config(campaign: Campaign, cell: Cell) -> dict:
    """The load generator's fields for the cell's workload (`LoadConfig(**...)`): the block, and the
    context of a generated model, so an over-long prompt is refused before it is sent."""
    if cell.workload is None:
        return {}
    context = getattr(campaign.model, "max_position", None)
    return {"workload": cell.workload, "max_context": context}


def cell_key(mode_name: str, point: LoadPoint, repeat: int, link: LinkSetting | None = None,
             workload: WorkloadSpec | None = None) -> str:
    """tp2.c4.r0; with a network axis tp2.d5ms.c4.r0 (the same workload under every setting); with a
    workload block tp2.prefix.c4.r0 (its name)."""
    network = f"{link.label}." if link is not None else ""
    named = f"{workload.label}." if workload is not None else ""
    return f"{mode_name}.{network}{named}{point.label}.r{repeat}"


def cell_seed(base_seed: int, mode_name: str, point: LoadPoint, repeat: int) -> int:
    """Per-cell seed: the same prompts and arrivals for the same point in every mode.

    The mode is deliberately not part of the seed so that modes are compared on identical
    workloads; repeats differ so they sample the workload's variance.
    """
    del mode_name
    return (base_seed * 1_000_003 + zlib.crc32(f"{point.label}/{repeat}".encode())) % (2**31)


def _number(value: float | None) -> str:
    assert value is not None
    return f"{value:g}"
