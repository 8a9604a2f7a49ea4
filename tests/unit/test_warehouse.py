import ast
import re
import subprocess
import sys

import duckdb
import pytest

from servebench import warehouse
from servebench.campaign.loading import parse_campaign
from servebench.config.sweep import expand
from servebench.warehouse import landing, reads
from tests.support.instance_runs import land_instances_run

CAMPAIGN = """
name: t
provider: {kind: local, nodes: [{name: n0, cpus: "0-1"}]}
model: {generate: tiny-llama}
modes: [{name: tp1}]
load: {clients: [1, 2], requests: 2}
"""


@pytest.fixture
def db(tmp_path):
    return tmp_path / "w.duckdb"


def test_migrations_apply_once_and_record_the_version(db):
    con = warehouse.connect(db)
    assert warehouse.schema_version(con) == warehouse.latest_version() >= 1
    assert warehouse.migrate(con) == []  # nothing pending the second time
    tables = {row[0] for row in con.execute("show tables").fetchall()}
    assert {"runs", "cells", "requests", "builds", "nodes", "servers", "schema_migrations"} <= tables
    con.close()


def test_read_only_connection_refuses_writes_and_missing_files(db, tmp_path):
    warehouse.connect(db).close()
    con = warehouse.connect(db, read_only=True)
    with pytest.raises(duckdb.Error):
        con.execute("delete from runs")
    con.close()
    with pytest.raises(warehouse.WarehouseError, match="no warehouse"):
        warehouse.connect(tmp_path / "absent.duckdb", read_only=True)


def test_env_var_overrides_default_path(monkeypatch, tmp_path):
    from servebench.paths import CHECKOUT, default_warehouse

    monkeypatch.delenv("SERVEBENCH_WAREHOUSE", raising=False)
    assert default_warehouse() == CHECKOUT / "runs" / "servebench.duckdb"   # beside the runs, not in warehouse/
    monkeypatch.setenv("SERVEBENCH_WAREHOUSE", str(tmp_path / "x.duckdb"))
    assert default_warehouse() == tmp_path / "x.duckdb"


def result_with(n: int) -> dict:
    requests = [dict(index=i, warmup=False, client=0, scheduled_s=i, sent_s=i, first_token_s=i + 0.1,
                     last_token_s=i + 0.5, input_tokens=8, output_tokens=4, chunks=4,
                     chunk_times=[i + 0.1, i + 0.5], chunk_tokens=[2, 2], token_source="usage", http_status=200,
                     error_kind=None, error=None) for i in range(n)]
    return {"t0": {"monotonic": 1.0}, "summary": {"completed": n, "failed": 0}, "requests": requests}


def test_landing_a_cell_twice_replaces_its_rows(db, tmp_path):
    campaign = parse_campaign(CAMPAIGN)
    cell = expand(campaign)[0]
    con = warehouse.connect(db)
    landing.insert_run(con, "r1", landing.RunRecord(
        campaign="t", spec_hash=campaign.spec_hash(), spec_text=CAMPAIGN, spec_normalized=campaign.normalized(),
        campaign_file="t.yaml", run_dir=tmp_path))
    kwargs = dict(cell=cell, input_len=8, output_len=4, status="completed", error=None, started_at=None,
                  ended_at=None)
    landing.land_cell(con, "r1", landing.CellRecord(**kwargs, measured=landing.CellMeasurement(result=result_with(3))))
    cid = landing.land_cell(con, "r1", landing.CellRecord(**kwargs,
                                                          measured=landing.CellMeasurement(result=result_with(2))))
    assert cid == "r1/tp1.c1.r0"
    assert con.execute("select count(*) from requests where cell_id = ?", [cid]).fetchone()[0] == 2
    assert con.execute("select count(*) from cells").fetchone()[0] == 1
    con.close()


def test_a_failed_migration_releases_the_file(db, tmp_path, monkeypatch):
    warehouse.connect(db).close()
    bad = tmp_path / "migrations"
    bad.mkdir()
    for version, path in warehouse.migrations():
        (bad / path.name).write_text(path.read_text())
    (bad / f"{warehouse.latest_version() + 1:03d}_broken.sql").write_text("create view v as select nope from cells;")
    monkeypatch.setattr(warehouse, "MIGRATIONS_DIR", bad)
    with pytest.raises(warehouse.WarehouseError, match="broken.sql failed") as caught:
        warehouse.connect(db)
    # another process (as a later landing or `servebench query` would be) can open the file
    # while the failure, and every frame it references, is still alive here
    other = subprocess.run([sys.executable, "-c", f"import duckdb; duckdb.connect({str(db)!r}).close()"],
                           capture_output=True, text=True)
    assert other.returncode == 0, other.stderr
    assert caught.value is not None


