"""A campaign as `servebench bisect` measures it: which git source it bisects, the commits from good
to bad, and the campaign of one step (one mode at one commit). Checked before any flow starts, so
a wrong mode, a campaign without a git source or a bad pair of commits fails in a second."""

from __future__ import annotations

import copy
from pathlib import Path

from servebench.analysis.bisect import BisectError
from servebench.build import git_source
from servebench.campaign.schema import Campaign, GitSourceSpec


def bisected_source(campaign: Campaign, mode_name: str) -> GitSourceSpec:
    """The git source the mode is built from; a clear error when there is none."""
    mode = next((m for m in campaign.modes if m.name == mode_name), None)
    if mode is None:
        raise BisectError(f"campaign {campaign.name} has no mode {mode_name!r} "
                          f"({', '.join(m.name for m in campaign.modes)})")
    if campaign.engine_kind(mode) != campaign.engine.kind or mode.build:
        raise BisectError(f"mode {mode_name!r} is not built from the campaign's engine block: bisect one that is")
    source = getattr(campaign.engine, "source", None)
    if not isinstance(source, GitSourceSpec):
        raise BisectError(f"campaign {campaign.name}: the engine has no git source to bisect; give it "
                          "`source: {git: /path/to/repo, commit: ...}` (docs/builds.md)")
    return source


def repository_of(source: GitSourceSpec, campaign_dir: Path) -> str:
    """The source's repository; a relative local path is taken from the campaign file's directory."""
    if not git_source.is_local(source.git) or Path(source.git).is_absolute():
        return source.git
    return str((campaign_dir / source.git).resolve())


def commits_to_bisect(campaign: Campaign, campaign_dir: Path, mode_name: str, good: str, bad: str,
                      cache: Path) -> tuple[str, list[str]]:
    """(repository, [good, ..., bad] as full hashes)."""
    repo = repository_of(bisected_source(campaign, mode_name), campaign_dir)
    return repo, git_source.commits_between(repo, good, bad, cache)


def step_campaign(data: dict, campaign_dir: Path, mode_name: str, commit: str, repeats: int) -> dict:
    """The campaign as one step measures it: the one mode, at `commit`, at the first load point, with
    `repeats` cells; no knob axes, faults, network axis or search. Relative paths made absolute."""
    data = copy.deepcopy(data)
    data["name"] = f"{data['name']}-bisect"
    source = data["engine"]["source"]
    source.pop("commits", None)
    source["commit"] = commit
    data["modes"] = [m for m in data["modes"] if m["name"] == mode_name]
    for axis in ("knobs", "faults", "search", "network", "engines"):
        data.pop(axis, None)
    load = data["load"]
    if load.get("clients"):
        load["clients"], load["rates"] = [load["clients"][0]], []
    else:
        load["rates"], load["clients"] = [load["rates"][0]], []
    load["repeats"] = repeats
    model = data.get("model") or {}
    if model.get("path") and not Path(model["path"]).is_absolute():
        model["path"] = str((campaign_dir / model["path"]).resolve())
    source["git"] = repository_of(GitSourceSpec(git=source["git"], commit=commit), campaign_dir)
    return data
