"""Landing measured results in the warehouse.

Each cell lands as soon as it is measured (delete by cell_id, then insert, in one
transaction), so an interrupted campaign keeps every finished cell and a re-landed cell
never doubles its rows.
"""

from __future__ import annotations

import json
import socket
import subprocess
import tempfile
from datetime import datetime, timezone
from pathlib import Path

import duckdb

from servebench.builds.venv import EngineBuild
from servebench.config.sweep import Cell
from servebench.engines.base import RankShare
from servebench.load.records import REQUEST_CSV_TYPES, write_requests_csv
from servebench.paths import CHECKOUT, DISTRIBUTION


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


def insert_row(con: duckdb.DuckDBPyConnection, table: str, values: dict, conflict: str = "") -> None:
    """Insert by column name: a later migration's new column never shifts what lands where.
    conflict: "or replace", or an ON CONFLICT clause."""
    columns = ", ".join(f'"{name}"' for name in values)
    verb, tail = ("insert or replace", "") if conflict == "or replace" else ("insert", conflict)
    con.execute(f"{verb} into {table} ({columns}) values ({', '.join('?' * len(values))}) {tail}",
                list(values.values()))


def insert_run(con: duckdb.DuckDBPyConnection, *, run_id: str, campaign: str, spec_hash: str, spec_text: str,
               spec_normalized: dict, campaign_file: str, run_dir: Path) -> None:
    insert_row(con, "runs", dict(
        run_id=run_id, campaign=campaign, spec_hash=spec_hash, spec_text=spec_text,
        spec_normalized=json.dumps(spec_normalized), campaign_file=campaign_file, started_at=now(), status="running",
        servebench_commit=servebench_commit(), host=socket.gethostname(), run_dir=str(run_dir)))


def update_run(con: duckdb.DuckDBPyConnection, run_id: str, **fields) -> None:
    names = ", ".join(f"{name} = ?" for name in fields)
    con.execute(f"update runs set {names} where run_id = ?", [*fields.values(), run_id])


def run_record(con: duckdb.DuckDBPyConnection, run_id: str) -> dict | None:
    """What a resume needs of a run: its status, spec hash, files and allocation."""
    row = con.execute("select status, spec_hash, run_dir, campaign_file, allocation from runs where run_id = ?",
                      [run_id]).fetchone()
    if row is None:
        return None
    return dict(zip(("status", "spec_hash", "run_dir", "campaign_file", "allocation"), row))


def cell_statuses(con: duckdb.DuckDBPyConnection, run_id: str) -> dict[str, str]:
    """The run's landed cells: key -> completed | failed."""
    return dict(con.execute("select cell_key, status from cells where run_id = ?", [run_id]).fetchall())


def invalid_cells(con: duckdb.DuckDBPyConnection, run_id: str) -> dict[str, list[str]]:
    """The run's completed cells the load generator judged invalid: key -> its reasons."""
    return {key: list(reasons or []) for key, reasons in con.execute(
        "select cell_key, invalid_reasons from cells where run_id = ? and status = 'completed' and valid = false",
        [run_id]).fetchall()}


def note_resume(con: duckdb.DuckDBPyConnection, run_id: str, note: dict) -> None:
    """Append what a resume (or rerun of failed cells) found and did to the run's `resumes`, and
    mark the run running again."""
    current = con.execute("select resumes from runs where run_id = ?", [run_id]).fetchone()
    notes = json.loads(current[0]) if current and current[0] else []
    update_run(con, run_id, resumes=json.dumps(notes + [note]), status="running", ended_at=None)


def land_build(con: duckdb.DuckDBPyConnection, build: EngineBuild) -> None:
    """A build is recorded once, when it was made; reusing it changes nothing."""
    inputs = build.inputs
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


def land_node(con: duckdb.DuckDBPyConnection, run_id: str, node: str, address: str, facts: dict,
              clock_offset_s: float | None = None, role: str = "server") -> None:
    """`role`: server, or client (the node the load generator ran on, serving nothing)."""
    facts_columns = ("hostname", "cpus", "cpu_model", "arch", "logical_cores", "physical_cores", "numa_nodes",
                     "mem_total_bytes", "kernel", "isa_flags")
    insert_row(con, "nodes", dict(run_id=run_id, node=node, address=address, clock_offset_s=clock_offset_s,
                                  role=role, **{c: facts[c] for c in facts_columns}),
               conflict="or replace")