def test_a_ctrl_c_during_a_landing_is_the_users_interrupt(db):
    """DuckDB turns SIGINT during a query into its own InterruptException; a landing raises it as
    KeyboardInterrupt so the run ends `interrupted` instead of counting the cell as failed."""
    import threading

    from servebench.warehouse.store import session

    with pytest.raises(KeyboardInterrupt, match="during a warehouse write"):
        with session(str(db)) as con:
            threading.Timer(0.3, con.interrupt).start()
            con.execute("select count(*) from range(1000000000000) a where a.range % 7 = 3").fetchall()
    with session(str(db)) as con:  # the file is usable afterwards
        assert con.execute("select 1").fetchone() == (1,)


def view_columns(con) -> dict[str, list[tuple]]:
    """Every view of the database with its columns and their types."""
    names = [name for (name,) in con.execute("select view_name from duckdb_views() where not internal").fetchall()]
    return {name: con.execute(f"describe {name}").fetchall() for name in sorted(names)}


def test_views_are_stated_once_in_their_own_files_and_made_after_the_views_they_read():
    names = [name for name, _ in warehouse.views()]
    assert sorted(names) == sorted(p.stem for p in warehouse.VIEWS_DIR.glob("*.sql"))
    assert names.index("cell_metrics") < names.index("series_nights")
    assert names.index("cell_repeat_values") < names.index("cell_dispersion")
    declares_a_view = re.compile(r"^\s*create\s+(or\s+replace\s+)?view\b", re.IGNORECASE | re.MULTILINE)
    assert [path.name for _, path in warehouse.migrations() if declares_a_view.search(path.read_text())] == []


def test_a_database_of_older_code_migrates_to_the_same_views(db, tmp_path, monkeypatch):
    """Older code stated views in its migrations (at an older version: an older form, or fewer):
    migrating it ends with the views of warehouse/views/, as a new database has them."""
    fresh = warehouse.connect(tmp_path / "fresh.duckdb")
    expected = view_columns(fresh)
    fresh.close()
    older = tmp_path / "older"
    older.mkdir()
    for version, path in warehouse.migrations()[:12]:
        (older / path.name).write_text(path.read_text())
    monkeypatch.setattr(warehouse, "MIGRATIONS_DIR", older)
    monkeypatch.setattr(warehouse, "apply_views", lambda con: None)   # older code: views came with migrations
    con = warehouse.connect(db)
    con.execute("create view cell_kv as select run_id, cell_id, completed from cells")
    con.execute("create view cell_metrics as select run_id, series_id, cell_id from cells")
    con.close()
    monkeypatch.undo()
    con = warehouse.connect(db)
    assert warehouse.schema_version(con) == warehouse.latest_version()
    assert view_columns(con) == expected
    assert {"cell_kv", "cell_metrics", "series_nights", "cell_dispersion"} <= set(expected)
    con.close()


def test_an_older_warehouse_keeps_one_rate_per_meaning(db, tmp_path, monkeypatch):
    """Migration 032 drops cells.rate and cells.achieved_rate: a cell landed without a measurement keeps its
    offered rate (it had it in `rate` alone), one with both keeps offered_rate, and a view of older code that
    read the dropped column is made again from warehouse/views/."""
    older = tmp_path / "older"
    older.mkdir()
    for version, path in warehouse.migrations():
        if version < 32:  # the warehouse as it was before 032_one_rate_per_meaning.sql
            (older / path.name).write_text(path.read_text())
    monkeypatch.setattr(warehouse, "MIGRATIONS_DIR", older)
    con = warehouse.connect(db)
    for key, rate, offered, achieved in (("tp1.rate8.r0", 8.0, None, None), ("tp1.rate2.r0", 2.0, 2.0, 1.9),
                                         ("tp1.c4.r0", None, None, 3.5)):
        con.execute("insert into cells (run_id, cell_id, cell_key, mode, tp, pp, executor, load_kind, rate, "
                    "clients, repeat, input_len, output_len, seed, status, offered_rate, achieved_rate) "
                    "values ('r', ?, ?, 'tp1', 1, 1, 'mp', ?, ?, ?, 0, 8, 4, 0, 'completed', ?, ?)",
                    [f"r/{key}", key, "closed" if rate is None else "open", rate, None if rate else 4, offered,
                     achieved])
    con.execute("create or replace view cell_normalized as select run_id, cell_id, rate, achieved_rate from cells")
    con.close()
    monkeypatch.undo()
    con = warehouse.connect(db)
    try:
        rates = con.execute("select cell_key, offered_rate from cells order by cell_key").fetchall()
        columns = {name for (name,) in con.execute("select column_name from duckdb_columns() "
                                                   "where table_name = 'cells'").fetchall()}
        normalized = con.execute("select cell_key, offered_rate from cell_normalized order by cell_key").fetchall()
        indexes = con.execute("select count(*) from duckdb_indexes()").fetchone()
    finally:
        con.close()
    assert rates == normalized == [("tp1.c4.r0", None), ("tp1.rate2.r0", 2.0), ("tp1.rate8.r0", 8.0)]
    assert {"offered_rate", "realized_rate", "request_throughput"} <= columns
    assert not {"rate", "achieved_rate"} & columns
    assert indexes == (0,)   # DuckDB drops no column of a table that has an index: the warehouse has none


