"""The baseline `warehouse/schema.sql`, written from the catalog of a warehouse the migrations made, and the
comparison that holds the two equal.

A new warehouse is made from the baseline (`connect`, `create_from_baseline`); an older one is brought up to
date by the migrations. Both must end alike, so the baseline is not written by hand: `schema_sql` reads
DuckDB's catalog (duckdb_tables(), duckdb_columns(), duckdb_constraints()) of a scratch database after every
migration and writes each table in the order a reader meets them (TABLE_ORDER), each column with its type,
constraints and comment (inline, and as the COMMENT ON statements `servebench tables` reads).
`python -m servebench.warehouse.baseline` writes the file again after a new migration;
tests/unit/test_schema_baseline.py checks that the file is what this writes and that a warehouse made from it has
the catalog (`catalog_state`) of one made by the migrations.
"""

from __future__ import annotations

import re
import sys
import textwrap
from typing import Any

from . import SCHEMA_FILE, Connection, WarehouseError, latest_version, migrate, scratch

# every table, in the order a reader meets them: a run, where it ran, what it ran, each mode's server, its cells
# and their requests, then what a cell was measured with and what a run and its history derive; the
# bookkeeping of the migrations last
TABLE_ORDER = (
    "runs", "nodes", "builds", "servers", "cells", "requests",
    "cell_attempts", "node_samples", "server_samples", "server_ranks", "faults",
    "capacity", "tuning", "cell_intervals", "cell_predictions", "stage_timings", "regressions", "annotations",
    "bisect_steps",
    "schema_migrations",
)
# DuckDB's names, written as a reader writes them
TYPE_NAMES = {"TIMESTAMP WITH TIME ZONE": "TIMESTAMPTZ"}
PLAIN_NAME = re.compile(r"^[a-z_][a-z0-9_]*$")
HEADER = """\
-- servebench warehouse, schema version {version}: the tables as migrations 001 to {version:03d} leave them.
-- A new warehouse is made from this file (servebench.warehouse.connect records every migration up to {version:03d}
-- as applied); an older one is brought here by the migrations themselves (warehouse/migrations/). The views are
-- not here: warehouse/views/, made again on every writable open. Written by `python -m servebench.warehouse.baseline`
-- from a warehouse the migrations made (tests/unit/test_schema_baseline.py checks that the two agree): a change is a
-- new migration, then this file written again.
"""


def migrated() -> Connection:
    """A scratch database with every migration applied (and the views made)."""
    con = scratch()
    migrate(con)
    return con


def schema_sql(con: Connection) -> str:
    """The baseline's text for the tables of `con` (a migrated warehouse)."""
    found = [name for (name,) in con.execute(
        "select table_name from duckdb_tables() where schema_name = 'main' and not internal and not temporary "
        "order by table_name").fetchall()]
    unplaced = sorted(set(found) - set(TABLE_ORDER))
    if unplaced:
        raise WarehouseError(f"tables without a place in warehouse/baseline.py's TABLE_ORDER: {unplaced}")
    keywords = {word for (word,) in con.execute(
        "select keyword_name from duckdb_keywords() where keyword_category <> 'unreserved'").fetchall()}
    parts = [HEADER.format(version=latest_version())]
    for table in (name for name in TABLE_ORDER if name in found):
        parts.append(_table_sql(con, table, keywords))
    return "\n".join(parts)


def _name(name: str, keywords: set[str]) -> str:
    return name if PLAIN_NAME.match(name) and name not in keywords else '"' + name.replace('"', '""') + '"'


def _text(comment: str) -> str:
    return "'" + comment.replace("'", "''") + "'"


