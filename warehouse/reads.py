"""Named reads of one run, for its report, its summary and the commands that show it.

Each returns plain rows (dicts keyed by column name), so `servebench/analysis/` and the CLI hold
no SQL and a query's shape is changed in one place. Reads across runs (series, nights, findings,
capacities of every run) are `history.py`.
"""

from __future__ import annotations

from typing import Any

from . import Connection, rows

# the columns of a cell the report charts and tables
REPORT_CELL_COLUMNS = """cell_id, cell_key, mode, tp, pp, executor, load_kind, offered_rate, clients, "repeat", status,
    completed, failed, request_throughput, output_throughput, ttft_p50_ms, ttft_p99_ms, tpot_p50_ms, tpot_p99_ms,
    e2el_p50_ms, t0_monotonic, t_end_monotonic, correctness, valid, invalid_reasons, error, client_cpus,
    client_cpu_fraction, link, link_delay_ms, link_rate_mbit, workload_name, realized_rate, slo_met"""
# (length, source) -> the requests column holding it: what a workload asked for, what the server served
WORKLOAD_LENGTHS = {
    ("input", "sent"): "expected_input_tokens", ("input", "served"): "input_tokens",
    ("output", "sent"): "requested_output_tokens", ("output", "served"): "output_tokens"}
MEASURED = "not coalesce(r.warmup, false)"   # warm-up requests are not part of the measurement
# how far an open-loop cell's schedule as drawn (realized_rate) may lie from the rate asked (offered_rate)
# before the run's summary and the report say so: a few Poisson arrivals realize a rate of their own,
# and the cell measured that load, not the one its key names
RATE_TOLERANCE = 0.10


# the run


def latest_run_id(con: Connection, campaign: str | None = None) -> str | None:
    """The latest run that has ended (of one campaign, if given): a run still in progress is not "the latest
    run" of any report or comparison (the `latest_runs` view)."""
    found = rows(con, "select run_id from latest_runs" + (" where campaign = ?" if campaign else "")
                 + " order by started_at desc limit 1", [campaign] if campaign else [])
    return found[0]["run_id"] if found else None


def runs_overview(con: Connection, campaign: str | None = None) -> list[dict[str, Any]]:
    """Every run, newest first, with its campaign, start, status, duration and cells valid of all."""
    return rows(con, """select r.run_id, r.campaign, r.started_at, r.status,
            date_diff('second', r.started_at, r.ended_at) as seconds,
            count(c.cell_id) filter (where c.valid) as cells_valid, count(c.cell_id) as cells
        from runs r left join cells c using (run_id)""" + (" where r.campaign = ?" if campaign else "") + """
        group by all order by r.started_at desc""", [campaign] if campaign else [])


def run_header(con: Connection, run_id: str) -> dict[str, Any] | None:
    """What a report's title says of the run: campaign, start, status, spec hash."""
    found = rows(con, "select campaign, started_at, status, spec_hash from runs where run_id = ?", [run_id])
    return found[0] if found else None


def run_times(con: Connection, run_id: str) -> dict[str, Any] | None:
    """What the report's first screen and its run section say of the run: campaign, status, spec hash,
    start and end (UTC, whole seconds), duration, the normalized spec and the run's own build."""
    found = rows(con, """select campaign, status, spec_hash, spec_normalized, build_key,
            strftime(started_at at time zone 'UTC', '%Y-%m-%d %H:%M:%S') as started_utc,
            strftime(ended_at at time zone 'UTC', '%Y-%m-%d %H:%M:%S') as ended_utc,
            date_diff('second', started_at, ended_at) as seconds
        from runs where run_id = ?""", [run_id])
    return found[0] if found else None


def run_exists(con: Connection, run_id: str) -> bool:
    return bool(rows(con, "select 1 from runs where run_id = ?", [run_id]))


def run_campaign(con: Connection, run_id: str) -> str | None:
    found = rows(con, "select campaign from runs where run_id = ?", [run_id])
    return found[0]["campaign"] if found else None


def run_directory(con: Connection, run_id: str) -> str | None:
    """Where the run kept its files (None: no such run)."""
    found = rows(con, "select run_dir from runs where run_id = ?", [run_id])
    return found[0]["run_dir"] if found else None


# its cells


def report_cells(con: Connection, run_id: str) -> list[dict[str, Any]]:
    """The run's cells with what the report shows of them, by cell key."""
    return rows(con, f"select {REPORT_CELL_COLUMNS} from cells where run_id = ? order by cell_key", [run_id])


