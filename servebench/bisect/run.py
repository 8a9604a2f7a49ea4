"""A bisect as plain Python: which commit of the engine made a campaign's metric worse.

List the commits from good to bad (git), measure the good one (the baseline), then halve the
range: run the campaign's mode at the midpoint as an ordinary run (its build through the cache: a
commit built once is never built again), judge it against the baseline
(`servebench.bisect.search`), land the step. Each step is a full run in the warehouse, so its
cells, requests and build are there to look at afterwards. The run itself is the caller's
(`run_campaign`: the campaign flow, so each step is a run of its own in Prefect too).
"""

from __future__ import annotations

import json
import statistics
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import yaml

from servebench.analysis.regression.series import METRICS
from servebench.bisect.search import BisectError, Direction, Step, judge, most_builds, search
from servebench.bisect.steps import commits_to_bisect, step_campaign
from servebench.builds import git_source
from servebench.campaign.loading import load_campaign
from servebench.config.campaign import Campaign
from servebench.paths import cache_dir, default_warehouse, runs_dir
from servebench.progress import reporter
from servebench.warehouse.sink import RunResults

BISECT_METRICS = [name for name in METRICS if name != "capacity"]
RunCampaign = Callable[..., dict]  # (campaign_file=, warehouse_path=) -> the run's outcome


@dataclass
class Bisection:
    """One bisect: the campaign and mode measured, the commits from good to bad, the steps landed."""

    campaign: Campaign
    campaign_yaml: dict                  # the campaign file as written: each step's campaign is made from it
    campaign_dir: Path
    mode: str
    metric: str
    threshold: float
    repeats: int
    point: str | None
    warehouse: str
    repo: str                            # the git repository of the bisected source
    commits: list[str]
    run_campaign: RunCampaign
    bisect_id: str
    folder: Path                         # the steps' campaign files and `bisect.json`
    steps: list[dict] = field(default_factory=list)
    subjects: dict[str, str] = field(default_factory=dict)

    @property
    def direction(self) -> Direction:
        return METRICS[self.metric].direction

    def subject(self, commit: str) -> str:
        if commit not in self.subjects:
            self.subjects[commit] = git_source.subject(self.repo, commit, cache_dir())
        return self.subjects[commit]

    def measure(self, commit: str) -> tuple[list[float], str, str | None]:
        """The commit's run: its metric per completed cell, its run id and build key."""
        text = yaml.safe_dump(step_campaign(self.campaign_yaml, self.campaign, self.campaign_dir, self.mode, commit,
                                            self.repeats, self.point), sort_keys=False)
        path = self.folder / f"step{len(self.steps)}-{commit[:12]}.yaml"
        path.write_text(text)
        reporter().stage(f"bisect step {len(self.steps)}: {commit[:12]} {self.subject(commit)}")
        try:
            outcome = self.run_campaign(campaign_file=str(path), warehouse_path=self.warehouse)
        except Exception as exc:  # a commit that does not build or serve: say which, keep the steps so far
            raise BisectError(f"commit {commit[:12]} could not be measured: {exc}") from exc
        values, build_key = step_results(self.warehouse, outcome["run_id"], self.mode, self.metric)
        if outcome["status"] != "completed" or len(values) < self.repeats:
            raise BisectError(f"commit {commit[:12]}: run {outcome['run_id']} ended {outcome['status']} with "
                              f"{len(values)} of {self.repeats} cells measured (servebench query on it says why)")
        return values, outcome["run_id"], build_key

    def land(self, step: Step | None, commit: str, values: list[float], run_id: str, build_key: str | None) -> None:
        """The step into `bisect_steps` and the bisect's folder (`bisect.json`, every step so far)."""
        row = step_row(self, step, commit, values, run_id, build_key)
        RunResults(self.warehouse, run_id).bisect_step(row)
        self.steps.append(row)
        (self.folder / "bisect.json").write_text(json.dumps(self.steps, default=str, indent=1))

    def judged_bad(self, commit: str, baseline: list[float]) -> bool:
        """Measure the commit, judge it against the baseline and land the step; an undecided step stops the bisect."""
        values, run_id, key = self.measure(commit)
        step = judge(commit, baseline, values, self.direction, self.threshold)
        self.land(step, commit, values, run_id, key)
        if step.undecided:  # landed, then stop: a guess here would send the rest of the search astray
            raise BisectError(step.undecided)
        reporter().stage(f"bisect: {commit[:12]} is {'bad' if step.bad else 'good'} ({step.change:+.1%} worse; "
                         f"repeats apart by {step.separation:+.1%})")
        return step.bad


