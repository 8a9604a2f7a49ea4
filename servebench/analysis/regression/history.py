"""The warehouse side of detection: give runs their series ids, read nights with the users'
annotations applied, and land what each night's analysis found."""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timezone

import duckdb
from pydantic import BaseModel

from servebench.analysis.regression.detect import Finding, analyze
from servebench import warehouse
from servebench.warehouse import landing
from servebench.analysis.regression.series import (IDENTITY_FIELDS, METRICS, OPTIONAL_IDENTITY_FIELDS, Night,
                                                   capacity_series_id, cell_point, hardware_fingerprint, series_id,
                                                   series_label)
from servebench.spec.detection import DetectionSettings


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


def assign_series(con: duckdb.DuckDBPyConnection, run_id: str) -> str | None:
    """Set the run's hardware fingerprint and its cells' series ids (idempotent)."""
    cols = ["node", "cpus", "cpu_model", "arch", "logical_cores", "mem_total_bytes", "numa_nodes"]
    nodes = [dict(zip(cols, row)) for row in
             con.execute(f"select {', '.join(cols)} from nodes where run_id = ?", [run_id]).fetchall()]
    if not nodes:
        return None
    fingerprint = hardware_fingerprint(nodes)
    campaign = con.execute("select campaign from runs where run_id = ?", [run_id]).fetchone()[0]
    con.execute("update runs set hardware_fingerprint = ? where run_id = ?", [fingerprint, run_id])
    fields = [f for f in IDENTITY_FIELDS if f != "campaign"] + list(OPTIONAL_IDENTITY_FIELDS)
    # a capacity search's probes are not series: their rates are the search's, new every night
    cells = con.execute(f"select cell_id, {', '.join(fields)} from cells where run_id = ? "
                        "and not coalesce(search_probe, false)", [run_id]).fetchall()
    updates = [[series_id({"campaign": campaign, **dict(zip(fields, row[1:]))}, fingerprint), row[0]]
               for row in cells]
    if updates:
        con.executemany("update cells set series_id = ? where cell_id = ?", updates)
    capacities = warehouse.rows(con, "select c.mode, c.knobs, c.search_over, c.slo, any_value(x.input_len) input_len, "
                                     "any_value(x.output_len) output_len from capacity c left join cells x "
                                     "on x.run_id = c.run_id and x.mode = c.mode where c.run_id = ? group by all",
                                [run_id])
    if capacities:
        con.executemany("update capacity set series_id = ? where run_id = ? and mode = ?",
                        [[capacity_series_id({"campaign": campaign, **row}, fingerprint), run_id, row["mode"]]
                         for row in capacities])
    return fingerprint


def assign_missing_series(con: duckdb.DuckDBPyConnection) -> None:
    """Runs landed before detection existed (or interrupted before it ran) get their ids."""
    for (run_id,) in con.execute("select distinct run_id from cells where series_id is null "
                                 "and not coalesce(search_probe, false) "
                                 "union select run_id from capacity where series_id is null").fetchall():
        assign_series(con, run_id)


def nights_of(con: duckdb.DuckDBPyConnection, series: list[str], until: datetime) -> dict[tuple[str, str], list[Night]]:
    """(series, metric) -> its nights up to `until`, oldest first, annotations applied: one
    query for the nights and one for the annotations, whatever the number of series."""
    if not series:
        return {}
    ids = ", ".join("?" * len(series))
    rows = con.execute(
        f"select series_id, metric, run_id, night_at, engine_version, repeat_values from series_nights "
        f"where series_id in ({ids}) and night_at <= ? order by night_at, run_id", [*series, until]).fetchall()
    notes = con.execute(f"select run_id, action, series_id, metric from annotations "
                        f"where series_id is null or series_id in ({ids})", series).fetchall()
    nights: dict[tuple[str, str], list[Night]] = {}
    for sid, metric, run_id, at, version, values in rows:
        said = {action for r, action, s, m in notes if r == run_id and s in (None, sid) and m in (None, metric)}
        nights.setdefault((sid, metric), []).append(Night(
            run_id=run_id, at=at, engine_version=version, values=list(values), excluded="exclude" in said,
            accepted="accept" in said))
    return nights


def analyze_run(con: duckdb.DuckDBPyConnection, run_id: str, settings: DetectionSettings) -> list[FindingRow]:
    """Tonight's analysis of every series the run measured; replaces the run's earlier rows."""
    assign_missing_series(con)
    night_at = con.execute("select started_at from runs where run_id = ?", [run_id]).fetchone()[0]
    series = warehouse.rows(
        con, "select c.series_id, any_value(c.cell_key) cell_key, r.campaign, c.mode, c.load_kind, c.clients, "
             "c.rate, c.input_len, c.output_len, r.hardware_fingerprint from cells c join runs r using (run_id) "
             "where c.run_id = ? and c.series_id is not null group by all order by cell_key", [run_id])
    series += warehouse.rows(
        con, "select c.series_id, c.mode || '.capacity' cell_key, r.campaign, c.mode, 'capacity' load_kind, "
             "c.search_over, r.hardware_fingerprint from capacity c join runs r using (run_id) "
             "where c.run_id = ? and c.series_id is not null order by c.mode", [run_id])
    history = nights_of(con, [s["series_id"] for s in series], night_at)
    rows = []
    for identity in series:
        for metric in METRICS.values():
            nights = history.get((identity["series_id"], metric.name), [])
            if not nights or nights[-1].run_id != run_id:
                continue
            finding = analyze(nights, metric, settings)
            if finding is not None:
                rows.append(_row(run_id, night_at, identity, metric.direction, nights, finding))
    store_findings(con, run_id, rows)
    return rows


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