def summary_cells(con: Connection, run_id: str) -> list[dict[str, Any]]:
    """The run's cells with their verdicts, in sweep order (mode, load point, repeat)."""
    return rows(con, """select cell_key, status, correctness, valid, output_throughput, invalid_reasons, error,
            warmup_steady, warmup_why, attempts
        from cells where run_id = ?
        order by mode, load_kind, clients nulls last, offered_rate nulls last, "repeat", cell_key""", [run_id])


def schedule_note(offered_rate: float | None, realized_rate: float | None) -> str | None:
    """What to say of a cell whose schedule realized a rate more than RATE_TOLERANCE from the one
    asked (None: within it, or not an open-loop cell)."""
    if not offered_rate or realized_rate is None:
        return None
    off = realized_rate / offered_rate - 1
    if abs(off) <= RATE_TOLERANCE:
        return None
    return f"schedule realized {realized_rate:.3g} req/s, {off:+.0%} from the {offered_rate:g} req/s offered"


def schedule_notes(con: Connection, run_id: str) -> dict[str, str]:
    """The run's cells whose realized schedule rate is off the offered one, by cell key."""
    found = rows(con, "select cell_key, offered_rate, realized_rate from cells "
                      "where run_id = ? and realized_rate is not null", [run_id])
    notes = {cell["cell_key"]: schedule_note(cell["offered_rate"], cell["realized_rate"]) for cell in found}
    return {key: note for key, note in notes.items() if note is not None}


def kv_cells(con: Connection, run_id: str) -> list[dict[str, Any]]:
    """Each cell's KV usage and misses (`cell_kv`) with its normalized and output throughput."""
    return rows(con, "select k.*, n.normalized_throughput, c.output_throughput, c.workload_name "
                     "from cell_kv k join cell_normalized n using (cell_id) join cells c using (cell_id) "
                     "where k.run_id = ?", [run_id])


def roofline_cells(con: Connection, run_id: str) -> list[dict[str, Any]]:
    """Each completed cell's fractions of its node's roofline (`cell_roofline`), in sweep order."""
    return rows(con, "select cell_key, mode, load_kind, clients, offered_rate, decode_fraction, prefill_fraction, "
                     "emulated, judged, note, decode_gbps, mem_bandwidth_gbps, prefill_gflops, matmul_peak_gflops "
                     "from cell_roofline where run_id = ? and status = 'completed' "
                     "order by mode, load_kind, clients, offered_rate, cell_key", [run_id])


def predicted_cells(con: Connection, run_id: str) -> list[dict[str, Any]]:
    """Each cell's prediction by the performance model (`cell_predictions`) with the load point it was made
    for (the cell's load kind, clients, rate, link and workload), in sweep order."""
    return rows(con, """
        select p.cell_key, p.mode, c.load_kind, c.clients, c.offered_rate, c.link, c.workload_name,
               p.output_throughput, p.ttft_p50_ms, p.tpot_p50_ms, p.throughput_ratio, p.tpot_ratio, p.bound,
               p.efficiency_source, p.figures_source
        from cell_predictions p join cells c on c.run_id = p.run_id and c.cell_key = p.cell_key
        where p.run_id = ? order by p.mode, c.load_kind, c.clients, c.offered_rate, p.cell_key""", [run_id])


def stage_costs(con: Connection, run_id: str) -> list[dict[str, Any]]:
    """Every finished run of this run's campaign up to it (the run itself included) with each stage's wall
    time summed over the stage's rows (a server start a row per server), its orchestrator CPU time, and the
    hosts the run covered (its provision stage's); the report's orchestration-cost chart."""
    return rows(con, """
        with these as (
            select r.run_id from runs r, runs this
            where this.run_id = ? and r.campaign = this.campaign and r.started_at <= this.started_at),
        hosts as (select run_id, max(hosts) as hosts from stage_timings where stage = 'provision' group by run_id)
        select t.run_id, h.hosts, t.stage, sum(t.seconds) as seconds, sum(t.orchestrator_cpu_s) as orchestrator_cpu_s
        from stage_timings t join these using (run_id) join hosts h using (run_id)
        where t.ok group by t.run_id, h.hosts, t.stage order by h.hosts, t.run_id, t.stage""", [run_id])


