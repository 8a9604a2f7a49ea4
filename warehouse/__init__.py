"""The DuckDB warehouse: connection, the baseline schema, numbered migrations, views and the default location.

A new warehouse is made from `warehouse/schema.sql`, the baseline: every table at the schema version its
first line names, which is recorded in `schema_migrations` as every migration up to it applied. Migrations
are the SQL files in `warehouse/migrations/NNN_name.sql`, append-only, applied in order on every writable
connect and recorded there too; they bring a warehouse made before (or from an older baseline) to the
latest version, which is the highest applied number. They change tables, columns and data only; the
baseline is what they make (warehouse/baseline.py writes it from them, tests/unit/test_schema_baseline.py
holds the two equal). Views are `warehouse/views/<name>.sql`, one each, made again after the migrations
on every writable connect, so a view is stated once, in its current form, and a database of any age ends
with the same views. Read-only connections refuse a database whose schema is older than this code, so a
query never runs against a half-known layout.

This module is the one place that opens a DuckDB connection (docs/warehouse.md).
"""

from __future__ import annotations

import os
import random
import re
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import duckdb

from servebench.waiting import poll

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
VIEWS_DIR = Path(__file__).parent / "views"
SCHEMA_FILE = Path(__file__).parent / "schema.sql"
_MIGRATION_NAME = re.compile(r"^(\d{3})_[a-z0-9_]+\.sql$")
_BASELINE_VERSION = re.compile(r"\bschema version (\d+)\b")
_SQL_COMMENT = re.compile(r"--[^\n]*")

Connection = duckdb.DuckDBPyConnection   # what callers hold, without importing DuckDB themselves
WAIT_VARIABLE = "SERVEBENCH_WAREHOUSE_WAIT_S"
DEFAULT_WAIT_S = 600.0


class WarehouseError(Exception):
    pass


def migrations() -> list[tuple[int, Path]]:
    found = []
    for path in sorted(MIGRATIONS_DIR.glob("*.sql")):
        match = _MIGRATION_NAME.match(path.name)
        if not match:
            raise WarehouseError(f"{path}: migration files are named NNN_lowercase_name.sql")
        found.append((int(match.group(1)), path))
    versions = [v for v, _ in found]
    if versions != list(range(1, len(versions) + 1)):
        raise WarehouseError(f"{MIGRATIONS_DIR}: migration numbers must run 001, 002, ... without gaps: {versions}")
    return found


def latest_version() -> int:
    return len(migrations())


def connect(path: str | Path, read_only: bool = False) -> duckdb.DuckDBPyConnection:
    """Open the warehouse. A writable connection first makes a new file's tables from the baseline, or brings an
    older file's up to date by the migrations, then makes the views again."""
    path = Path(path)
    if read_only:
        if not path.exists():
            raise WarehouseError(f"no warehouse at {path} (run a campaign first, or pass --warehouse)")
        con = _open(path, read_only=True)
        version = schema_version(con)
        if version < latest_version():
            con.close()
            raise WarehouseError(f"{path} has schema version {version}, this servebench needs {latest_version()}: "
                                 "open it once writable (any `servebench run`) to migrate")
        return con
    path.parent.mkdir(parents=True, exist_ok=True)
    con = _open(path, read_only=False)
    try:
        if is_empty(con):
            create_from_baseline(con)
        migrate(con)
    except BaseException:
        con.close()  # a failed migration must not keep the file locked
        raise
    return con


def _open(path: Path, read_only: bool) -> duckdb.DuckDBPyConnection:
    """Open the file, waiting (at most SERVEBENCH_WAREHOUSE_WAIT_S, default 600 s) while another
    process holds it: DuckDB lets one process write a file at a time, and two campaigns landing
    into one warehouse take turns, each connection held only while it lands one thing. The
    first wait is said on stderr, with the holder DuckDB names."""
    locked: duckdb.IOException | None = None

    def opened() -> duckdb.DuckDBPyConnection | None:
        nonlocal locked
        try:
            return duckdb.connect(str(path), read_only=read_only)
        except duckdb.IOException as exc:
            if "lock" not in str(exc).lower():
                raise
            if locked is None:
                print(f"servebench: waiting for the warehouse {path}: another process holds it "
                      f"({str(exc).split(': ', 1)[-1]})", file=sys.stderr)
            locked = exc
            return None

    # a random pause: two processes waiting for one file do not ask in step
    con = poll(opened, wait_limit_s(), interval_s=lambda: random.uniform(0.02, 0.1))
    if con is None:
        raise WarehouseError(f"{path} stayed locked by another process for {wait_limit_s():.0f} s "
                             f"(SERVEBENCH_WAREHOUSE_WAIT_S). DuckDB said: {locked}")
    return con


def wait_limit_s() -> float:
    return float(os.environ.get(WAIT_VARIABLE) or DEFAULT_WAIT_S)


def schema_version(con: duckdb.DuckDBPyConnection) -> int:
    found = con.execute(
        "select count(*) from information_schema.tables where table_name = 'schema_migrations'"
    ).fetchone()
    assert found is not None  # an aggregate without GROUP BY always returns one row
    if not found[0]:
        return 0
    version = con.execute("select coalesce(max(version), 0) from schema_migrations").fetchone()
    assert version is not None  # an aggregate without GROUP BY always returns one row
    return int(version[0])


