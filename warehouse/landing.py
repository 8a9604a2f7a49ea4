"""Landing measured results in the warehouse.

Each cell lands as soon as it is measured (delete by cell_id, then insert its row, its requests
and its attempts, in one transaction), so an interrupted campaign keeps every finished cell
whole and a re-landed cell never doubles its rows.

What lands is typed: a run (`RunRecord`, `RunUpdate`), a server (`ServerRecord`, with its
`ServerLayout`, `ServerGate` and `RankFigures`), a cell (`CellRecord`, with its
`CellMeasurement`) and an attempt at one (`CellAttempt`): plain data the orchestration fills
from what it ran. A server's layout is that of the mode it serves, handed over with it: a
server's name is a key, never read for its meaning.
"""

from __future__ import annotations

import json
import socket
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import duckdb
from pydantic import BaseModel, ConfigDict

from servebench.builds.venv import EngineBuild
from servebench.config.campaign import ModeSpec
from servebench.config.node import Node
from servebench.config.sweep import Cell
from servebench.engines.base import RankShare
from servebench.load.records import REQUEST_CSV_TYPES, write_requests_csv
from servebench.paths import CHECKOUT, DISTRIBUTION


class Record(BaseModel):
    """Plain data for landing: frozen, and no field it does not know."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class RunRecord(Record):
    """A run as it starts: its campaign as given and as normalized, and where its files go."""

    campaign: str
    spec_hash: str
    spec_text: str
    spec_normalized: dict[str, Any]
    campaign_file: str
    run_dir: Path


class RunUpdate(Record):
    """Columns of a run's row set after it started; only the fields given are written (None sets NULL)."""

    status: str | None = None
    error: str | None = None
    ended_at: datetime | None = None
    provider_kind: str | None = None
    allocation: str | None = None      # JSON: what the provider holds or held
    model_path: str | None = None
    build_key: str | None = None
    resumes: str | None = None         # JSON: every resume's note


class ServerLayout(Record):
    """How the mode a server serves lays out its workers; all None for a server of no known mode."""

    tp: int | None = None
    pp: int | None = None
    dp: int | None = None
    ep: bool | None = None
    replicas: int | None = None
    balancer: str | None = None        # None with one replica

    @classmethod
    def of(cls, mode: ModeSpec) -> ServerLayout:
        """The layout of a mode (a reference server's is one worker: its mode says so)."""
        return cls(tp=mode.tp, pp=mode.pp, dp=mode.dp, ep=mode.ep, replicas=mode.replicas,
                   balancer=None if mode.replicas == 1 else mode.balancer or "least-connections")


class ServerGate(Record):
    """The correctness gate's verdict on a server: its status, why, and the first divergence of each
    diverging prompt (None: not recorded)."""

    status: str
    detail: str | None = None
    divergences: list[dict[str, Any]] | None = None


class RankFigures(Record):
    """The mode's largest rank (what cell_roofline puts its cells against, docs/roofline.md)."""

    served_dtype: str | None = None
    rank_weight_bytes: int | None = None
    rank_kv_bytes_per_token: int | None = None
    rank_parameters: int | None = None
    ranks_per_node: int | None = None


class ServerRecord(Record):
    """A server's row: its API process, its life, the mode's layout it serves, and what it was found to
    hold. `ranks`: each replica's processes as the engine lays them out on its nodes (what `servebench
    plan` prints), landed in server_ranks in place of the mode's earlier rows; None leaves those rows."""

    mode: str
    layout: ServerLayout
    status: str                        # ready | failed
    error: str | None = None
    engine: str | None = None
    build_key: str | None = None
    pid: int | None = None
    port: int | None = None
    command: list[str] = []
    env: dict[str, str] = {}
    log_path: str | None = None
    started_at: datetime | None = None
    ready_seconds: float | None = None
    stopped_at: datetime | None = None
    kv_capacity_tokens: int | None = None
    gate: ServerGate | None = None
    rank_figures: RankFigures | None = None
    ranks: list[list[RankShare]] | None = None

    @classmethod
    def failed(cls, mode: str, layout: ServerLayout, error: str, engine: str | None = None,
               build_key: str | None = None) -> ServerRecord:
        """A server that did not start: its mode, the engine and build it was to run, and why; nothing
        else of a server (no process, port, command or gate) exists to land."""
        return cls(mode=mode, layout=layout, status="failed", error=error, engine=engine, build_key=build_key)


