"""The bisect flow: which commit of the engine made a campaign's metric worse.

The story: list the commits from good to bad (git), measure the good one (the baseline), then
halve the range: build the midpoint (through the cache: a commit built once is never built again),
run the campaign's mode at it as an ordinary run, judge it against the baseline
(`servebench/analysis/bisect.py`), land the step. Each step is a full run in the warehouse, so its
cells, requests and build are there to look at afterwards.
"""

from __future__ import annotations

import json
import statistics
import uuid
from datetime import datetime, timezone
from pathlib import Path

import yaml
from prefect import flow

from servebench import warehouse
from servebench.paths import default_warehouse
from servebench.flows.campaign import campaign_run
from servebench.warehouse import store
from servebench.analysis.bisect import BisectError, Step, judge, most_builds, search
from servebench.analysis.regression.series import METRICS
from servebench.builds import git_source
from servebench.campaign.bisect import commits_to_bisect, step_campaign
from servebench.campaign.loading import load_campaign
from servebench.paths import cache_dir, runs_dir
from servebench.progress import reporter
from servebench.warehouse.store import session

BISECT_METRICS = [name for name in METRICS if name != "capacity"]


def step_results(wh: str, run_id: str, mode: str, metric: str) -> tuple[list[float], str | None]:
    """A step's run as the bisect reads it: the metric of each completed cell, and its build key."""
    con = warehouse.connect(wh, read_only=True)
    try:
        return store.completed_metric(con, run_id, mode, metric), store.run_build_key(con, run_id)
    finally:
        con.close()


@flow(name="bisect", log_prints=False)
def bisect_run(campaign_file: str, good: str, bad: str, metric: str = "tpot_p50_ms", mode: str | None = None,
               threshold: float = 0.10, repeats: int = 3, warehouse_path: str | None = None,
               point: str | None = None) -> dict:
    """Find the first commit between good and bad whose metric is worse; return the steps and it."""
    if metric not in BISECT_METRICS:
        raise BisectError(f"metric {metric!r}: one of {', '.join(BISECT_METRICS)}")
    campaign = load_campaign(campaign_file)
    mode = mode or campaign.modes[0].name
    campaign_dir = Path(campaign_file).resolve().parent
    cache = cache_dir()
    repo, commits = commits_to_bisect(campaign, mode, good, bad, cache)
    wh = str(warehouse_path or default_warehouse())
    data = yaml.safe_load(Path(campaign_file).read_text())
    bisect_id = f"bisect-{datetime.now(timezone.utc):%Y%m%d-%H%M%S}-{uuid.uuid4().hex[:6]}"
    folder = runs_dir() / bisect_id
    folder.mkdir(parents=True)
    direction = METRICS[metric].direction
    reporter().stage(f"bisect {len(commits)} commits ({commits[0][:12]} good .. {commits[-1][:12]} bad), "
                     f"at most {most_builds(len(commits))} builds")
    steps: list[dict] = []

    subjects: dict[str, str] = {}

    def subject(commit: str) -> str:
        if commit not in subjects:
            subjects[commit] = git_source.subject(repo, commit, cache)
        return subjects[commit]

    def measure(commit: str) -> tuple[list[float], str, str | None]:
        text = yaml.safe_dump(step_campaign(data, campaign, campaign_dir, mode, commit, repeats, point),
                              sort_keys=False)
        path = folder / f"step{len(steps)}-{commit[:12]}.yaml"
        path.write_text(text)
        reporter().stage(f"bisect step {len(steps)}: {commit[:12]} {subject(commit)}")
        try:
            outcome = campaign_run(campaign_file=str(path), warehouse_path=wh)
        except Exception as exc:  # a commit that does not build or serve: say which, keep the steps so far
            raise BisectError(f"commit {commit[:12]} could not be measured: {exc}") from exc
        values, build_key = step_results(wh, outcome["run_id"], mode, metric)
        if outcome["status"] != "completed" or len(values) < repeats:
            raise BisectError(f"commit {commit[:12]}: run {outcome['run_id']} ended {outcome['status']} with "
                              f"{len(values)} of {repeats} cells measured (servebench query on it says why)")
        return values, outcome["run_id"], build_key

    def land(step: Step | None, commit: str, values: list[float], run_id: str, build_key: str | None) -> None:
        row = dict(bisect_id=bisect_id, step=len(steps), campaign=campaign.name, mode=mode, metric=metric,
                   direction=direction, good=commits[0], bad=commits[-1], commit_hash=commit,
                   subject=subject(commit), run_id=run_id, build_key=build_key,
                   repeat_values=values, value=step.value if step else statistics.median(values),
                   change=step.change if step else None, separation=step.separation if step else None,
                   verdict="baseline" if step is None else step.verdict,
                   measured_at=datetime.now(timezone.utc))
        with session(wh) as con:
            store.land_bisect_step(con, row)
        steps.append(row)
        (folder / "bisect.json").write_text(json.dumps(steps, default=str, indent=1))

    baseline, run_id, key = measure(commits[0])
    land(None, commits[0], baseline, run_id, key)

    def is_bad(commit: str) -> bool:
        values, run_id, key = measure(commit)
        step = judge(commit, baseline, values, direction, threshold)
        land(step, commit, values, run_id, key)
        if step.undecided:  # landed, then stop: a guess here would send the rest of the search astray
            raise BisectError(step.undecided)
        reporter().stage(f"bisect: {commit[:12]} is {'bad' if step.bad else 'good'} ({step.change:+.1%} worse; "
                         f"repeats apart by {step.separation:+.1%})")
        return step.bad

    found, _ = search(commits, is_bad)
    return {"bisect_id": bisect_id, "first_bad": commits[found],
            "subject": subject(commits[found]),
            "last_good": commits[found - 1], "commits": len(commits), "builds": len(steps),
            "most_builds": most_builds(len(commits)), "steps": steps, "warehouse": wh, "folder": str(folder),
            "bad_measured": any(s["commit_hash"] == commits[found] for s in steps)}