RANK_FIGURES = ("served_dtype", "rank_weight_bytes", "rank_kv_bytes_per_token", "rank_parameters", "ranks_per_node")


def land_roofline(con: duckdb.DuckDBPyConnection, run_id: str, figures: dict[str, dict]) -> None:
    """Each node's measured roofline (`servebench.roofline.nodes`): a column already set (by
    another engine's build, measured first) is kept, so a torch build's bf16 peak is never lost."""
    for node, f in figures.items():
        con.execute(
            "update nodes set mem_bandwidth_gbps = coalesce(mem_bandwidth_gbps, ?), "
            "matmul_peak_gflops_bf16 = coalesce(matmul_peak_gflops_bf16, ?), "
            "matmul_peak_gflops_fp32 = coalesce(matmul_peak_gflops_fp32, ?), "
            "roofline_cpus = coalesce(roofline_cpus, ?), roofline_emulated = coalesce(roofline_emulated, ?), "
            "roofline_method = coalesce(roofline_method, ?) where run_id = ? and node = ?",
            [f.get("mem_bandwidth_gbps"), f.get("matmul_peak_gflops_bf16"), f.get("matmul_peak_gflops_fp32"),
             f.get("cpus") or None, bool(f.get("emulated")), f.get("method"), run_id, node])


def land_placements(con: duckdb.DuckDBPyConnection, run_id: str, placements: list[dict]) -> None:
    """How each tree reached each node (`servebench.distribution.distribute.TreePlacement` dumps)."""
    by_node: dict[str, list[dict]] = {}
    for placement in placements:
        by_node.setdefault(placement["node"], []).append({k: v for k, v in placement.items() if k != "node"})
    for node, rows in by_node.items():
        con.execute("update nodes set placements = ? where run_id = ? and node = ?", [json.dumps(rows), run_id, node])
        interpreters = [row["note"] for row in rows if row["what"] == "python" and row.get("note")]
        if interpreters:  # the last build placed (a variant's) speaks for the node when they differ
            con.execute("update nodes set interpreter = ? where run_id = ? and node = ?",
                        ["; ".join(dict.fromkeys(interpreters)), run_id, node])


def land_server(con: duckdb.DuckDBPyConnection, run_id: str, *, mode: str, pid: int | None, port: int | None,
                command: list[str], env: dict, log_path: str | None, started_at: datetime | None,
                ready_seconds: float | None, stopped_at: datetime | None, status: str, error: str | None,
                correctness: str | None = None, correctness_detail: str | None = None,
                kv_capacity_tokens: int | None = None, correctness_divergences: list[dict] | None = None,
                engine: str | None = None, build_key: str | None = None, rank_figures: dict | None = None,
                ranks: list[list[RankShare]] | None = None) -> None:
    """`rank_figures`: the mode's bytes and parameters per rank (servers.served_dtype, rank_weight_bytes,
    rank_kv_bytes_per_token, rank_parameters, ranks_per_node), which cell_roofline reads. `ranks`: each
    replica's processes as the engine lays them out on its nodes (what `servebench plan` prints), landed in
    server_ranks in place of the mode's earlier rows (None: those rows stay)."""
    layout = served_layout(con, run_id, mode)
    insert_row(con, "servers", dict(
        **{name: (rank_figures or {}).get(name) for name in RANK_FIGURES}, **layout,
        run_id=run_id, mode=mode, engine=engine, build_key=build_key, pid=pid, port=port, command=command,
        env=json.dumps(env), log_path=log_path,
        started_at=started_at, ready_seconds=ready_seconds, stopped_at=stopped_at, status=status, error=error,
        correctness=correctness, correctness_detail=correctness_detail, kv_capacity_tokens=kv_capacity_tokens,
        correctness_divergences=None if correctness_divergences is None else json.dumps(correctness_divergences)),
        conflict="or replace")
    if ranks is not None:
        _replace_server_ranks(con, run_id, mode, rank_rows(ranks, layout))


def _replace_server_ranks(con: duckdb.DuckDBPyConnection, run_id: str, mode: str, found: list[dict]) -> None:
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


