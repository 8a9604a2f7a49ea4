"""The warehouse side of detection: give runs their series ids, read nights with the users'
annotations applied, and land what each night's analysis found."""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timezone

from pydantic import BaseModel

from servebench.analysis.regression.detect import Finding, SeriesVerdict, analyze, series_verdict
from servebench.analysis.regression.series import (
    IDENTITY_FIELDS,
    METRICS,
    OPTIONAL_IDENTITY_FIELDS,
    Night,
    capacity_series_id,
    cell_point,
    hardware_fingerprint,
    series_id,
    series_label,
)
from servebench.config.detection import DetectionSettings
from servebench.warehouse import Connection, history, reads
from servebench.warehouse import findings as derived


class FindingRow(BaseModel):
    """A finding with everything a reader needs to act on it."""

    run_id: str
    series_id: str
    metric: str
    night_at: datetime
    series_label: str
    campaign: str
    mode: str
    cell_point: str
    hardware_fingerprint: str | None
    direction: str
    last_good_at: datetime | None = None
    first_bad_at: datetime | None = None
    engine_last_good: str | None = None
    engine_first_bad: str | None = None
    engine_versions: list[str] = []
    finding: Finding


def assign_series(con: Connection, run_id: str) -> str | None:
    """Set the run's hardware fingerprint and its cells' series ids (idempotent)."""
    nodes = history.run_nodes(con, run_id)
    if not nodes:
        return None
    fingerprint = hardware_fingerprint(nodes)
    campaign = reads.run_campaign(con, run_id)
    fields = [f for f in IDENTITY_FIELDS if f != "campaign"] + list(OPTIONAL_IDENTITY_FIELDS)
    cells = {row["cell_id"]: series_id({"campaign": campaign, **{f: row[f] for f in fields}}, fingerprint)
             for row in history.series_cells(con, run_id, fields)}
    capacities = {row["mode"]: capacity_series_id({"campaign": campaign, **row}, fingerprint)
                  for row in history.capacity_identities(con, run_id)}
    derived.land_series_ids(con, run_id, fingerprint, cells, capacities)
    return fingerprint


def assign_missing_series(con: Connection) -> None:
    """Runs landed before detection existed (or interrupted before it ran) get their ids."""
    for run_id in history.runs_without_series(con):
        assign_series(con, run_id)


def nights_of(con: Connection, series: list[str], until: datetime) -> dict[tuple[str, str], list[Night]]:
    """(series, metric) -> its nights up to `until`, oldest first, annotations applied: one
    query for the nights and one for the annotations, whatever the number of series."""
    notes = history.annotations_of(con, series)
    nights: dict[tuple[str, str], list[Night]] = {}
    for night in history.nights(con, series, until):
        sid, metric, run_id = night["series_id"], night["metric"], night["run_id"]
        said = {n["action"] for n in notes if n["run_id"] == run_id and n["series_id"] in (None, sid)
                and n["metric"] in (None, metric)}
        nights.setdefault((sid, metric), []).append(Night(
            run_id=run_id, at=night["night_at"], engine_version=night["engine_version"],
            values=list(night["repeat_values"]), excluded="exclude" in said, accepted="accept" in said))
    return nights


def analyze_run(con: Connection, run_id: str, settings: DetectionSettings) -> list[FindingRow]:
    """Tonight's analysis of every series the run measured; replaces the run's earlier rows."""
    assign_missing_series(con)
    night_at = history.night_at(con, run_id)
    rows = []
    for identity, metric, nights in _series_nights(con, run_id):
        finding = analyze(nights, metric, settings)
        if finding is not None:
            rows.append(_row(run_id, night_at, identity, metric.direction, nights, finding))
    store_findings(con, run_id, rows)
    return rows


def run_verdicts(con: Connection, run_id: str, settings: DetectionSettings) -> list[SeriesVerdict]:
    """A verdict on every series and metric the run measured (read only): regression, improvement, no
    change, not enough history or too noisy, so a run with no finding says why."""
    found = []
    for identity, metric, nights in _series_nights(con, run_id):
        verdict = series_verdict(identity["series_id"], nights, metric, settings)
        if verdict is not None:
            found.append(verdict)
    return found


def _series_nights(con: Connection, run_id: str):
    """(series identity, metric, its nights up to this run) for every series the run measured."""
    series = history.run_series(con, run_id)
    nights_by_series = nights_of(con, [s["series_id"] for s in series], history.night_at(con, run_id))
    for identity in series:
        for metric in METRICS.values():
            nights = nights_by_series.get((identity["series_id"], metric.name), [])
            if nights and nights[-1].run_id == run_id:
                yield identity, metric, nights