def _table_sql(con: Connection, table: str, keywords: set[str]) -> str:
    """One table: its comment, CREATE TABLE with a line per column (comment inline), its COMMENT ON statements."""
    row = con.execute("select comment from duckdb_tables() where schema_name = 'main' and table_name = ?",
                      [table]).fetchone()
    comment = row[0] if row else None
    columns = con.execute(
        "select column_name, data_type, column_default, comment from duckdb_columns() "
        "where schema_name = 'main' and table_name = ? order by column_index", [table]).fetchall()
    not_null: set[str] = set()
    checks: dict[str, str] = {}
    keys: list[list[str]] = []
    for kind, names, expression in con.execute(
            "select constraint_type, constraint_column_names, expression from duckdb_constraints() "
            "where schema_name = 'main' and table_name = ? order by constraint_index", [table]).fetchall():
        if kind == "NOT NULL":
            not_null.add(names[0])
        elif kind == "PRIMARY KEY":
            keys.append(list(names))
        elif kind == "CHECK" and len(names) == 1 and names[0] not in checks:
            checks[names[0]] = expression
        else:
            raise WarehouseError(f"{table}: a {kind} constraint on {list(names)}: warehouse/baseline.py writes "
                                 "NOT NULL, one-column CHECK and PRIMARY KEY constraints only")
    inline_key = keys[0][0] if len(keys) == 1 and len(keys[0]) == 1 else None
    width = max(len(_name(name, keywords)) for name, *_ in columns)
    lines = []
    for name, data_type, default, _ in columns:
        words = [_name(name, keywords).ljust(width), TYPE_NAMES.get(data_type, data_type)]
        if name == inline_key:
            words.append("PRIMARY KEY")
        elif name in not_null:
            words.append("NOT NULL")
        if default is not None:
            words.append(f"DEFAULT {default}")
        if name in checks:
            words.append(f"CHECK {_parenthesized(checks[name])}")
        lines.append(" ".join(words))
    if inline_key is None:
        lines += [f"PRIMARY KEY ({', '.join(_name(n, keywords) for n in key)})" for key in keys]
    notes = [column_comment or "" for *_, column_comment in columns] + [""] * (len(lines) - len(columns))
    ends = [line + ("," if index < len(lines) - 1 else "") for index, line in enumerate(lines)]
    span = max(len(end) for end, note in zip(ends, notes) if note) if any(notes) else 0
    body = "\n".join(f"    {end.ljust(span)}  -- {' '.join(note.split())}" if note else f"    {end}"
                     for end, note in zip(ends, notes))
    said = [f"COMMENT ON TABLE {_name(table, keywords)} IS {_text(comment)};"] if comment else []
    said += [f"COMMENT ON COLUMN {_name(table, keywords)}.{_name(name, keywords)} IS {_text(column_comment)};"
             for name, _, _, column_comment in columns if column_comment]
    heading = textwrap.fill(comment, width=110, initial_indent="-- ", subsequent_indent="-- ") if comment else ""
    return "\n".join(part for part in (heading, f"CREATE TABLE {_name(table, keywords)} (\n{body}\n);",
                                       "\n".join(said)) if part) + "\n"


def _parenthesized(expression: str) -> str:
    """A CHECK's expression in one pair of parentheses (DuckDB's catalog keeps it in its own already)."""
    if expression.startswith("(") and expression.endswith(")"):
        depth = 0
        for index, char in enumerate(expression):
            depth += {"(": 1, ")": -1}.get(char, 0)
            if depth == 0 and index < len(expression) - 1:
                break
        else:
            return expression
    return f"({expression})"


# the comparison of two warehouses' catalogs


def catalog_state(con: Connection) -> dict[str, dict[Any, Any]]:
    """What a warehouse's schema is, as DuckDB's catalog says it: tables and their comments; columns of tables and
    views (position, type, nullability, default, comment); constraints; views (comment and text)."""
    return {
        "table": {name: comment for name, comment in con.execute(
            "select table_name, comment from duckdb_tables() where schema_name = 'main' and not internal "
            "and not temporary").fetchall()},
        "column": {(table, name): (index, data_type, nullable, default, comment)
                   for table, name, index, data_type, nullable, default, comment in con.execute(
                       "select table_name, column_name, column_index, data_type, is_nullable, column_default, "
                       "comment from duckdb_columns() where schema_name = 'main' and not internal").fetchall()},
        "constraint": {(table, name): (kind, text, expression, tuple(columns))
                       for table, name, kind, text, expression, columns in con.execute(
                           "select table_name, constraint_name, constraint_type, constraint_text, expression, "
                           "constraint_column_names from duckdb_constraints() where schema_name = 'main'").fetchall()},
        "view": {name: (comment, sql) for name, comment, sql in con.execute(
            "select view_name, comment, sql from duckdb_views() where schema_name = 'main' and not internal "
            "and not temporary").fetchall()},
    }


def differences(expected: dict[str, dict[Any, Any]], found: dict[str, dict[Any, Any]],
                sides: tuple[str, str] = ("migrated", "baseline")) -> list[str]:
    """Every way two `catalog_state`s differ, one line each (none: the same schema)."""
    lines = []
    for kind in sorted(set(expected) | set(found)):
        ours, theirs = expected.get(kind, {}), found.get(kind, {})
        for key in sorted(set(ours) | set(theirs), key=repr):
            what = ".".join(key) if isinstance(key, tuple) else key
            if key not in theirs:
                lines.append(f"{kind} {what}: only in the {sides[0]} warehouse")
            elif key not in ours:
                lines.append(f"{kind} {what}: only in the {sides[1]} warehouse")
            elif ours[key] != theirs[key]:
                lines.append(f"{kind} {what}: {ours[key]!r} ({sides[0]}) against {theirs[key]!r} ({sides[1]})")
    return lines


def main() -> int:
    con = migrated()
    try:
        text = schema_sql(con)
    finally:
        con.close()
    SCHEMA_FILE.write_text(text)
    print(f"wrote {SCHEMA_FILE} (schema version {latest_version()})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
