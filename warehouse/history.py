"""Named reads across runs: what regression detection, `servebench compare` and `servebench best`
need of the nights behind a run (series, nights, annotations, findings, every capacity).

Plain rows out (dicts keyed by column name); the analysis that judges them is
`servebench/analysis/regression/` and `servebench/analysis/best.py`. Reads of one run are `reads.py`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from . import Connection, rows

NODE_IDENTITY = ("node", "cpus", "cpu_model", "arch", "logical_cores", "mem_total_bytes", "numa_nodes")


def _where(conditions: list[tuple[str, object]], base: str = "true") -> tuple[str, list[object]]:
    """The conditions whose value was given, and-ed after `base`, with their parameters."""
    given = [(sql, value) for sql, value in conditions if value is not None]
    return " and ".join([base, *(sql for sql, _ in given)]), [value for _, value in given]


def _marks(values: list[str]) -> str:
    return ", ".join("?" * len(values))


# what series ids are made from


def run_nodes(con: Connection, run_id: str) -> list[dict[str, Any]]:
    """The run's nodes with what their hardware fingerprint is made from."""
    return rows(con, f"select {', '.join(NODE_IDENTITY)} from nodes where run_id = ?", [run_id])


def series_cells(con: Connection, run_id: str, fields: list[str]) -> list[dict[str, Any]]:
    """The run's cells that form series (a capacity search's probes do not: their rates are the
    search's, new every night), each with its cell_id and the identity `fields` (cells columns)."""
    return rows(con, f"select cell_id, {', '.join(fields)} from cells where run_id = ? "
                     "and not coalesce(search_probe, false)", [run_id])


def capacity_identities(con: Connection, run_id: str) -> list[dict[str, Any]]:
    """The run's capacity searches with what their series id is made from (the mode's lengths)."""
    return rows(con, "select c.mode, c.knobs, c.search_over, c.slo, any_value(x.input_len) input_len, "
                     "any_value(x.output_len) output_len from capacity c left join cells x "
                     "on x.run_id = c.run_id and x.mode = c.mode where c.run_id = ? group by all", [run_id])


def runs_without_series(con: Connection) -> list[str]:
    """Runs with a cell (search probes aside) or a capacity still without its series id."""
    return [r["run_id"] for r in rows(con, "select distinct run_id from cells where series_id is null "
                                           "and not coalesce(search_probe, false) "
                                           "union select run_id from capacity where series_id is null")]


# a night and its series


def night_at(con: Connection, run_id: str) -> datetime | None:
    """When the run started: its night on the series' time line."""
    found = rows(con, "select started_at from runs where run_id = ?", [run_id])
    return found[0]["started_at"] if found else None


def run_spec(con: Connection, run_id: str) -> str | dict[str, Any] | None:
    """The normalized campaign as the run had it (JSON text)."""
    found = rows(con, "select spec_normalized from runs where run_id = ?", [run_id])
    return found[0]["spec_normalized"] if found else None


def run_series(con: Connection, run_id: str) -> list[dict[str, Any]]:
    """Each series the run measured with its identity: the cells' (by cell key), then the
    capacities' (cell key `<mode>.capacity`, load kind 'capacity')."""
    return rows(con, "select c.series_id, any_value(c.cell_key) cell_key, r.campaign, c.mode, c.load_kind, "
                     "c.clients, c.offered_rate, c.input_len, c.output_len, r.hardware_fingerprint "
                     "from cells c join runs r using (run_id) "
                     "where c.run_id = ? and c.series_id is not null group by all order by cell_key", [run_id]) + \
        rows(con, "select c.series_id, c.mode || '.capacity' cell_key, r.campaign, c.mode, 'capacity' load_kind, "
                  "c.search_over, r.hardware_fingerprint from capacity c join runs r using (run_id) "
                  "where c.run_id = ? and c.series_id is not null order by c.mode", [run_id])


def nights(con: Connection, series: list[str], until: datetime) -> list[dict[str, Any]]:
    """The nights of these series up to `until` (`series_nights`), oldest first."""
    if not series:
        return []
    return rows(con, "select series_id, metric, run_id, night_at, engine_version, repeat_values from series_nights "
                     f"where series_id in ({_marks(series)}) and night_at <= ? order by night_at, run_id",
                [*series, until])


def annotations_of(con: Connection, series: list[str]) -> list[dict[str, Any]]:
    """The users' annotations that bear on these series (those of a whole run included)."""
    if not series:
        return []
    return rows(con, "select run_id, action, series_id, metric from annotations "
                     f"where series_id is null or series_id in ({_marks(series)})", series)


def run_series_points(con: Connection, run_id: str) -> list[dict[str, Any]]:
    """The run's cells' series ids with their cell keys."""
    return rows(con, "select distinct series_id, cell_key from cells where run_id = ? and series_id is not null",
                [run_id])