def rank_rows(replicas: list[list[RankShare]], layout: dict) -> list[dict]:
    """server_ranks' rows of a server: each replica's processes in layout order with their node and label. A
    process holding decoder layers is a rank, numbered in layout order, which is vLLM's (DP engine, then pipeline
    stage, then TP rank: rank = (dp_rank x pp + pp_rank) x tp + tp_rank); its coordinates follow from the mode's
    `layout` (tp, pp, dp, ep: `served_layout`) when the ranks are dp x pp x tp, else stay NULL. A process
    without layers (a server in front of RPC workers) has no rank."""
    tp, pp, dp = (layout.get(name) or 0 for name in ("tp", "pp", "dp"))  # 0: a server of no known mode
    found = []
    for replica, shares in enumerate(replicas):
        workers = sum(1 for share in shares if share.layers)
        coordinates_known = workers > 0 and workers == tp * pp * dp
        rank = 0
        for process, share in enumerate(shares):
            row = dict(replica=replica, process=process, label=share.label, node=share.node, rank=None,
                       dp_rank=None, pp_rank=None, tp_rank=None, ep_rank=None)
            if share.layers:
                row["rank"] = rank
                if coordinates_known:
                    engine, local = divmod(rank, tp * pp)
                    row.update(dp_rank=engine, pp_rank=local // tp, tp_rank=local % tp,
                               ep_rank=engine * tp + local % tp if layout.get("ep") else None)
                rank += 1
            found.append(row)
    return found


def served_layout(con: duckdb.DuckDBPyConnection, run_id: str, mode: str) -> dict:
    """tp, pp, dp, ep, replicas and balancer of the mode a server serves, from the run's spec: a configuration
    (`dp2-mns8`, `tp1-fp32`) is of the campaign mode its name starts with (the longest); a reference server
    (`reference-tp1`) is one worker; NULLs for a server of no mode the run's spec has."""
    row = con.execute("select spec_normalized from runs where run_id = ?", [run_id]).fetchone()
    modes = json.loads(row[0]).get("modes", []) if row else []
    matching = [m for m in modes if mode == m["name"] or mode.startswith(m["name"] + "-")]
    if matching:
        served = max(matching, key=lambda m: len(m["name"]))
        replicas = served.get("replicas", 1)
        return {"tp": served.get("tp", 1), "pp": served.get("pp", 1), "dp": served.get("dp", 1),
                "ep": bool(served.get("ep", False)), "replicas": replicas,
                "balancer": None if replicas == 1 else served.get("balancer") or "least-connections"}
    if mode.startswith("reference-"):
        return {"tp": 1, "pp": 1, "dp": 1, "ep": False, "replicas": 1, "balancer": None}
    return {"tp": None, "pp": None, "dp": None, "ep": None, "replicas": None, "balancer": None}