def saturation_cells(con: Connection, run_id: str) -> list[dict[str, Any]]:
    """The completed cells (search probes aside) with what the saturation point is computed from."""
    return rows(con, """
        select k.mode, k.clients, k.cache_miss_probability, k.kv_capacity_tokens, n.normalized_throughput,
               c.output_throughput, c.input_len, c.output_len, c.workload, c.workload_name
        from cell_kv k join cell_normalized n using (cell_id) join cells c using (cell_id)
        where k.run_id = ? and c.status = 'completed' and not coalesce(c.search_probe, false)""", [run_id])


def saturation_modes(con: Connection, run_id: str) -> list[dict[str, Any]]:
    """Each mode of the run's saturation cells as served (engine, layout, knobs) and the run's normalized
    spec: what the KV capacity the model's shape gives is computed from."""
    return rows(con, """
        select c.mode, any_value(s.engine) as engine, any_value(c.tp) as tp, any_value(c.pp) as pp,
               any_value(c.executor) as executor, any_value(c.knobs) as knobs, any_value(r.spec_normalized) as spec
        from cells c join servers s on s.run_id = c.run_id and s.mode = c.mode join runs r on r.run_id = c.run_id
        where c.run_id = ? and c.clients is not null group by c.mode""", [run_id])


def engine_cells(con: Connection, run_id: str) -> list[dict[str, Any]]:
    """The run's completed cells that produced tokens, with the engine that served them."""
    return rows(con, """
        select c.cell_id, c.mode, s.engine, c.load_kind, c.offered_rate, c.clients, c.output_throughput,
               c.request_throughput, c.ttft_p50_ms, c.ttft_p99_ms, c.tpot_p50_ms, c.tpot_p99_ms, c.valid
        from cells c join servers s on s.run_id = c.run_id and s.mode = c.mode
        where c.run_id = ? and c.status = 'completed' and c.output_throughput > 0
        order by s.engine, c.mode, c.offered_rate, c.clients""", [run_id])


def repeat_values(con: Connection, run_id: str) -> list[dict[str, Any]]:
    """Every valid measured value of a main metric (`cell_repeat_values`), in repeat order."""
    return rows(con, 'select cell_point, metric, value from cell_repeat_values where run_id = ? '
                     'order by "repeat", cell_id', [run_id])


# its servers, telemetry and faults


def gates(con: Connection, run_id: str) -> list[dict[str, Any]]:
    """Each mode's correctness gate, in the order the servers started."""
    return rows(con, "select mode, correctness, correctness_detail from servers where run_id = ? order by started_at",
                [run_id])


def node_samples(con: Connection, run_id: str) -> list[dict[str, Any]]:
    """The nodes' telemetry over the run, in time order."""
    return rows(con, "select node, mode, t_mono, t_wall, cpu_pct, mem_used_bytes, engine_rss_bytes, net "
                     "from node_samples where run_id = ? order by t_mono", [run_id])


def server_hardware(con: Connection, run_id: str) -> list[dict[str, Any]]:
    """The run's nodes with their hardware and measured roofline (bandwidth, matmul peaks), the load
    generator's own node last."""
    return rows(con, """select node, role, cpu_model, physical_cores, logical_cores, cpus, mem_total_bytes,
            mem_bandwidth_gbps, matmul_peak_gflops_bf16, matmul_peak_gflops_fp32, roofline_emulated
        from nodes where run_id = ? order by role = 'client', node""", [run_id])


def server_starts(con: Connection, run_id: str) -> list[dict[str, Any]]:
    """Each mode's server: its engine and the version its build reports, the dtype served, and its
    start-up (launch as unix time, seconds until ready), in start order."""
    return rows(con, """select s.mode, s.engine, b.engine_version, s.served_dtype, s.status, s.ready_seconds,
            epoch(s.started_at) as started_unix
        from servers s join runs r using (run_id)
        left join builds b on b.build_key = coalesce(s.build_key, r.build_key)
        where s.run_id = ? order by s.started_at nulls last, s.mode""", [run_id])


def balance_cells(con: Connection, run_id: str) -> list[dict[str, Any]]:
    """Each cell's instances (DP engines, replicas; `cell_balance`) with the cell's load kind and
    validity, in cell and instance order; none for a run whose servers had one instance each."""
    return rows(con, """select b.cell_id, b.cell_key, b.mode, c.load_kind, b.clients, b.offered_rate, b.instance,
            b.requests, b.requests_share, b.generation_tokens, b.waiting_mean, b.waiting_max, b.running_mean,
            b.kv_usage_mean, b.samples, b.instances, c.valid
        from cell_balance b join cells c using (cell_id)
        where b.run_id = ? order by b.cell_key, b.instance""", [run_id])