def test_an_open_loop_series_keeps_its_id_read_from_offered_rate():
    """A series id hashes its identity's values in IDENTITY_FIELDS' order: read from offered_rate, an open-loop
    point's id is the one its nights had when the same value was read from the dropped `rate`."""
    import hashlib
    import json

    from servebench.analysis.regression.series import series_id

    identity = dict(campaign="c", mode="tp1", tp=1, pp=1, executor="mp", load_kind="open", offered_rate=8.0,
                    clients=None, input_len=32, output_len=16)
    as_before = ["c", "tp1", 1, 1, "mp", "open", 8.0, None, 32, 16, "fp"]
    assert series_id(identity, "fp") == hashlib.sha256(json.dumps(as_before).encode()).hexdigest()[:16]


def test_a_view_file_names_its_view(tmp_path, monkeypatch):
    (tmp_path / "cell_kv.sql").write_text("CREATE OR REPLACE VIEW something_else AS SELECT 1 AS x;\n")
    monkeypatch.setattr(warehouse, "VIEWS_DIR", tmp_path)
    with pytest.raises(warehouse.WarehouseError, match="CREATE OR REPLACE VIEW cell_kv AS"):
        warehouse.views()


SQL_TEXT = re.compile(r"\bselect\b.*\bfrom\b|\binsert\s+(or\s+\w+\s+)?into\b|\bupdate\s+\S+\s+set\b|\bdelete\s+from\b",
                      re.IGNORECASE | re.DOTALL)


def test_analysis_campaign_and_cli_read_and_write_through_the_warehouse_package():
    """Their SQL is named functions of servebench.warehouse; the exceptions are the user's own
    `servebench query` (servebench/cli/query.py runs its text) and the end-of-run summary, which
    catches duckdb's errors and shows an example query (servebench/cli/campaign_flow.py)."""
    from servebench.paths import CHECKOUT

    offenders = []
    for folder in ("analysis", "campaign", "cli"):
        for path in sorted((CHECKOUT / "servebench" / folder).rglob("*.py")):
            if path.relative_to(CHECKOUT).as_posix() in ("servebench/cli/query.py", "servebench/cli/campaign_flow.py"):
                continue
            tree = ast.parse(path.read_text())
            docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                          if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef)) and node.body
                          and isinstance(node.body[0], ast.Expr)}
            for node in ast.walk(tree):
                speaks = (isinstance(node, ast.Constant) and isinstance(node.value, str)
                          and id(node) not in docstrings and SQL_TEXT.search(node.value)) or \
                    (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                     and node.func.attr in ("execute", "executemany", "fetchone", "fetchall")) or \
                    (isinstance(node, ast.Import) and any(a.name == "duckdb" for a in node.names))
                if speaks:
                    offenders.append(f"{path.relative_to(CHECKOUT)}:{node.lineno}")
    assert offenders == []


def test_every_table_view_and_column_says_what_it_holds(db):
    """`servebench tables` prints these comments: a migration adding a table or a column, or a view file
    adding a column, comments it (migrations/025_comments.sql, the view files)."""
    con = warehouse.connect(db)
    bare = con.execute("""
        select table_name from duckdb_tables() where schema_name = 'main' and comment is null
        union all select view_name from duckdb_views() where schema_name = 'main' and not internal and comment is null
        union all select table_name || '.' || column_name from duckdb_columns()
            where schema_name = 'main' and not internal and coalesce(comment, '') = ''""").fetchall()
    con.close()
    assert bare == []


def test_a_view_made_again_keeps_its_comments(db):
    warehouse.connect(db).close()
    con = warehouse.connect(db)   # the second writable open makes every view again
    comments = dict(con.execute("select column_name, comment from duckdb_columns() "
                                "where table_name = 'cell_kv'").fetchall())
    view = con.execute("select comment from duckdb_views() where view_name = 'measured_requests'").fetchone()
    con.close()
    assert comments["cache_miss_probability"].startswith("fraction of decode attempts that found no room")
    assert view is not None and "after warm-up" in view[0]