def land_cell(con: duckdb.DuckDBPyConnection, run_id: str, cell: Cell, *, input_len: int, output_len: int,
              status: str, error: str | None, started_at: datetime | None, ended_at: datetime | None,
              result: dict | None, result_path: str | None, correctness: str | None = None,
              requests_csv: Path | None = None, slo_met: bool | None = None, search_probe: bool = False,
              kv_failures: int | None = None) -> str:
    """Replace the cell's rows with this measurement; return its warehouse cell_id.

    Request rows come from `requests_csv` (the load generator writes one), else from the
    result's requests, written to a temporary CSV first: one fast path either way.
    """
    cid = cell_id(run_id, cell.key)
    summary = (result or {}).get("summary", {})
    t0 = (result or {}).get("t0", {})
    row = dict(
        run_id=run_id, cell_id=cid, cell_key=cell.key, mode=cell.mode.name, tp=cell.mode.tp, pp=cell.mode.pp,
        dp=cell.mode.dp, ep=cell.mode.ep, replicas=cell.mode.replicas, executor=cell.mode.executor,
        load_kind=cell.point.kind,
        rate=cell.point.rate, clients=cell.point.clients,
        repeat=cell.repeat, input_len=input_len, output_len=output_len, seed=cell.seed, status=status, error=error,
        correctness=correctness, started_at=started_at, ended_at=ended_at, t0_monotonic=t0.get("monotonic"),
        t_end_monotonic=_end_monotonic(result),
        **{name: summary.get(name) for name in ("duration_s", "completed", "failed", "offered_rate", "achieved_rate",
                                                "request_throughput", "output_throughput", "goodput", "valid",
                                                "invalid_reasons", "client_output_tokens", "server_output_tokens",
                                                "prefix_cache_hit_rate")},
        **{f"{metric}_{pct}_ms": _pct(summary, f"{metric}_ms", pct)
           for metric in ("ttft", "tpot", "itl", "e2el", "ttft_text") for pct in ("p50", "p99")},
        realized_rate=summary.get("scheduled_rate"),  # the schedule as drawn: what validity is judged against
        schedule_lag_p99_ms=_pct(summary, "schedule_lag_ms", "p99"), result_path=result_path,
        slo_met=slo_met, search_probe=search_probe, kv_failures=kv_failures,
        **_client_columns(summary.get("client")), **_link_columns(cell),
        knobs=knobs_json(cell.mode.knobs), workload=None if cell.workload is None else cell.workload.identity(),
        workload_name=None if cell.workload is None else cell.workload.label, **_warmup_columns(summary))
    if requests_csv is None and result is not None and result.get("requests"):
        # next to the result file (in the run's directory), so an orchestrator killed while landing
        # leaves nothing in /tmp
        near = str(Path(result_path).parent) if result_path and Path(result_path).parent.is_dir() else None
        with tempfile.TemporaryDirectory(dir=near, prefix=".landing-") as scratch:
            csv = write_requests_csv(result["requests"], Path(scratch) / "requests.csv")
            _replace_cell_rows(con, run_id, cid, row, csv)
    else:
        _replace_cell_rows(con, run_id, cid, row, requests_csv)
    return cid


def _replace_cell_rows(con: duckdb.DuckDBPyConnection, run_id: str, cid: str, row: dict,
                       requests_csv: Path | None) -> None:
    """The cell's row and its request rows, in one transaction."""
    con.execute("begin transaction")
    try:
        con.execute("delete from requests where cell_id = ?", [cid])
        con.execute("delete from cells where cell_id = ?", [cid])
        insert_row(con, "cells", row)
        if requests_csv is not None:
            _insert_requests_csv(con, run_id, cid, requests_csv)
        con.execute("commit")
    except Exception:
        con.execute("rollback")
        raise


def _warmup_columns(summary: dict) -> dict:
    """What the cell's warm-up until steady took (all None without one)."""
    warmed = summary.get("warm_until_steady") or {}
    return {"warmup_steady": warmed.get("steady"), "warmup_s": warmed.get("seconds"),
            "warmup_phase_requests": warmed.get("requests"), "warmup_why": warmed.get("why")}


def _client_columns(client: dict | None) -> dict:
    """Where the load generator ran and how busy it was (None for results landed before the
    warehouse recorded it)."""
    client = client or {}
    return {"client_cpus": client.get("cpus"), "client_nice": client.get("nice"),
            "client_cpu_fraction": client.get("core_fraction"), "client_node": client.get("node")}


def land_cell_attempt(con: duckdb.DuckDBPyConnection, run_id: str, cell_key: str, attempt: int, superseded: bool,
                      summary: dict, result_path: str | None) -> None:
    """One measurement of a cell (`validity.retries`): a superseded one stays here with its verdict;
    `cells` holds the last, with how many attempts it took."""
    insert_row(con, "cell_attempts", dict(
        run_id=run_id, cell_key=cell_key, attempt=attempt, superseded=superseded, valid=summary.get("valid"),
        invalid_reasons=summary.get("invalid_reasons") or None, completed=summary.get("completed"),
        failed=summary.get("failed"), output_throughput=summary.get("output_throughput"),
        ttft_p50_ms=_pct(summary, "ttft_ms", "p50"), tpot_p50_ms=_pct(summary, "tpot_ms", "p50"),
        schedule_lag_p99_ms=_pct(summary, "schedule_lag_ms", "p99"),
        client_cpu_fraction=(summary.get("client") or {}).get("core_fraction"), result_path=result_path),
        conflict="or replace")
    if not superseded:
        con.execute("update cells set attempts = ? where cell_id = ?", [attempt + 1, cell_id(run_id, cell_key)])


