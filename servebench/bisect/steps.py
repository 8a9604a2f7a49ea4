"""A campaign as `servebench bisect` measures it: which mode and load point, which git source, the
commits from good to bad, and the campaign of one step (that mode at one commit). Checked before
any flow starts, so a wrong mode or point, a campaign without a git source or a bad pair of commits
fails in a second."""

from __future__ import annotations

import copy
from pathlib import Path

from servebench.bisect.search import BisectError
from servebench.builds import git_source
from servebench.config.campaign import Campaign, GitSourceSpec, ModeSpec
from servebench.config.sweep import LoadPoint, configurations, load_points


def bisected_mode(campaign: Campaign, mode_name: str) -> ModeSpec:
    """A mode of the campaign, or one of its knob configurations (`tp1-mns8`: how the detector names
    a series), as it is served."""
    for mode in [*campaign.modes, *configurations(campaign)]:
        if mode.name == mode_name:
            return mode
    names = sorted({m.name for m in [*campaign.modes, *configurations(campaign)]})
    raise BisectError(f"campaign {campaign.name} has no mode or configuration {mode_name!r} ({', '.join(names)})")


def bisected_point(campaign: Campaign, label: str | None) -> LoadPoint:
    """The load point a step measures: the campaign's first, or the one labelled (`c4`, `rate8`)."""
    points = load_points(campaign)
    if label is None:
        return points[0]
    found = next((p for p in points if p.label == label), None)
    if found is None:
        raise BisectError(f"campaign {campaign.name} has no load point {label!r} "
                          f"({', '.join(p.label for p in points)})")
    return found


def bisected_source(campaign: Campaign, mode: ModeSpec) -> GitSourceSpec:
    """The git source the mode is built from (its engine block's declared one); a clear error when there is
    none."""
    if campaign.engine_kind(mode) != campaign.engine.kind or mode.build:
        raise BisectError(f"mode {mode.name!r} is not built from the campaign's engine block: bisect one that is")
    source = campaign.engine.git_source()
    if source is None:
        raise BisectError(f"campaign {campaign.name}: the engine has no git source to bisect; give it "
                          "`source: {git: /path/to/repo, commit: ...}` (docs/builds.md)")
    return source


def commits_to_bisect(campaign: Campaign, mode_name: str, good: str, bad: str, cache: Path) -> tuple[str, list[str]]:
    """(repository, [good, ..., bad] as full hashes)."""
    repo = bisected_source(campaign, bisected_mode(campaign, mode_name)).git
    return repo, git_source.commits_between(repo, good, bad, cache)


def step_campaign(data: dict, campaign: Campaign, campaign_dir: Path, mode_name: str, commit: str, repeats: int,
                  point: str | None = None) -> dict:
    """The campaign file's data as one step measures it: the one mode (a configuration with its knob
    values), at `commit`, at one load point, with `repeats` cells; no knob axes, faults, network
    axis or search; a relative model path, and a workload's data paths, made absolute."""
    mode = bisected_mode(campaign, mode_name)
    measured = bisected_point(campaign, point)
    data = copy.deepcopy(data)
    data["name"] = f"{data['name']}-bisect"
    source = data["engine"][campaign.engine.git_source_field]
    source.pop("commits", None)
    source["commit"] = commit
    data["modes"] = [mode.model_dump(mode="json", exclude_defaults=True) | {"executor": mode.executor}]
    for axis in ("knobs", "faults", "search", "network", "engines"):
        data.pop(axis, None)
    load = data["load"]
    load["clients"] = [measured.clients] if measured.kind == "closed" else []
    load["rates"] = [measured.rate] if measured.kind == "open" else []
    load["repeats"] = repeats
    if campaign.load.workload:  # as validated: its data files' paths absolute (docs/workloads.md)
        load["workload"] = [workload.model_dump(mode="json") for workload in campaign.load.workload]
    model = data.get("model") or {}
    if model.get("path") and not Path(model["path"]).is_absolute():
        model["path"] = str((campaign_dir / model["path"]).resolve())
    return data