def recorded_cell(seed: int, warmup: int, count: int) -> dict:
    """A load result as the load generator makes it (its own summary and percentiles): latencies drawn
    at random, the warm-up requests slow, as a cold server's are."""
    import random
    from types import SimpleNamespace

    from servebench.load.metrics import summarize
    from servebench.load.records import RequestRecord

    draw = random.Random(seed)
    records = []
    for index in range(count):
        sent = index * 0.25
        first = sent + draw.uniform(0.005, 0.02) + (0.5 if index < warmup else 0.0)
        tokens = draw.randint(2, 9)
        last = first + (tokens - 1) * draw.uniform(0.004, 0.012)
        failed = index == count - 3
        records.append(RequestRecord(index=index, warmup=index < warmup, client=0, scheduled_s=sent - 0.001,
                                     sent_s=sent, first_token_s=first, last_token_s=last, first_text_s=first,
                                     input_tokens=8, output_tokens=tokens, chunks=tokens,
                                     chunk_times=[first, last], chunk_tokens=[1, tokens - 1], token_source="usage",
                                     http_status=500 if failed else 200, error_kind="http" if failed else None))
    config = SimpleNamespace(rate=4.0, slos={}, max_schedule_lag_ms=50.0, min_achieved_fraction=0.9,
                             max_client_cpu=0.9)
    return {"t0": {"monotonic": 1.0}, "summary": summarize(records, config),
            "requests": [record.to_dict() for record in records]}


def test_a_cells_percentiles_come_back_from_its_measured_requests(db, tmp_path):
    """The cell's own p50/p99 (the load generator's, linear interpolation) are quantile_cont over
    measured_requests; over all of `requests` the warm-up makes them another number."""
    campaign = parse_campaign(CAMPAIGN)
    cell = expand(campaign)[0]
    con = warehouse.connect(db)
    landing.insert_run(con, "r1", landing.RunRecord(
        campaign="t", spec_hash=campaign.spec_hash(), spec_text=CAMPAIGN, spec_normalized=campaign.normalized(),
        campaign_file="t.yaml", run_dir=tmp_path))
    landing.land_cell(con, "r1", landing.CellRecord(cell=cell, input_len=8, output_len=4, status="completed",
                      measured=landing.CellMeasurement(result=recorded_cell(seed=7, warmup=3, count=40))))
    figures = con.execute("""
        select c.ttft_p99_ms, quantile_cont(m.ttft_ms, 0.99), c.ttft_p50_ms, quantile_cont(m.ttft_ms, 0.5),
               c.tpot_p99_ms, quantile_cont(m.tpot_ms, 0.99), c.e2el_p99_ms, quantile_cont(m.e2el_ms, 0.99),
               c.completed, count(*) filter (where m.completed)
        from cells c join measured_requests m using (cell_id) group by all""").fetchone()
    with_warmup = con.execute("select quantile_cont((first_token_s - sent_s) * 1000, 0.99) from requests "
                              "where error_kind is null").fetchone()
    con.close()
    assert figures is not None and with_warmup is not None
    for cell_figure, recomputed in zip(figures[0::2], figures[1::2]):
        assert recomputed == pytest.approx(cell_figure, rel=1e-9)
    assert with_warmup[0] > 2 * figures[0]


def test_a_cell_lands_its_offered_and_realized_schedule_rate(db, tmp_path):
    from servebench.warehouse import reads

    campaign = parse_campaign(CAMPAIGN)
    cell = expand(campaign)[0]
    result = result_with(3)
    result["summary"].update(offered_rate=8.0, scheduled_rate=11.0, achieved_rate=10.9)
    con = warehouse.connect(db)
    landing.insert_run(con, "r1", landing.RunRecord(
        campaign="t", spec_hash=campaign.spec_hash(), spec_text=CAMPAIGN, spec_normalized=campaign.normalized(),
        campaign_file="t.yaml", run_dir=tmp_path))
    landing.land_cell(con, "r1", landing.CellRecord(cell=cell, input_len=8, output_len=4, status="completed",
                      measured=landing.CellMeasurement(result=result)))
    rates = con.execute("select offered_rate, realized_rate, request_throughput from cells").fetchone()
    notes = reads.schedule_notes(con, "r1")
    con.close()
    assert rates == (8.0, 11.0, None)
    assert notes == {"tp1.c1.r0": "schedule realized 11 req/s, +38% from the 8 req/s offered"}
    assert reads.schedule_note(8.0, 8.7) is None and reads.schedule_note(None, 3.0) is None
    assert reads.schedule_note(2.0, 1.7) == "schedule realized 1.7 req/s, -15% from the 2 req/s offered"