def step_row(bisection: Bisection, step: Step | None, commit: str, values: list[float], run_id: str,
             build_key: str | None) -> dict:
    """A `bisect_steps` row: the baseline (no step) or a judged commit."""
    b = bisection
    return dict(bisect_id=b.bisect_id, step=len(b.steps), campaign=b.campaign.name, mode=b.mode, metric=b.metric,
                direction=b.direction, good=b.commits[0], bad=b.commits[-1], commit_hash=commit,
                subject=b.subject(commit), run_id=run_id, build_key=build_key,
                repeat_values=values, value=step.value if step else statistics.median(values),
                change=step.change if step else None, separation=step.separation if step else None,
                verdict="baseline" if step is None else step.verdict, measured_at=datetime.now(timezone.utc))


def step_results(wh: str, run_id: str, mode: str, metric: str) -> tuple[list[float], str | None]:
    """A step's run as the bisect reads it: the metric of each completed cell, and its build key."""
    results = RunResults(wh, run_id)
    return results.completed_metric(mode, metric), results.build_key()


@dataclass(frozen=True)
class BisectRequest:
    """What a user asks of a bisect (`servebench bisect`'s flags, the flow's parameters)."""

    campaign_file: str
    good: str
    bad: str
    metric: str = "tpot_p50_ms"
    mode: str | None = None
    threshold: float = 0.10
    repeats: int = 3
    warehouse_path: str | None = None
    point: str | None = None


def start_bisection(request: BisectRequest, run_campaign: RunCampaign) -> Bisection:
    """The bisect set up: the metric checked, the commits listed, its folder made."""
    r = request
    if r.metric not in BISECT_METRICS:
        raise BisectError(f"metric {r.metric!r}: one of {', '.join(BISECT_METRICS)}")
    campaign = load_campaign(r.campaign_file)
    mode = r.mode or campaign.modes[0].name
    repo, commits = commits_to_bisect(campaign, mode, r.good, r.bad, cache_dir())
    bisect_id = f"bisect-{datetime.now(timezone.utc):%Y%m%d-%H%M%S}-{uuid.uuid4().hex[:6]}"
    bisection = Bisection(campaign=campaign, campaign_yaml=yaml.safe_load(Path(r.campaign_file).read_text()),
                          campaign_dir=Path(r.campaign_file).resolve().parent, mode=mode, metric=r.metric,
                          threshold=r.threshold, repeats=r.repeats, point=r.point,
                          warehouse=str(r.warehouse_path or default_warehouse()), repo=repo, commits=commits,
                          run_campaign=run_campaign, bisect_id=bisect_id, folder=runs_dir() / bisect_id)
    bisection.folder.mkdir(parents=True)
    reporter().stage(f"bisect {len(commits)} commits ({commits[0][:12]} good .. {commits[-1][:12]} bad), "
                     f"at most {most_builds(len(commits))} builds")
    return bisection


def find_first_bad(bisection: Bisection) -> dict:
    """Measure the good commit (the baseline), then halve the range down to the first bad commit; return
    the steps and it."""
    b, commits = bisection, bisection.commits
    baseline, run_id, key = b.measure(commits[0])
    b.land(None, commits[0], baseline, run_id, key)
    found, _ = search(commits, lambda commit: b.judged_bad(commit, baseline))
    return {"bisect_id": b.bisect_id, "first_bad": commits[found], "subject": b.subject(commits[found]),
            "last_good": commits[found - 1], "commits": len(commits), "builds": len(b.steps),
            "most_builds": most_builds(len(commits)), "steps": b.steps, "warehouse": b.warehouse,
            "folder": str(b.folder), "bad_measured": any(s["commit_hash"] == commits[found] for s in b.steps)}