class CellMeasurement(Record):
    """What the load generator measured of a cell: its result (the JSON as a dict; its keys are the
    generator's) and where it is. Request rows come from `requests_csv` (the generator writes one
    beside its result), else from the result's requests."""

    result: dict[str, Any]
    result_path: str | None = None
    requests_csv: Path | None = None
    kv_failures: int | None = None     # the engine's KV failures in the server's log during the cell


class CellRecord(Record):
    """A cell as it lands: the cell, its verdict, when it ran and what was measured (None: nothing)."""

    cell: Cell
    input_len: int
    output_len: int
    status: str                        # completed | failed
    error: str | None = None
    slo_met: bool | None = None        # None: the campaign has no SLO
    correctness: str | None = None     # the gate's status on the mode's server
    search_probe: bool = False         # a capacity search's probe
    started_at: datetime | None = None
    ended_at: datetime | None = None
    measured: CellMeasurement | None = None


class CellAttempt(Record):
    """One measurement of a cell (`validity.retries`): a superseded one keeps its verdict here."""

    cell_key: str
    attempt: int
    superseded: bool
    summary: dict[str, Any]
    result_path: str | None = None


Row = dict[str, Any]  # a table's row by column name
Connection = duckdb.DuckDBPyConnection


def now() -> datetime:
    return datetime.now(timezone.utc)


def cell_id(run_id: str, cell_key: str) -> str:
    return f"{run_id}/{cell_key}"