def store_findings(con: duckdb.DuckDBPyConnection, run_id: str, rows: list[FindingRow]) -> None:
    con.execute("begin")
    con.execute("delete from regressions where run_id = ?", [run_id])
    now = datetime.now(timezone.utc)
    for r in rows:
        landing.insert_row(con, "regressions", dict(
            run_id=r.run_id, series_id=r.series_id, metric=r.metric, detected_at=now, night_at=r.night_at,
            series_label=r.series_label, campaign=r.campaign, mode=r.mode, cell_point=r.cell_point,
            hardware_fingerprint=r.hardware_fingerprint, direction=r.direction, last_good_at=r.last_good_at,
            first_bad_at=r.first_bad_at, engine_last_good=r.engine_last_good, engine_first_bad=r.engine_first_bad,
            engine_versions=r.engine_versions,
            **r.finding.model_dump(include={"kind", "status", "last_good_run", "first_bad_run", "baseline_value",
                                            "value", "change", "p_value", "change_point", "nights_since_change",
                                            "detail"})))
    con.execute("commit")


def annotate(con: duckdb.DuckDBPyConnection, action: str, run_id: str, note: str, series: str | None = None,
             metric: str | None = None, author: str | None = None) -> str:
    if con.execute("select count(*) from runs where run_id = ?", [run_id]).fetchone()[0] == 0:
        raise ValueError(f"no run {run_id!r} in the warehouse")
    if metric is not None and metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; one of {', '.join(METRICS)}")
    annotation_id = uuid.uuid4().hex[:12]
    landing.insert_row(con, "annotations", dict(
        annotation_id=annotation_id, created_at=datetime.now(timezone.utc), action=action, run_id=run_id,
        series_id=series, metric=metric, note=note, author=author))
    return annotation_id


def findings(con: duckdb.DuckDBPyConnection, since: datetime | None = None, campaign: str | None = None,
             run_id: str | None = None, latest_only: bool = False) -> list[dict]:
    """Landed findings as dicts (newest nights first). latest_only: each campaign's newest
    analyzed run, which is what a CI gate asks about."""
    where, params = _where([("night_at >= ?", since), ("campaign = ?", campaign), ("run_id = ?", run_id)])
    if latest_only:
        where += " and run_id in (select arg_max(run_id, night_at) from regressions group by campaign)"
    return warehouse.rows(con, "select g.*, (select r.campaign_file from runs r where r.run_id = g.run_id) "
                               f"campaign_file from regressions g where {where} order by night_at desc", params)


def _where(conditions: list[tuple[str, object]], base: str = "true") -> tuple[str, list]:
    """The conditions whose value was given, and-ed after `base`, with their parameters."""
    given = [(sql, value) for sql, value in conditions if value is not None]
    return " and ".join([base, *(sql for sql, _ in given)]), [value for _, value in given]


def run_settings(con: duckdb.DuckDBPyConnection, run_id: str) -> DetectionSettings:
    """The detection settings of the campaign as that run had it."""
    spec = con.execute("select spec_normalized from runs where run_id = ?", [run_id]).fetchone()[0]
    section = (json.loads(spec) if isinstance(spec, str) else spec or {}).get("detection")
    return DetectionSettings(**section) if section else DetectionSettings()


def recompute(con: duckdb.DuckDBPyConnection, since: datetime | None = None, campaign: str | None = None,
              latest_only: bool = False) -> int:
    """Analyze finished runs again, oldest first (after an annotation, or with new settings)."""
    where, params = _where([("started_at >= ?", since), ("campaign = ?", campaign)], base="status <> 'running'")
    if latest_only:
        where += (f" and run_id in (select arg_max(run_id, started_at) from runs where {where} group by campaign)")
        params = params * 2
    runs = [r for (r,) in con.execute(f"select run_id from runs where {where} order by started_at",
                                       params).fetchall()]
    for run_id in runs:
        analyze_run(con, run_id, run_settings(con, run_id))
    return len(runs)


def point_values(con: duckdb.DuckDBPyConnection, run_id: str) -> dict[tuple[str, str], list[float]]:
    """(load point, metric) -> the repeats' values of one run, for `servebench compare`."""
    rows = con.execute("select cell_key, metric, value from cell_metrics where run_id = ? order by \"repeat\"",
                       [run_id]).fetchall()
    values: dict[tuple[str, str], list[float]] = {}
    for key, metric, value in rows:
        values.setdefault((cell_point(key), metric), []).append(value)
    return values