def is_empty(con: duckdb.DuckDBPyConnection) -> bool:
    """No table yet, but perhaps an empty `schema_migrations` (a first migration that failed): a new warehouse."""
    found = con.execute("select count(*) from duckdb_tables() where schema_name = 'main' "
                        "and table_name <> 'schema_migrations'").fetchone()
    assert found is not None  # an aggregate without GROUP BY always returns one row
    return found[0] == 0 and schema_version(con) == 0


def baseline_version() -> int:
    """The schema version `schema.sql` stands for, as its first line names it."""
    if not SCHEMA_FILE.is_file():
        raise WarehouseError(f"{SCHEMA_FILE} is missing: an installed servebench carries it as package data "
                             "(pyproject.toml), a checkout in warehouse/")
    first = SCHEMA_FILE.read_text().partition("\n")[0]
    match = _BASELINE_VERSION.search(first)
    if not match:
        raise WarehouseError(f"{SCHEMA_FILE}: its first line names the schema version it stands for")
    return int(match.group(1))


def create_from_baseline(con: duckdb.DuckDBPyConnection) -> list[int]:
    """Make a new (empty) warehouse's tables from `schema.sql` in one transaction, recording every migration up
    to its version as applied; return those versions. Migrations that stop before the baseline's version (only
    a test standing in for older code has them) make the warehouse themselves: nothing is done here."""
    version = baseline_version()
    covered = [(number, path) for number, path in migrations() if number <= version]
    if len(covered) < version:
        return []
    now = datetime.now(timezone.utc)
    con.execute("begin transaction")
    try:
        con.execute("drop table if exists schema_migrations")  # empty (is_empty): schema.sql makes it
        con.execute(SCHEMA_FILE.read_text())
        con.executemany("insert into schema_migrations values (?, ?, ?)",
                        [[number, path.name, now] for number, path in covered])
        con.execute("commit")
    except Exception as exc:
        con.execute("rollback")
        raise WarehouseError(f"the baseline {SCHEMA_FILE.name} failed: {exc}") from exc
    return [number for number, _ in covered]


def scratch() -> duckdb.DuckDBPyConnection:
    """An empty database in memory: the migrations applied to it are what the baseline is written from and
    checked against (warehouse/baseline.py)."""
    return duckdb.connect(":memory:")


def migrate(con: duckdb.DuckDBPyConnection) -> list[int]:
    """Apply pending migrations, each in its own transaction; return the versions applied."""
    con.execute("create table if not exists schema_migrations "
                "(version INTEGER PRIMARY KEY, name VARCHAR NOT NULL, applied_at TIMESTAMPTZ NOT NULL)")
    current = schema_version(con)
    applied = []
    for version, path in migrations():
        if version <= current:
            continue
        con.execute("begin transaction")
        try:
            con.execute(path.read_text())
            con.execute("insert into schema_migrations values (?, ?, ?)",
                        [version, path.name, datetime.now(timezone.utc)])
            con.execute("commit")
        except Exception as exc:
            con.execute("rollback")
            raise WarehouseError(f"migration {path.name} failed: {exc}") from exc
        applied.append(version)
    apply_views(con)
    return applied


def views() -> list[tuple[str, str]]:
    """Each view's (name, SQL), every view after the views it reads. A file names its view
    (`<name>.sql` holds `CREATE OR REPLACE VIEW <name>`), so the order is read from the text."""
    texts = {path.stem: path.read_text() for path in sorted(VIEWS_DIR.glob("*.sql"))}
    for name, text in texts.items():
        if not re.search(rf"^CREATE OR REPLACE VIEW {name} AS$", text, re.MULTILINE):
            raise WarehouseError(f"{VIEWS_DIR / name}.sql: holds one view, `CREATE OR REPLACE VIEW {name} AS`")
    reads = {name: {other for other in texts if other != name
                    and re.search(rf"\b{other}\b", _SQL_COMMENT.sub("", text))} for name, text in texts.items()}
    ordered: list[str] = []
    while len(ordered) < len(texts):
        ready = [name for name in texts if name not in ordered and reads[name] <= set(ordered)]
        if not ready:
            raise WarehouseError(f"{VIEWS_DIR}: views that read each other in a circle: "
                                 f"{sorted(set(texts) - set(ordered))}")
        ordered += ready
    return [(name, texts[name]) for name in ordered]


def apply_views(con: duckdb.DuckDBPyConnection) -> None:
    """Make every view again, in one transaction: the tables they read are the migrated ones."""
    con.execute("begin transaction")
    try:
        for _, sql in views():
            con.execute(sql)
        con.execute("commit")
    except Exception as exc:
        con.execute("rollback")
        raise WarehouseError(f"the warehouse's views failed: {exc}") from exc


def rows(con: duckdb.DuckDBPyConnection, sql: str, params: list[Any] | None = None) -> list[dict[str, Any]]:
    """A query's rows as dicts keyed by column name."""
    cursor = con.execute(sql, params or [])
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row)) for row in cursor.fetchall()]
