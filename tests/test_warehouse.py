import ast
import re
import subprocess
import sys

import duckdb
import pytest

from servebench import warehouse
from servebench.campaign.loading import parse_campaign
from servebench.spec.sweep import expand
from servebench.warehouse import landing

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
    landing.insert_run(con, run_id="r1", campaign="t", spec_hash=campaign.spec_hash(), spec_text=CAMPAIGN,
                       spec_normalized=campaign.normalized(), campaign_file="t.yaml", run_dir=tmp_path)
    kwargs = dict(input_len=8, output_len=4, status="completed", error=None, started_at=None, ended_at=None,
                  result_path=None)
    landing.land_cell(con, "r1", cell, result=result_with(3), **kwargs)
    cid = landing.land_cell(con, "r1", cell, result=result_with(2), **kwargs)
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


def test_a_view_file_names_its_view(tmp_path, monkeypatch):
    (tmp_path / "cell_kv.sql").write_text("CREATE OR REPLACE VIEW something_else AS SELECT 1 AS x;\n")
    monkeypatch.setattr(warehouse, "VIEWS_DIR", tmp_path)
    with pytest.raises(warehouse.WarehouseError, match="CREATE OR REPLACE VIEW cell_kv AS"):
        warehouse.views()


SQL_TEXT = re.compile(r"\bselect\b.*\bfrom\b|\binsert\s+(or\s+\w+\s+)?into\b|\bupdate\s+\S+\s+set\b|\bdelete\s+from\b",
                      re.IGNORECASE | re.DOTALL)


def test_analysis_campaign_and_cli_read_and_write_through_the_warehouse_package():
    """Their SQL is named functions of servebench.warehouse; the one exception is the user's own
    `servebench query` (servebench/cli/__init__.py runs its text and shows an example)."""
    from servebench.paths import CHECKOUT

    offenders = []
    for folder in ("analysis", "campaign", "cli"):
        for path in sorted((CHECKOUT / "servebench" / folder).rglob("*.py")):
            if path.relative_to(CHECKOUT).as_posix() == "servebench/cli/__init__.py":
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