def _row(run_id: str, night_at: datetime, identity: dict, direction: str, nights: list[Night],
         finding: Finding) -> FindingRow:
    """identity: the series' row (series_id, cell_key, campaign, mode, load point, lengths, fingerprint)."""
    by_run = {n.run_id: n for n in nights}
    good, bad = by_run.get(finding.last_good_run or ""), by_run.get(finding.first_bad_run or "")
    versions: list[str] = []
    if good and bad:
        for n in nights:
            if good.at <= n.at <= bad.at and n.engine_version and n.engine_version not in versions:
                versions.append(n.engine_version)
    return FindingRow(run_id=run_id, series_id=identity["series_id"], metric=finding.metric, night_at=night_at,
                      series_label=series_label(identity), campaign=identity["campaign"], mode=identity["mode"],
                      cell_point=cell_point(identity["cell_key"]),
                      hardware_fingerprint=identity["hardware_fingerprint"], direction=direction,
                      last_good_at=good.at if good else None, first_bad_at=bad.at if bad else None,
                      engine_last_good=good.engine_version if good else None,
                      engine_first_bad=bad.engine_version if bad else None, engine_versions=versions,
                      finding=finding)


def store_findings(con: Connection, run_id: str, rows: list[FindingRow]) -> None:
    """Replace the run's landed findings with these."""
    now = datetime.now(timezone.utc)
    derived.land_regressions(con, run_id, [dict(
        run_id=r.run_id, series_id=r.series_id, metric=r.metric, detected_at=now, night_at=r.night_at,
        series_label=r.series_label, campaign=r.campaign, mode=r.mode, cell_point=r.cell_point,
        hardware_fingerprint=r.hardware_fingerprint, direction=r.direction, last_good_at=r.last_good_at,
        first_bad_at=r.first_bad_at, engine_last_good=r.engine_last_good, engine_first_bad=r.engine_first_bad,
        engine_versions=r.engine_versions,
        **r.finding.model_dump(include={"kind", "status", "last_good_run", "first_bad_run", "baseline_value",
                                        "value", "change", "p_value", "change_point", "nights_since_change",
                                        "detail"})) for r in rows])


def annotate(con: Connection, action: str, run_id: str, note: str, series: str | None = None,
             metric: str | None = None, author: str | None = None) -> str:
    if not reads.run_exists(con, run_id):
        raise ValueError(f"no run {run_id!r} in the warehouse")
    if metric is not None and metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; one of {', '.join(METRICS)}")
    annotation_id = uuid.uuid4().hex[:12]
    derived.land_annotation(con, dict(
        annotation_id=annotation_id, created_at=datetime.now(timezone.utc), action=action, run_id=run_id,
        series_id=series, metric=metric, note=note, author=author))
    return annotation_id


def findings(con: Connection, since: datetime | None = None, campaign: str | None = None,
             run_id: str | None = None, latest_only: bool = False) -> list[dict]:
    """Landed findings as dicts (newest nights first). latest_only: each campaign's newest
    analyzed run, which is what a CI gate asks about."""
    return history.findings(con, since=since, campaign=campaign, run_id=run_id, latest_only=latest_only)


def run_settings(con: Connection, run_id: str) -> DetectionSettings:
    """The detection settings of the campaign as that run had it."""
    spec = history.run_spec(con, run_id)
    section = (json.loads(spec) if isinstance(spec, str) else spec or {}).get("detection")
    return DetectionSettings(**section) if section else DetectionSettings()


def recompute(con: Connection, since: datetime | None = None, campaign: str | None = None,
              latest_only: bool = False) -> int:
    """Analyze finished runs again, oldest first (after an annotation, or with new settings)."""
    runs = history.finished_runs(con, since=since, campaign=campaign, latest_only=latest_only)
    for run_id in runs:
        analyze_run(con, run_id, run_settings(con, run_id))
    return len(runs)


def point_values(con: Connection, run_id: str) -> dict[tuple[str, str], list[float]]:
    """(load point, metric) -> the repeats' values of one run, for `servebench compare`."""
    values: dict[tuple[str, str], list[float]] = {}
    for row in history.point_metric_values(con, run_id):
        values.setdefault((cell_point(row["cell_key"]), row["metric"]), []).append(row["value"])
    return values