def servebench_commit() -> str | None:
    """The checkout's commit (`-dirty` with uncommitted changes); an installed wheel's version."""
    if CHECKOUT is None:
        from importlib.metadata import PackageNotFoundError, version
        try:
            return f"{DISTRIBUTION} {version(DISTRIBUTION)}"
        except PackageNotFoundError:
            return None
    try:
        sha = subprocess.run(["git", "-C", str(CHECKOUT), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(CHECKOUT), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (sha + ("-dirty" if dirty else "")) or None


def insert_row(con: Connection, table: str, values: Row, conflict: str = "") -> None:
    """Insert by column name: a later migration's new column never shifts what lands where.
    conflict: "or replace", or an ON CONFLICT clause."""
    columns = ", ".join(f'"{name}"' for name in values)
    verb, tail = ("insert or replace", "") if conflict == "or replace" else ("insert", conflict)
    con.execute(f"{verb} into {table} ({columns}) values ({', '.join('?' * len(values))}) {tail}",
                list(values.values()))


def insert_run(con: Connection, run_id: str, run: RunRecord) -> None:
    insert_row(con, "runs", dict(
        run_id=run_id, campaign=run.campaign, spec_hash=run.spec_hash, spec_text=run.spec_text,
        spec_normalized=json.dumps(run.spec_normalized), campaign_file=run.campaign_file, started_at=now(),
        status="running", servebench_commit=servebench_commit(), host=socket.gethostname(),
        run_dir=str(run.run_dir)))


def update_run(con: Connection, run_id: str, update: RunUpdate) -> None:
    fields = update.model_dump(exclude_unset=True)
    if not fields:
        return
    names = ", ".join(f"{name} = ?" for name in fields)
    con.execute(f"update runs set {names} where run_id = ?", [*fields.values(), run_id])


def run_record(con: Connection, run_id: str) -> Row | None:
    """What a resume needs of a run: its status, spec hash, files and allocation."""
    row = con.execute("select status, spec_hash, run_dir, campaign_file, allocation from runs where run_id = ?",
                      [run_id]).fetchone()
    if row is None:
        return None
    return dict(zip(("status", "spec_hash", "run_dir", "campaign_file", "allocation"), row))


def cell_statuses(con: Connection, run_id: str) -> dict[str, str]:
    """The run's landed cells: key -> completed | failed."""
    return {key: status for key, status in con.execute("select cell_key, status from cells where run_id = ?",
                                                       [run_id]).fetchall()}


def invalid_cells(con: Connection, run_id: str) -> dict[str, list[str]]:
    """The run's completed cells the load generator judged invalid: key -> its reasons."""
    return {key: list(reasons or []) for key, reasons in con.execute(
        "select cell_key, invalid_reasons from cells where run_id = ? and status = 'completed' and valid = false",
        [run_id]).fetchall()}


def note_resume(con: Connection, run_id: str, note: Row) -> None:
    """Append what a resume (or rerun of failed cells) found and did to the run's `resumes`, and
    mark the run running again."""
    current = con.execute("select resumes from runs where run_id = ?", [run_id]).fetchone()
    notes = json.loads(current[0]) if current and current[0] else []
    update_run(con, run_id, RunUpdate(resumes=json.dumps(notes + [note]), status="running", ended_at=None))


def land_build(con: Connection, build: EngineBuild) -> None:
    """A build is recorded once, when it was made; reusing it changes nothing."""
    inputs: dict[str, Any] = build.inputs
    made = inputs.get("built_from") or inputs  # a venv with a wheel built here: that build's compiler, source, wheel
    compiler = made.get("compiler") or {}
    insert_row(con, "builds", dict(
        target=inputs.get("target"), arch=inputs.get("arch") or build.platform.partition("-")[2] or None,
        compiler=" ".join(compiler[k] for k in ("command", "id", "version") if compiler.get(k)) or None,
        compiler_flags=inputs.get("compiler_flags"),
        source_digest=made.get("source_sha256") or made.get("source_commit"),
        artifact_sha256=made.get("artifact_sha256"),
        build_key=build.key, engine=build.engine, engine_version=build.engine_version, packages=build.packages,
        python_version=build.python_version, platform=build.platform, venv_path=build.venv_path,
        pip_freeze=build.pip_freeze, build_seconds=build.build_seconds, created_at=build.created_at,
        inputs=json.dumps(build.inputs, sort_keys=True), tool_version=build.tool_version),
        conflict="on conflict (build_key) do nothing")


NODE_FACTS = ("hostname", "cpus", "cpu_model", "arch", "logical_cores", "physical_cores", "numa_nodes",
              "mem_total_bytes", "kernel", "isa_flags")


def land_node(con: Connection, run_id: str, node: str, address: str, facts: Row,
              clock_offset_s: float | None = None, role: str = "server") -> None:
    """`role`: server, or client (the node the load generator ran on, serving nothing)."""
    insert_row(con, "nodes", dict(run_id=run_id, node=node, address=address, clock_offset_s=clock_offset_s,
                                  role=role, host_key=facts.get("host_key"), **{c: facts[c] for c in NODE_FACTS}),
               conflict="or replace")


def land_nodes(con: Connection, run_id: str, nodes: list[Node], inventories: dict[str, Row],
               clock_offsets: dict[str, float | None] | None = None, client_node: str | None = None) -> None:
    """The run's nodes with their inventories and clock offsets; the client node's role is `client`."""
    for node in nodes:
        role = "client" if node.name == client_node else "server"
        land_node(con, run_id, node.name, node.address, inventories[node.name], (clock_offsets or {}).get(node.name),
                  role=role)


def land_predictions(con: Connection, run_id: str, records: Sequence[Row]) -> None:
    """The performance model's prediction of each cell beside its measurement (`cell_predictions`), the run's
    earlier rows replaced: a resume predicts again from every cell landed by then."""
    con.execute("delete from cell_predictions where run_id = ?", [run_id])
    for record in records:
        insert_row(con, "cell_predictions", {"run_id": run_id, **record})


def land_run_build(con: Connection, run_id: str, build: EngineBuild) -> None:
    """A build the run uses, recorded and named as the run's build."""
    land_build(con, build)
    update_run(con, run_id, RunUpdate(build_key=build.key))


def land_roofline(con: Connection, run_id: str, figures: dict[str, Row]) -> None:
    """Each node's measured roofline (`servebench.roofline.nodes`): a column already set (by
    another engine's build, measured first) is kept, so a torch build's bf16 peak is never lost."""
    for node, f in figures.items():
        con.execute(
            "update nodes set mem_bandwidth_gbps = coalesce(mem_bandwidth_gbps, ?), "
            "matmul_peak_gflops_bf16 = coalesce(matmul_peak_gflops_bf16, ?), "
            "matmul_peak_gflops_fp32 = coalesce(matmul_peak_gflops_fp32, ?), "
            "roofline_cpus = coalesce(roofline_cpus, ?), roofline_emulated = coalesce(roofline_emulated, ?), "
            "roofline_method = coalesce(roofline_method, ?), roofline_measured_at = coalesce(roofline_measured_at, ?), "
            "roofline_cached = coalesce(roofline_cached, ?), roofline_busy = coalesce(roofline_busy, ?), "
            "roofline_load_avg = coalesce(roofline_load_avg, ?) where run_id = ? and node = ?",
            [f.get("mem_bandwidth_gbps"), f.get("matmul_peak_gflops_bf16"), f.get("matmul_peak_gflops_fp32"),
             f.get("cpus") or None, bool(f.get("emulated")), f.get("method"), _unix_time(f.get("measured_at")),
             f.get("cached"), f.get("busy_before"), f.get("load_avg_1m"), run_id, node])


def _unix_time(value: Any) -> datetime | None:
    return None if value is None else datetime.fromtimestamp(float(value), tz=timezone.utc)


def land_placements(con: Connection, run_id: str, placements: list[Row]) -> None:
    """How each tree reached each node (`servebench.distribution.distribute.TreePlacement` dumps)."""
    by_node: dict[str, list[Row]] = {}
    for placement in placements:
        by_node.setdefault(placement["node"], []).append({k: v for k, v in placement.items() if k != "node"})
    for node, rows in by_node.items():
        con.execute("update nodes set placements = ? where run_id = ? and node = ?", [json.dumps(rows), run_id, node])
        interpreters = [row["note"] for row in rows if row["what"] == "python" and row.get("note")]
        if interpreters:  # the last build placed (a variant's) speaks for the node when they differ
            con.execute("update nodes set interpreter = ? where run_id = ? and node = ?",
                        ["; ".join(dict.fromkeys(interpreters)), run_id, node])


def land_server(con: Connection, run_id: str, server: ServerRecord) -> None:
    """The server's row, in place of its mode's earlier one; its placement in server_ranks when given."""
    gate = server.gate
    insert_row(con, "servers", dict(
        **(server.rank_figures or RankFigures()).model_dump(), **server.layout.model_dump(),
        run_id=run_id, mode=server.mode, engine=server.engine, build_key=server.build_key, pid=server.pid,
        port=server.port, command=server.command, env=json.dumps(server.env), log_path=server.log_path,
        started_at=server.started_at, ready_seconds=server.ready_seconds, stopped_at=server.stopped_at,
        status=server.status, error=server.error, kv_capacity_tokens=server.kv_capacity_tokens,
        correctness=gate.status if gate else None, correctness_detail=gate.detail if gate else None,
        correctness_divergences=None if gate is None or gate.divergences is None else json.dumps(gate.divergences)),
        conflict="or replace")
    if server.ranks is not None:
        _replace_server_ranks(con, run_id, server.mode, rank_rows(server.ranks, server.layout))


def _replace_server_ranks(con: Connection, run_id: str, mode: str, found: list[Row]) -> None:
    """The server's rows of server_ranks, in one transaction: a restarted server's placement replaces its first's."""
    con.execute("begin transaction")
    try:
        con.execute("delete from server_ranks where run_id = ? and mode = ?", [run_id, mode])
        for row in found:
            insert_row(con, "server_ranks", dict(run_id=run_id, mode=mode, **row))
        con.execute("commit")
    except Exception:
        con.execute("rollback")
        raise


def rank_rows(replicas: list[list[RankShare]], layout: ServerLayout) -> list[Row]:
    """server_ranks' rows of a server: each replica's processes in layout order with their node and label. A
    process holding decoder layers is a rank, numbered in layout order, which is vLLM's (DP engine, then pipeline
    stage, then TP rank: rank = (dp_rank x pp + pp_rank) x tp + tp_rank); its coordinates follow from the mode's
    layout when the ranks are dp x pp x tp, else stay NULL. A process without layers (a server in front of RPC
    workers) has no rank."""
    tp, pp, dp = layout.tp or 0, layout.pp or 0, layout.dp or 0  # 0: a server of no known mode
    found = []
    for replica, shares in enumerate(replicas):
        workers = sum(1 for share in shares if share.layers)
        coordinates_known = workers > 0 and workers == tp * pp * dp
        rank = 0
        for process, share in enumerate(shares):
            row: Row = dict(replica=replica, process=process, label=share.label, node=share.node, rank=None,
                            dp_rank=None, pp_rank=None, tp_rank=None, ep_rank=None)
            if share.layers:
                row["rank"] = rank
                if coordinates_known:
                    engine, local = divmod(rank, tp * pp)
                    row.update(dp_rank=engine, pp_rank=local // tp, tp_rank=local % tp,
                               ep_rank=engine * tp + local % tp if layout.ep else None)
                rank += 1
            found.append(row)
    return found


CELL_SUMMARY_COLUMNS = ("duration_s", "completed", "failed", "request_throughput", "output_throughput", "goodput",
                        "valid", "invalid_reasons", "client_output_tokens", "server_output_tokens",
                        "prefix_cache_hit_rate")  # the summary's keys landed as they are


def land_cell(con: Connection, run_id: str, record: CellRecord, attempts: Sequence[CellAttempt] = ()) -> str:
    """Replace the cell's rows with this measurement and its attempts (every measurement of the cell:
    the superseded ones and the last, `validity.retries`); return its warehouse cell_id. The cell's
    row, its requests and its attempts are one transaction: a kill leaves all of them or none.

    Request rows come from the record's `requests_csv`, else from the result's requests, written to
    a temporary CSV first: one fast path either way.
    """
    cid = cell_id(run_id, record.cell.key)
    row = {**cell_row(run_id, record),
           "attempts": max(a.attempt for a in attempts) + 1 if attempts else None}  # measurements taken
    measured = record.measured
    if measured is not None and measured.requests_csv is None and measured.result.get("requests"):
        # next to the result file (in the run's directory), so an orchestrator killed while landing
        # leaves nothing in /tmp
        path = measured.result_path
        near = str(Path(path).parent) if path and Path(path).parent.is_dir() else None
        with tempfile.TemporaryDirectory(dir=near, prefix=".landing-") as scratch:
            csv = write_requests_csv(measured.result["requests"], Path(scratch) / "requests.csv")
            _replace_cell_rows(con, run_id, cid, row, csv, attempts)
    else:
        _replace_cell_rows(con, run_id, cid, row, None if measured is None else measured.requests_csv, attempts)
    return cid


def cell_row(run_id: str, record: CellRecord) -> Row:
    """The cell's row of `cells`: what the cell is, its verdict, and the load generator's summary."""
    cell, measured = record.cell, record.measured
    result = {} if measured is None else measured.result
    summary: Row = result.get("summary", {})
    mode = cell.mode
    return dict(
        run_id=run_id, cell_id=cell_id(run_id, cell.key), cell_key=cell.key, mode=mode.name, tp=mode.tp, pp=mode.pp,
        dp=mode.dp, ep=mode.ep, replicas=mode.replicas, executor=mode.executor, load_kind=cell.point.kind,
        clients=cell.point.clients, repeat=cell.repeat, input_len=record.input_len, output_len=record.output_len,
        seed=cell.seed, status=record.status, error=record.error, correctness=record.correctness,
        started_at=record.started_at, ended_at=record.ended_at, t0_monotonic=result.get("t0", {}).get("monotonic"),
        t_end_monotonic=_end_monotonic(result),
        **{name: summary.get(name) for name in CELL_SUMMARY_COLUMNS},
        **{f"{metric}_{pct}_ms": _pct(summary, f"{metric}_ms", pct)
           for metric in ("ttft", "tpot", "itl", "e2el", "ttft_text") for pct in ("p50", "p99")},
        **_rate_columns(cell, summary), schedule_lag_p99_ms=_pct(summary, "schedule_lag_ms", "p99"),
        result_path=None if measured is None else measured.result_path, slo_met=record.slo_met,
        search_probe=record.search_probe, kv_failures=None if measured is None else measured.kv_failures,
        **_client_columns(summary.get("client")), **_link_columns(cell),
        knobs=knobs_json(mode.knobs), workload=None if cell.workload is None else cell.workload.identity(),
        workload_name=None if cell.workload is None else cell.workload.label, **_warmup_columns(summary),
        **_node_cpu_columns(summary))


def _node_cpu_columns(summary: Row) -> Row:
    """Who used the server nodes' cores over the cell (the node with the largest foreign share), and
    whether its hang watch judged it (all None for a result that has neither)."""
    nodes: list[Row] = summary.get("node_cpu") or []
    worst = max(nodes, key=lambda n: n["foreign_share"], default=None)
    return {"foreign_cpu_share": None if worst is None else worst["foreign_share"],
            "server_cpu_share": None if worst is None else worst["server_share"],
            "node_cpu": json.dumps(nodes) if nodes else None, "hang_watch_error": summary.get("hang_watch_error")}


def _rate_columns(cell: Cell, summary: Row) -> Row:
    """An open-loop cell's rates: the one the generator was asked for (the cell's own when nothing was
    measured) and the schedule's as drawn, which validity is judged against."""
    offered = summary.get("offered_rate")
    return {"offered_rate": cell.point.rate if offered is None else offered,
            "realized_rate": summary.get("scheduled_rate")}


def _no_step(step: str) -> None:
    """A step of a cell's landing reached (nothing to do)."""


landing_step: Callable[[str], None] = _no_step  # called at each step of a cell's landing: where a test kills it


def _replace_cell_rows(con: Connection, run_id: str, cid: str, row: Row, requests_csv: Path | None,
                       attempts: Sequence[CellAttempt]) -> None:
    """The cell's row, its request rows and its attempts' rows, in one transaction."""
    landing_step("begin")
    con.execute("begin transaction")
    try:
        con.execute("delete from requests where cell_id = ?", [cid])
        con.execute("delete from cells where cell_id = ?", [cid])
        con.execute("delete from cell_attempts where run_id = ? and cell_key = ?", [run_id, row["cell_key"]])
        landing_step("deleted")
        insert_row(con, "cells", row)
        landing_step("cell")
        if requests_csv is not None:
            _insert_requests_csv(con, run_id, cid, requests_csv)
        landing_step("requests")
        for attempt in attempts:
            _insert_attempt(con, run_id, attempt)
        landing_step("attempts")
        con.execute("commit")
    except Exception:
        con.execute("rollback")
        raise
    landing_step("committed")


def _warmup_columns(summary: Row) -> Row:
    """What the cell's warm-up until steady took (all None without one)."""
    warmed = summary.get("warm_until_steady") or {}
    return {"warmup_steady": warmed.get("steady"), "warmup_s": warmed.get("seconds"),
            "warmup_phase_requests": warmed.get("requests"), "warmup_why": warmed.get("why")}


def _client_columns(client: Row | None) -> Row:
    """Where the load generator ran and how busy it was (None for results landed before the
    warehouse recorded it)."""
    client = client or {}
    return {"client_cpus": client.get("cpus"), "client_nice": client.get("nice"),
            "client_cpu_fraction": client.get("core_fraction"), "client_node": client.get("node")}


def _insert_attempt(con: Connection, run_id: str, attempt: CellAttempt) -> None:
    """One measurement of a cell, in its cell's landing: a superseded one stays here with its verdict;
    `cells` holds the last, with how many attempts it took."""
    summary = attempt.summary
    insert_row(con, "cell_attempts", dict(
        run_id=run_id, cell_key=attempt.cell_key, attempt=attempt.attempt, superseded=attempt.superseded,
        valid=summary.get("valid"), invalid_reasons=summary.get("invalid_reasons") or None,
        completed=summary.get("completed"), failed=summary.get("failed"),
        output_throughput=summary.get("output_throughput"), ttft_p50_ms=_pct(summary, "ttft_ms", "p50"),
        tpot_p50_ms=_pct(summary, "tpot_ms", "p50"), schedule_lag_p99_ms=_pct(summary, "schedule_lag_ms", "p99"),
        client_cpu_fraction=(summary.get("client") or {}).get("core_fraction"), result_path=attempt.result_path))


REQUEST_TABLE_COLUMN = {"index": "request_index"}  # a record's field -> its `requests` column, where they differ


def _insert_requests_csv(con: Connection, run_id: str, cid: str, path: Path) -> None:
    types = "{" + ", ".join(f"'{name}': '{kind}'" for name, kind in REQUEST_CSV_TYPES.items()) + "}"
    columns = ", ".join(f'"{name}"' for name in REQUEST_CSV_TYPES)
    # by name, not position: migrations append columns in their own order
    targets = ", ".join(f'"{REQUEST_TABLE_COLUMN.get(name, name)}"' for name in REQUEST_CSV_TYPES)
    con.execute(f"insert into requests (run_id, cell_id, {targets}) select ?, ?, {columns} "
                f"from read_csv(?, header = true, columns = {types}, nullstr = '')", [run_id, cid, str(path)])


def _end_monotonic(result: Row | None) -> float | None:
    if not result or not result.get("requests"):
        return None
    ends = [r.get("last_token_s") or r.get("sent_s") or 0.0 for r in result["requests"]]
    return float(result["t0"]["monotonic"] + max(ends))


SAMPLE_TABLES = {  # table -> (its columns after run_id and mode, the JSONL columns and types)
    "node_samples": ("node, t_mono, t_wall, cpu_pct, cpu_pct_per_core, mem_used_bytes, mem_available_bytes, "
                     "engine_rss_bytes, engine_processes, net",
                     "{'node': 'VARCHAR', 't_mono': 'DOUBLE', 't_wall': 'DOUBLE', 'cpu_pct': 'DOUBLE', "
                     "'cpu_pct_per_core': 'JSON', 'mem_used_bytes': 'BIGINT', 'mem_available_bytes': 'BIGINT', "
                     "'engine_rss_bytes': 'BIGINT', 'engine_processes': 'INTEGER', 'net': 'JSON'}"),
    "server_samples": ("t_mono, t_wall, kv_usage, running, waiting, preemptions_total, prompt_tokens_total, "
                       "generation_tokens_total, kv_tokens, decode_steps_total, requests_total, instances",
                       "{'t_mono': 'DOUBLE', 't_wall': 'DOUBLE', 'kv_usage': 'DOUBLE', 'running': 'DOUBLE', "
                       "'waiting': 'DOUBLE', 'preemptions_total': 'DOUBLE', 'prompt_tokens_total': 'DOUBLE', "
                       "'generation_tokens_total': 'DOUBLE', 'kv_tokens': 'DOUBLE', "
                       "'decode_steps_total': 'DOUBLE', 'requests_total': 'DOUBLE', "
                       "'instances': 'JSON'}"),  # instances: per DP engine or replica (migration 029)
}


def land_samples(con: Connection, run_id: str, mode: str, node_files: list[Path],
                 server_files: list[Path]) -> tuple[int, int]:
    """Land a server's telemetry JSONL files (replacing earlier rows of the same run and mode)."""
    files = {"node_samples": node_files, "server_samples": server_files}
    con.execute("begin transaction")
    try:
        for table, (columns, types) in SAMPLE_TABLES.items():
            con.execute(f"delete from {table} where run_id = ? and mode = ?", [run_id, mode])
            for path in (p for p in files[table] if p.exists() and p.stat().st_size):
                con.execute(f"insert into {table} select ?, ?, {columns} from "
                            f"read_json(?, format='newline_delimited', columns={types})", [run_id, mode, str(path)])
        con.execute("commit")
    except Exception:
        con.execute("rollback")
        raise
    counts: list[int] = []
    for table in SAMPLE_TABLES:
        row = con.execute(f"select count(*) from {table} where run_id = ? and mode = ?", [run_id, mode]).fetchone()
        assert row is not None  # an aggregate without GROUP BY always returns one row
        counts.append(row[0])
    return counts[0], counts[1]


def knobs_json(knobs: dict[str, Any]) -> str | None:
    """A mode's knobs as the warehouse keeps them (sorted keys: one text per setting; NULL: none).
    A null knob is the engine's default, as if not given: left out."""
    set_knobs = {name: int(value) if isinstance(value, float) and value.is_integer() else value
                 for name, value in knobs.items() if value is not None}  # 2.0 and 2: one setting
    return json.dumps(set_knobs, sort_keys=True) if set_knobs else None


def capacity_configurations(con: Connection, run_id: str) -> list[Row]:
    """The run's capacity searches, one per configuration, in the order they were landed."""
    rows = con.execute("select mode, capacity, upper, probes, tpot_p50_ms, knobs from capacity where run_id = ? "
                       "order by rowid", [run_id]).fetchall()
    return [dict(mode=m, capacity=c, upper=u, probes=p, tpot_p50_ms=t, knobs=json.loads(k) if k else {})
            for m, c, u, p, t, k in rows]


def _link_columns(cell: Cell) -> Row:
    """The cell's network setting, for campaigns that sweep it (the columns stay NULL otherwise)."""
    if cell.link is None:
        return {}
    return {"link": cell.link.label, "link_delay_ms": cell.link.delay_ms, "link_rate_mbit": cell.link.rate_mbit}


def _pct(summary: Row, metric: str, name: str) -> float | None:
    value = (summary.get(metric) or {}).get(name)
    return None if value is None else float(value)