REQUEST_TABLE_COLUMN = {"index": "request_index"}  # a record's field -> its `requests` column, where they differ


def _insert_requests_csv(con: duckdb.DuckDBPyConnection, run_id: str, cid: str, path: Path) -> None:
    types = "{" + ", ".join(f"'{name}': '{kind}'" for name, kind in REQUEST_CSV_TYPES.items()) + "}"
    columns = ", ".join(f'"{name}"' for name in REQUEST_CSV_TYPES)
    # by name, not position: migrations append columns in their own order
    targets = ", ".join(f'"{REQUEST_TABLE_COLUMN.get(name, name)}"' for name in REQUEST_CSV_TYPES)
    con.execute(f"insert into requests (run_id, cell_id, {targets}) select ?, ?, {columns} "
                f"from read_csv(?, header = true, columns = {types}, nullstr = '')", [run_id, cid, str(path)])


def _end_monotonic(result: dict | None) -> float | None:
    if not result or not result.get("requests"):
        return None
    ends = [r.get("last_token_s") or r.get("sent_s") or 0.0 for r in result["requests"]]
    return result["t0"]["monotonic"] + max(ends)


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


def land_samples(con: duckdb.DuckDBPyConnection, run_id: str, mode: str, node_files: list[Path],
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
    counts = []
    for table in SAMPLE_TABLES:
        row = con.execute(f"select count(*) from {table} where run_id = ? and mode = ?", [run_id, mode]).fetchone()
        assert row is not None  # an aggregate without GROUP BY always returns one row
        counts.append(row[0])
    return counts[0], counts[1]


def knobs_json(knobs: dict) -> str | None:
    """A mode's knobs as the warehouse keeps them (sorted keys: one text per setting; NULL: none).
    A null knob is the engine's default, as if not given: left out."""
    set_knobs = {name: int(value) if isinstance(value, float) and value.is_integer() else value
                 for name, value in knobs.items() if value is not None}  # 2.0 and 2: one setting
    return json.dumps(set_knobs, sort_keys=True) if set_knobs else None


def capacity_configurations(con: duckdb.DuckDBPyConnection, run_id: str) -> list[dict]:
    """The run's capacity searches, one per configuration, in the order they were landed."""
    rows = con.execute("select mode, capacity, upper, probes, tpot_p50_ms, knobs from capacity where run_id = ? "
                       "order by rowid", [run_id]).fetchall()
    return [dict(mode=m, capacity=c, upper=u, probes=p, tpot_p50_ms=t, knobs=json.loads(k) if k else {})
            for m, c, u, p, t, k in rows]


def _link_columns(cell: Cell) -> dict:
    """The cell's network setting, for campaigns that sweep it (the columns stay NULL otherwise)."""
    if cell.link is None:
        return {}
    return {"link": cell.link.label, "link_delay_ms": cell.link.delay_ms, "link_rate_mbit": cell.link.rate_mbit}


def _pct(summary: dict, metric: str, name: str) -> float | None:
    return (summary.get(metric) or {}).get(name)


def land_failed_server(con: duckdb.DuckDBPyConnection, run_id: str, *, mode: str, error: str,
                       engine: str | None = None, build_key: str | None = None) -> None:
    """A server that did not start: its mode, the engine and build it was to run, and why; nothing else
    of a server (no process, port, command or gate) exists to land."""
    land_server(con, run_id, mode=mode, engine=engine, build_key=build_key, pid=None, port=None, command=[], env={},
                log_path=None, started_at=None, ready_seconds=None, stopped_at=None, status="failed", error=error)


def land_nodes(con: duckdb.DuckDBPyConnection, run_id: str, nodes: list, inventories: dict[str, dict],
               clock_offsets: dict[str, float | None] | None = None, client_node: str | None = None) -> None:
    """The run's nodes with their inventories and clock offsets; the client node's role is `client`."""
    for node in nodes:
        role = "client" if node.name == client_node else "server"
        land_node(con, run_id, node.name, node.address, inventories[node.name], (clock_offsets or {}).get(node.name),
                  role=role)


def land_run_build(con: duckdb.DuckDBPyConnection, run_id: str, build: EngineBuild) -> None:
    """A build the run uses, recorded and named as the run's build."""
    land_build(con, build)
    update_run(con, run_id, build_key=build.key)