# per instance and per node: cell_balance, cell_rank_network (the run: tests/support)

def test_cell_balance_has_each_instances_requests_and_queue_over_the_cell(db, tmp_path):
    from servebench.warehouse import reads

    con = warehouse.connect(db)
    land_instances_run(con, tmp_path)
    balance = {row["instance"]: row for row in reads.balance_cells(con, "r1")}
    assert set(balance) == {"dp0", "dp1"}
    dp0, dp1 = balance["dp0"], balance["dp1"]
    # the counter window: the sample at t=10 (at t0) to the one at t=13 (first at or after 12.5)
    assert (dp0["requests"], dp1["requests"]) == (3.0, 1.0)
    assert (dp0["requests_share"], dp1["requests_share"]) == (0.75, 0.25)
    assert (dp0["generation_tokens"], dp1["generation_tokens"]) == (12.0, 4.0)
    # gauges inside the cell: the samples at t=10, 11, 12
    assert (dp1["waiting_mean"], dp1["waiting_max"], dp0["waiting_max"]) == (pytest.approx(2 / 3), 2.0, 0.0)
    assert (dp0["samples"], dp0["instances"], dp0["kv_usage_mean"]) == (3, 2, pytest.approx(0.2))
    landed = con.execute("select requests_total, instances->'$.dp1'->>'requests_total' from server_samples "
                         "where t_mono = 9").fetchone()
    assert landed == (13.0, "4")
    con.close()


def test_cell_rank_network_counts_each_nodes_bytes_but_loopback_over_the_cell(db, tmp_path):
    from servebench.warehouse import reads

    con = warehouse.connect(db)
    land_instances_run(con, tmp_path)
    network = {row["node"]: row for row in reads.rank_network_cells(con, "r1")}
    assert set(network) == {"n0", "n1"}
    # node samples at 10.0 (t0) and 12.5 (the last token): a window of 2.5 s
    assert network["n0"]["window_s"] == 2.5
    assert (network["n0"]["bytes_sent"], network["n0"]["bytes_received"]) == (2500.0, 0.0)   # lo left out
    assert (network["n1"]["bytes_sent"], network["n1"]["bytes_received"]) == (0.0, 800 * 2.5)  # eth0 + eth1
    assert network["n1"]["bytes_per_request"] == 2000.0 / 4
    assert (network["n0"]["dp"], network["n0"]["engine_processes"], network["n0"]["executor"]) == (2, 3, "mp-multinode")
    con.close()


def test_latest_runs_and_cells_skip_a_run_in_progress(tmp_path):
    from tests.support.synthetic_runs import synthetic_warehouse

    db = tmp_path / "w.duckdb"
    synthetic_warehouse(db, tmp_path)
    con = warehouse.connect(db)
    landing.insert_run(con, "r2", landing.RunRecord(
        campaign="synthetic", spec_hash="h", spec_text="", spec_normalized={}, campaign_file="synthetic.yaml",
        run_dir=tmp_path))     # started last, still landing
    assert con.execute("select run_id, status, cells, cells_valid from latest_runs").fetchall() == [
        ("r1", "completed", 50, 50)]
    assert con.execute("select distinct run_id from latest_cells").fetchall() == [("r1",)]
    assert reads.latest_run_id(con) == reads.latest_run_id(con, "synthetic") == "r1"
    landing.update_run(con, "r2", landing.RunUpdate(status="partial", ended_at=landing.now()))
    assert reads.latest_run_id(con, "synthetic") == "r2"
    assert con.execute("select count(*) from latest_cells").fetchone() == (0,)
    con.close()


def test_a_nodes_host_key_lands_where_its_provider_read_one(tmp_path):
    """An SSH node's inventory carries the host key it was reached by; other nodes land NULL there."""
    facts = {name: None for name in landing.NODE_FACTS} | {"hostname": "h1", "cpus": [0], "isa_flags": []}
    con = warehouse.connect(tmp_path / "w.duckdb")
    try:
        landing.land_node(con, "r1", "h1", "198.18.0.2", facts | {"host_key": "ED25519 SHA256:abc"})
        landing.land_node(con, "r1", "local", "127.0.0.1", facts)
        keys = dict(con.execute("select node, host_key from nodes").fetchall())
    finally:
        con.close()
    assert keys == {"h1": "ED25519 SHA256:abc", "local": None}
