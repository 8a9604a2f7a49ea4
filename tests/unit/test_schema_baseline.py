"""The baseline warehouse/schema.sql: what warehouse/baseline.py writes from a warehouse the migrations made, what
a new warehouse is made from, and the same schema as the migrations make, by DuckDB's own catalog."""

from __future__ import annotations

import re

import pytest

from servebench import warehouse
from servebench.warehouse import baseline

REGENERATE = "python -m servebench.warehouse.baseline"


@pytest.fixture(scope="module")
def migrated():
    con = baseline.migrated()
    yield con
    con.close()


@pytest.fixture
def fresh(tmp_path):
    con = warehouse.connect(tmp_path / "new.duckdb")
    yield con
    con.close()


def test_schema_sql_is_what_the_migrations_make(migrated):
    assert warehouse.SCHEMA_FILE.read_text() == baseline.schema_sql(migrated), \
        f"warehouse/schema.sql is stale: {REGENERATE}"
    assert warehouse.baseline_version() == warehouse.latest_version()


def test_a_new_warehouse_is_made_from_the_baseline_with_every_migration_recorded(fresh):
    recorded = fresh.execute("select version, name from schema_migrations order by version").fetchall()
    assert recorded == [(version, path.name) for version, path in warehouse.migrations()]
    assert warehouse.schema_version(fresh) == warehouse.latest_version()
    assert warehouse.migrate(fresh) == []


def test_a_new_warehouse_runs_the_baseline_not_the_migrations(tmp_path, monkeypatch):
    """The migrations' text never runs on a new file: a migration that would fail there is not executed."""
    broken = tmp_path / "migrations"
    broken.mkdir()
    for version, path in warehouse.migrations():
        (broken / path.name).write_text("select nope from nowhere;")
    monkeypatch.setattr(warehouse, "MIGRATIONS_DIR", broken)
    con = warehouse.connect(tmp_path / "new.duckdb")
    try:
        assert warehouse.schema_version(con) == warehouse.latest_version()
        assert con.execute("select count(*) from cells").fetchone() == (0,)
    finally:
        con.close()


def test_a_warehouse_from_the_baseline_equals_one_made_by_the_migrations(migrated, fresh):
    """Tables, columns (order, name, type, nullability, default), constraints, the comments on tables and
    columns, and views with their columns and comments, as duckdb_tables(), duckdb_columns(),
    duckdb_constraints() and duckdb_views() say them."""
    expected, found = baseline.catalog_state(migrated), baseline.catalog_state(fresh)
    assert baseline.differences(expected, found) == []
    assert {"table", "column", "constraint", "view"} <= set(expected)
    assert {"runs", "cells", "schema_migrations"} <= set(expected["table"])
    assert {"latest_runs", "latest_cells"} <= set(expected["view"])
    assert ("annotations", "annotations_action_check") in expected["constraint"]


# what is planted in a migrated warehouse, and what the difference found names
PLANTED = {
    "a column added": ("ALTER TABLE cells ADD COLUMN rate DOUBLE", "column cells.rate"),
    "a column's type": ("ALTER TABLE cells ALTER COLUMN seed TYPE INTEGER", "column cells.seed"),
    "a column's nullability": ("ALTER TABLE runs ALTER COLUMN campaign DROP NOT NULL", "column runs.campaign"),
    "a column's default": ("ALTER TABLE nodes ALTER COLUMN role SET DEFAULT 'client'", "column nodes.role"),
    "a column's comment": ("COMMENT ON COLUMN cells.offered_rate IS 'planted'", "column cells.offered_rate"),
    "a table's comment": ("COMMENT ON TABLE runs IS 'planted'", "table runs"),
    "the columns' order": ("ALTER TABLE cells DROP COLUMN dp; ALTER TABLE cells ADD COLUMN dp INTEGER; "
                           "COMMENT ON COLUMN cells.dp IS 'data-parallel size: engines of tp x pp workers behind the "
                           "mode''s one API server (1: none)'", "column cells.dp"),
    "a constraint": ("ALTER TABLE faults ADD PRIMARY KEY (run_id, cell_key, node, at_s)", "constraint faults."),
    "a table added": ("CREATE TABLE planted (a INTEGER)", "table planted"),
    "a view's columns": ("CREATE OR REPLACE VIEW latest_runs AS SELECT run_id, campaign FROM runs",
                         "column latest_runs.cells"),
    "a view's comment": ("COMMENT ON VIEW latest_cells IS 'planted'", "view latest_cells"),
    "a view column's comment": ("COMMENT ON COLUMN latest_cells.offered_rate IS 'planted'",
                                "column latest_cells.offered_rate"),
}


@pytest.mark.parametrize("planted", sorted(PLANTED))
def test_the_comparison_finds_a_planted_difference(migrated, planted):
    sql, named = PLANTED[planted]
    expected = baseline.catalog_state(migrated)
    migrated.execute("begin transaction")
    try:
        migrated.execute(sql)
        found = baseline.differences(expected, baseline.catalog_state(migrated))
    finally:
        migrated.execute("rollback")
    assert any(line.startswith(named) for line in found), f"{planted}: {found}"
    assert baseline.differences(expected, baseline.catalog_state(migrated)) == []   # rolled back


def test_the_tables_come_in_reading_order_each_column_with_its_comment(migrated):
    text = warehouse.SCHEMA_FILE.read_text()
    created = re.findall(r"^CREATE TABLE (\w+) \($", text, re.MULTILINE)
    assert created[:6] == ["runs", "nodes", "builds", "servers", "cells", "requests"]
    assert created == [name for name in baseline.TABLE_ORDER if name in created]
    assert sorted(created) == sorted(baseline.catalog_state(migrated)["table"])
    for table in created:
        body = text.split(f"CREATE TABLE {table} (\n", 1)[1].split("\n);", 1)[0]
        comments = dict(migrated.execute("select column_name, comment from duckdb_columns() where table_name = ?",
                                         [table]).fetchall())
        for line in body.splitlines():
            name = line.split()[0].strip('"')
            if name in comments:
                assert line.rstrip().endswith(f"-- {comments[name]}"), line
                assert f"COMMENT ON COLUMN {table}." in text


def test_a_table_without_a_place_in_the_reading_order_is_refused(migrated):
    migrated.execute("begin transaction")
    try:
        migrated.execute("CREATE TABLE planted (a INTEGER)")
        with pytest.raises(warehouse.WarehouseError, match="TABLE_ORDER: \\['planted'\\]"):
            baseline.schema_sql(migrated)
    finally:
        migrated.execute("rollback")
