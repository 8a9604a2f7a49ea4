"""What the warehouse holds, as DuckDB's catalog says it: every table and view with its columns, types
and comments (a new warehouse's tables are commented by warehouse/schema.sql, an older one's by the
migrations from 025_comments.sql on; each view file comments its view).
`servebench tables` lists it; `servebench query` reads the units the comments close with.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from . import Connection


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    comment: str | None


@dataclass(frozen=True)
class Relation:
    """A table or a view."""
    name: str
    kind: str                 # table | view
    comment: str | None
    columns: list[Column] = field(default_factory=list)


def relations(con: Connection) -> list[Relation]:
    """Every table, then every view, by name, with its columns in their order."""
    found = [Relation(name, kind, comment) for name, kind, comment in con.execute(
        "select table_name, 'table', comment from duckdb_tables() where schema_name = 'main' and not internal "
        "union all "
        "select view_name, 'view', comment from duckdb_views() where schema_name = 'main' and not internal "
        "order by 2, 1").fetchall()]
    by_name = {relation.name: relation for relation in found}
    for relation_name, name, kind, comment in con.execute(
            "select table_name, column_name, data_type, comment from duckdb_columns() "
            "where schema_name = 'main' and not internal order by table_name, column_index").fetchall():
        if relation_name in by_name:
            by_name[relation_name].columns.append(Column(name, kind, comment))
    return found


def column_comments(con: Connection) -> list[tuple[str, str | None]]:
    """(column name, comment) of every column of every table and view."""
    return con.execute("select column_name, comment from duckdb_columns() "
                       "where schema_name = 'main' and not internal").fetchall()