def rank_network_cells(con: Connection, run_id: str) -> list[dict[str, Any]]:
    """Each cell's bytes sent and received per node (`cell_rank_network`) and the ranks the node held (its
    replica, their labels), with the cell's load kind, executor and requests completed, in cell and node order."""
    return rows(con, """select n.cell_id, n.cell_key, n.mode, c.executor, c.load_kind, n.clients, n.offered_rate,
            n.node, n.role, n.tp, n.pp, n.dp, n.ep, n.engine_processes, n.bytes_sent, n.bytes_received,
            n.bytes_per_request, n.window_s, c.completed, n.replica, n.ranks
        from cell_rank_network n join cells c using (cell_id)
        where n.run_id = ? order by n.cell_key, n.node""", [run_id])


def faults(con: Connection, run_id: str) -> list[dict[str, Any]]:
    """The faults the run's cells injected."""
    return rows(con, "select cell_key, action, node, t_mono, hit from faults where run_id = ?", [run_id])


# its searches


def capacities(con: Connection, run_id: str) -> list[dict[str, Any]]:
    """The run's capacity searches, as landed, with each configuration's server command and environment."""
    return rows(con, """select c.mode, c.search_over, c.slo, c.capacity, c.upper, c.probes, c.converged, c.why,
            c.knobs, c.tpot_p50_ms, s.command, s.env
        from capacity c left join servers s on s.run_id = c.run_id and s.mode = c.mode
        where c.run_id = ? order by c.rowid""", [run_id])


def tuning(con: Connection, run_id: str) -> dict[str, Any] | None:
    """The tuner's verdict of the run (None: no tuning)."""
    found = rows(con, "select * from tuning where run_id = ?", [run_id])
    return found[0] if found else None


# its workloads' requests


def workload_length_counts(con: Connection, run_id: str) -> list[dict[str, Any]]:
    """How many measured requests of each workload had each length: one row per (workload, length,
    source, tokens) with its `requests`; counted here, so a long run's request rows never leave the
    warehouse. Served: the requests that succeeded (a failed one's partial answer is not what the
    workload asked to be served)."""
    parts = " union all ".join(
        f"select c.workload_name workload, '{length}' length, '{source}' source, r.{column} tokens, "
        f"count(*) requests from requests r join cells c using (cell_id) where c.run_id = ? "
        f"and c.workload is not null and r.{column} is not null and {MEASURED}"
        f"{' and r.error_kind is null' if source == 'served' else ''} group by all"
        for (length, source), column in WORKLOAD_LENGTHS.items())
    return rows(con, f"select * from ({parts}) order by workload, length, source, tokens",
                [run_id] * len(WORKLOAD_LENGTHS))


def session_turn_requests(con: Connection, run_id: str) -> list[dict[str, Any]]:
    """The measured requests of the run's sessions cells with their turn, the prompt length the
    server counted and their times."""
    return rows(con, f"""select c.cell_key, c.mode, c.workload_name workload, r.turn, r.input_tokens,
            r.sent_s, r.first_token_s, r.error_kind
        from requests r join cells c using (cell_id)
        where c.run_id = ? and r.turn is not null and {MEASURED}
        order by c.cell_key, r.turn""", [run_id])


def prefix_cache_cells(con: Connection, run_id: str) -> list[dict[str, Any]]:
    """The cells whose prefixes repeat (shared-prefix and sessions workloads) with their prefix-cache
    hit rate and TTFT; in such a run, also every other cell with a hit rate (the baseline of prompts
    that share nothing). A run without repeating prefixes has none."""
    return rows(con, """with shaped as (
            select *, json_extract_string(workload, '$.kind') kind from cells where run_id = ?)
        select cell_key, mode, workload_name workload, prefix_cache_hit_rate, ttft_p50_ms, ttft_p99_ms, valid,
               workload workload_block
        from shaped
        where kind in ('shared-prefix', 'sessions')
           or (prefix_cache_hit_rate is not null
               and exists (select 1 from shaped where kind in ('shared-prefix', 'sessions')))
        order by cell_key""", [run_id])