def changes_until(con: Connection, series: list[str], run_id: str) -> list[dict[str, Any]]:
    """The regressions and improvements found in these series up to the run: change points, and
    what the run's own night found."""
    if not series:
        return []
    return rows(con, f"""select * from regressions where series_id in ({_marks(series)})
        and kind in ('regression', 'improvement') and night_at <= (select started_at from runs where run_id = ?)
        and (change_point or run_id = ?)""", [*series, run_id, run_id])


def nights_until(con: Connection, series: list[str], metrics: list[str], run_id: str) -> list[dict[str, Any]]:
    """The nights of these series and metrics up to the run, with their median, repeats and CV."""
    if not series or not metrics:
        return []
    return rows(con, f"""select series_id, metric, run_id, night_at, engine_version, value, repeats, cv
        from series_nights where series_id in ({_marks(series)}) and metric in ({_marks(metrics)})
          and night_at <= (select started_at from runs where run_id = ?) order by night_at""",
                [*series, *metrics, run_id])


def point_metric_values(con: Connection, run_id: str) -> list[dict[str, Any]]:
    """Each measured value the detector follows of one run (`cell_metrics`), in repeat order."""
    return rows(con, 'select cell_key, metric, value from cell_metrics where run_id = ? order by "repeat"', [run_id])


# findings and the runs to analyze


def findings(con: Connection, since: datetime | None = None, campaign: str | None = None,
             run_id: str | None = None, latest_only: bool = False) -> list[dict[str, Any]]:
    """Landed findings with their run's campaign file, newest nights first. latest_only: each
    campaign's newest analyzed run."""
    where, params = _where([("night_at >= ?", since), ("campaign = ?", campaign), ("run_id = ?", run_id)])
    if latest_only:
        where += " and run_id in (select arg_max(run_id, night_at) from regressions group by campaign)"
    return rows(con, "select g.*, (select r.campaign_file from runs r where r.run_id = g.run_id) "
                     f"campaign_file from regressions g where {where} order by night_at desc", params)


def finished_runs(con: Connection, since: datetime | None = None, campaign: str | None = None,
                  latest_only: bool = False) -> list[str]:
    """Runs no longer running, oldest first (latest_only: each campaign's newest)."""
    where, params = _where([("started_at >= ?", since), ("campaign = ?", campaign)], base="status <> 'running'")
    if latest_only:
        where += f" and run_id in (select arg_max(run_id, started_at) from runs where {where} group by campaign)"
        params = params * 2
    return [r["run_id"] for r in rows(con, f"select run_id from runs where {where} order by started_at", params)]


# every capacity


def capacity_history(con: Connection) -> list[dict[str, Any]]:
    """Every capacity the warehouse holds with its run's cluster, model and server command, and the
    mode's lengths."""
    return rows(con, """
        select r.hardware_fingerprint, r.model_path, c.search_over, c.slo, c.mode, c.knobs, c.capacity, c.upper,
               c.tpot_p50_ms, c.run_id, r.campaign, r.started_at, s.command, s.env,
               (select any_value(x.input_len) from cells x where x.run_id = c.run_id and x.mode = c.mode) input_len,
               (select any_value(x.output_len) from cells x where x.run_id = c.run_id and x.mode = c.mode) output_len
        from capacity c join runs r using (run_id)
        left join servers s on s.run_id = c.run_id and s.mode = c.mode
        where c.capacity is not null""")


# every run at a glance, and the best mode per load point


def runs_for_index(con: Connection) -> list[dict[str, Any]]:
    """Every run, newest first: campaign, start, status, run directory and cells valid of all (as
    `reads.runs_overview` counts them), and whether it landed a capacity."""
    return rows(con, """select r.run_id, r.campaign, r.started_at, r.status, r.run_dir,
            count(c.cell_id) filter (where c.valid) as cells_valid, count(c.cell_id) as cells,
            exists (select 1 from capacity k where k.run_id = r.run_id and k.capacity is not null) as has_capacity
        from runs r left join cells c using (run_id)
        group by all order by r.started_at desc, r.run_id desc""")


def run_identity(con: Connection, run_id: str) -> dict[str, Any] | None:
    """The run's campaign, start, status, cluster and model, and whether it landed a capacity."""
    found = rows(con, """select run_id, campaign, started_at, status, hardware_fingerprint, model_path,
            exists (select 1 from capacity k where k.run_id = r.run_id and k.capacity is not null) as has_capacity
        from runs r where run_id = ?""", [run_id])
    return found[0] if found else None


def point_cells(con: Connection, run_id: str) -> list[dict[str, Any]]:
    """The run's cells of its load points (a capacity search's probes aside) with their verdicts and
    the figures an SLO limits, by cell key."""
    return rows(con, """select cell_key, mode, load_kind, clients, offered_rate, "repeat", status, valid, slo_met,
            invalid_reasons, output_throughput, request_throughput, ttft_p50_ms, ttft_p99_ms, tpot_p50_ms,
            tpot_p99_ms, itl_p50_ms, itl_p99_ms, e2el_p50_ms, e2el_p99_ms
        from cells where run_id = ? and not coalesce(search_probe, false) order by cell_key""", [run_id])
