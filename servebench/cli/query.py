"""`servebench query SQL`: the user's own SQL on the warehouse, read-only, as a table, markdown, CSV or JSON.

A table or markdown is for reading: floats rounded, byte counts and durations in readable units, and
each column's unit after its name where the warehouse's comments give that name one unit (the rules:
servebench/cli/tables.py). `--raw` prints every value as stored; CSV and JSON always do, being for
programs.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import sys
from typing import Sequence

from rich.console import Console

from servebench import warehouse
from servebench.cli.common import EXIT_FAILED, EXIT_OK, format_arg, warehouse_arg, warehouse_path
from servebench.cli.tables import ValueKind, markdown_table, print_rows, readable
from servebench.warehouse import catalog

# a comment's closing [unit] (warehouse/migrations/025_comments.sql): the ones a header may carry
UNIT = re.compile(r"\[([^\]]+)\]\s*$")
KNOWN_UNITS = {"ms", "s", "req/s", "tok/s", "tokens", "bytes", "0-1", "%", "Mbit/s", "monotonic s", "unix s"}


def add_query_parser(sub: argparse._SubParsersAction) -> None:
    query = sub.add_parser("query", help="run SQL on the warehouse (read-only); `servebench tables` lists what "
                           "there is to query")
    query.add_argument("sql", help="the SQL to run, read-only (`servebench tables` lists the tables and views)")
    format_arg(query, ("table", "markdown", "csv", "json"),
               help="table: one block per row when the table is wider than the terminal "
               "($COLUMNS, or 80 when not a terminal); markdown: a GitHub table; csv and json: values as stored")
    query.add_argument("--raw", action="store_true",
                       help="table and markdown: every value as stored (no rounding, no units)")
    warehouse_arg(query)
    query.set_defaults(func=cmd_query)


def cmd_query(args: argparse.Namespace) -> int:
    import duckdb

    con = warehouse.connect(warehouse_path(args), read_only=True)
    try:
        try:
            cursor = con.execute(args.sql)
        except duckdb.Error as exc:
            print(f"servebench: query failed: {exc}", file=sys.stderr)
            return EXIT_FAILED
        names = [d[0] for d in cursor.description] if cursor.description else []
        result = cursor.fetchall() if names else []
        units = {} if args.raw else column_units(con)
    finally:
        con.close()
    if args.format == "json":
        print(json.dumps([dict(zip(names, row)) for row in result], default=str, indent=1))
    elif args.format == "csv":
        writer = csv.writer(sys.stdout)
        writer.writerow(names)
        writer.writerows(result)
    else:
        shown_names, shown_rows = (names, result) if args.raw else readable_result(names, result, units)
        if args.format == "markdown":
            print(markdown_table(shown_names, shown_rows))
        elif names:
            print_rows(Console(), shown_names, shown_rows)
        if not result:
            print("0 rows")
    return EXIT_OK


def column_units(con: warehouse.Connection) -> dict[str, str]:
    """Each column name whose every table and view column of that name states one unit, and that
    unit: a query's result names no source, so a name that means two things gets none."""
    found: dict[str, set[str]] = {}
    for name, comment in catalog.column_comments(con):
        match = UNIT.search(comment or "")
        found.setdefault(name, set()).add(match.group(1) if match and match.group(1) in KNOWN_UNITS else "")
    return {name: unit for name, units in found.items() if len(units) == 1 and (unit := next(iter(units)))}


# `tok_s`, `requests_per_s`: a count per second is a rate, not a duration, though its name ends in `_s`
RATE_STEMS = ("tok", "toks", "token", "tokens", "req", "reqs", "request", "requests", "bytes", "per")


def value_kind(name: str, unit: str | None) -> ValueKind:
    """Bytes or seconds, by the column's name (`*_bytes`, `*_s`, `*_seconds`, not a rate such as `tok_s`)
    or its comment's unit; clock readings ([monotonic s], [unix s]) are times, not durations."""
    if unit == "bytes" or name.endswith("_bytes"):
        return "bytes"
    if unit == "s" or (unit is None and name.endswith(("_s", "_seconds")) and not is_rate(name)):
        return "seconds"
    return None


def is_rate(name: str) -> bool:
    """A name of a count per second (`tok_s`, `out_tokens_s`, `bytes_per_s`)."""
    return name.endswith("_s") and name[:-2].rsplit("_", 1)[-1] in RATE_STEMS


def labelled(name: str, kind: ValueKind, unit: str | None) -> bool:
    """Whether a header gets its unit: not when its values now carry it, nor when its name says it."""
    return unit is not None and kind is None and not name.endswith("_" + unit)


def readable_result(names: Sequence[str], rows: Sequence[Sequence[object]],
                    units: dict[str, str]) -> tuple[list[str], list[tuple[object, ...]]]:
    """Names with their unit (unless the values now carry it) and values as a reader reads them."""
    kinds = [value_kind(name, units.get(name)) for name in names]
    headers = [f"{name} [{units[name]}]" if labelled(name, kind, units.get(name)) else name
               for name, kind in zip(names, kinds)]
    return headers, [tuple(readable(value, kind) for value, kind in zip(row, kinds)) for row in rows]
