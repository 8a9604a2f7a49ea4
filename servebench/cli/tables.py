"""Rows as a reader sees them: a table that fits the console, else one block per row, or GitHub
markdown; and values as a reader reads them (`readable`). `servebench query` prints with them, and so
do the summary at the end of a run and `servebench tables` (the command at the end of this module).

The reading rules (`servebench query` without --raw): a float keeps 3 decimals, and 3 significant
digits below 1 (347.9515159 -> 347.952, 0.0123456 -> 0.0123), trailing zeros dropped; a byte count is
shown in binary units (3190026240 -> 2.97 GiB); a duration in seconds as ms below 1 s, s below a
minute, else days, hours, minutes and seconds (0.0116 -> 11.6 ms, 4000 -> 1 h 6 min 40 s). Integers
that are neither stay as they are: a count is exact.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict
from decimal import Decimal
from typing import Collection, Literal, Sequence

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from servebench import warehouse
from servebench.campaign.loading import did_you_mean
from servebench.cli.common import EXIT_FAILED, EXIT_OK, format_arg, warehouse_arg, warehouse_path
from servebench.warehouse.catalog import Relation, relations

WRAP_WIDTH = 20  # the narrowest a free-text column of a table may wrap to
BYTE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")
DURATION_PARTS = (("d", 86400), ("h", 3600), ("min", 60), ("s", 1))

ValueKind = Literal["bytes", "seconds"] | None   # what a column's numbers count, where it says


class Shown(str):
    """A number as formatted for reading: text to print, still a number to a table's alignment."""


def rounded(number: float) -> str:
    """3 decimals; 3 significant digits below 1, so a small fraction does not round to 0."""
    if not math.isfinite(number):
        return str(number)
    if number == 0:
        return "0"
    decimals = 3 if abs(number) >= 1 else 2 - math.floor(math.log10(abs(number)))
    text = f"{number:.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def size_text(count: float) -> str:
    """Bytes in binary units, 3 significant digits: 2.97 GiB."""
    value, unit = float(count), 0
    while abs(value) >= 1024 and unit < len(BYTE_UNITS) - 1:
        value, unit = value / 1024, unit + 1
    if unit == 0:
        return f"{rounded(value)} B"
    return f"{value:.{2 if abs(value) < 10 else 1 if abs(value) < 100 else 0}f} {BYTE_UNITS[unit]}"


def duration_text(seconds: float) -> str:
    """ms below a second, s below a minute, else whole d/h/min/s: 11.6 ms, 12.346 s, 1 h 6 min 40 s."""
    if not math.isfinite(seconds) or abs(seconds) < 60:
        return f"{rounded(seconds * 1000)} ms" if abs(seconds) < 1 else f"{rounded(seconds)} s"
    left, parts = round(abs(seconds)), []
    for unit, size in DURATION_PARTS:
        if left >= size:
            parts.append(f"{left // size} {unit}")
            left %= size
    return ("-" if seconds < 0 else "") + " ".join(parts)


def readable(value: object, kind: ValueKind = None) -> object:
    """A value as a reader reads it (the rules in this module's docstring); non-numbers unchanged,
    a list element by element."""
    if isinstance(value, list):
        return "[" + ", ".join(display(readable(item, kind)) for item in value) + "]"
    if isinstance(value, bool) or not isinstance(value, (int, float, Decimal)):
        return value
    if kind == "bytes":
        return Shown(size_text(float(value)))
    if kind == "seconds":
        return Shown(duration_text(float(value)))
    return value if isinstance(value, int) else Shown(rounded(float(value)))


def display(value: object) -> str:
    return "NULL" if value is None else str(value)


def print_rows(console: Console, names: Sequence[str], rows: Sequence[Sequence[object]],
               wrappable: Collection[str] = ()) -> None:
    """A table when it fits the console ($COLUMNS, or 80 when not a terminal), else one block of
    `name  value` lines per row, like psql's \\x: rich squeezes a too-wide table's columns until
    values break mid-word, a block never breaks a value. Only the `wrappable` columns (free text)
    may wrap, down to WRAP_WIDTH; every other value stays on one line."""
    table = rows_table(names, rows, wrappable)
    narrowest = rows_table(names, rows, wrappable, squeezed=True) if wrappable else table
    if Measurement.get(console, console.options.update_width(1 << 30), narrowest).maximum <= console.width:
        console.print(table)
    else:
        print_vertical(console, names, rows)


def rows_table(names: Sequence[str], rows: Sequence[Sequence[object]], wrappable: Collection[str],
               squeezed: bool = False) -> Table:
    """squeezed: the wrappable columns at their narrowest, to measure whether the table can fit."""
    table = Table(show_edge=False)
    for name in names:
        wraps = name in wrappable
        table.add_column(Text(name), no_wrap=not wraps,  # Text: a `[` in a name or value is not rich markup
                         max_width=WRAP_WIDTH if wraps and squeezed else None)
    for row in rows:
        table.add_row(*(Text(display(value)) for value in row))
    return table


def print_vertical(console: Console, names: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """soft_wrap: rich writes each line whole (a terminal wraps it visually), never cut at its width."""
    width = max(map(len, names), default=0)
    for number, row in enumerate(rows, 1):
        console.print(Text(f"-[ row {number} ]-", style="bold"), soft_wrap=True)
        for name, value in zip(names, row):
            text = display(value).replace("\n", "\n" + " " * (width + 2))
            console.print(Text.assemble((name.ljust(width), "bold"), "  ", text), soft_wrap=True)


def markdown_table(names: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A GitHub markdown table, numeric columns right-aligned; `|` and newlines escaped so a
    value stays in its cell."""
    def cell(value: object) -> str:
        return display(value).replace("|", "\\|").replace("\n", "<br>")

    def numeric(column: int) -> bool:
        values = [row[column] for row in rows if row[column] is not None]
        return bool(values) and all(isinstance(v, (int, float, Decimal, Shown)) and not isinstance(v, bool)
                                    for v in values)

    lines = ["| " + " | ".join(cell(name) for name in names) + " |",
             "|" + "|".join(" ---: " if numeric(i) else " --- " for i in range(len(names))) + "|"]
    lines += ["| " + " | ".join(cell(value) for value in row) + " |" for row in rows]
    return "\n".join(lines)


# `servebench tables [NAME]`: every table and view of the warehouse (or one) with its columns, their
# types and what each holds, in what unit: what there is to `servebench query` without opening the
# migrations. The text is the comments stored in the warehouse itself (warehouse/catalog.py). It lives
# here, with the printing it uses, because every command is the module of its name (servebench.cli.tables).

COLUMN_HEADINGS = ("column", "type", "comment")


def add_tables_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tables", help="list the warehouse's tables and views with their columns, types and "
                       "comments (units in brackets): what `servebench query` can read")
    p.add_argument("name", nargs="?", help="one table or view (default: all)")
    format_arg(p, ("table", "markdown", "json"))
    warehouse_arg(p)
    p.set_defaults(func=cmd_tables)


def cmd_tables(args: argparse.Namespace) -> int:
    con = warehouse.connect(warehouse_path(args), read_only=True)
    try:
        found = relations(con)
    finally:
        con.close()
    if args.name:
        chosen = [relation for relation in found if relation.name == args.name]
        if not chosen:
            hint = did_you_mean(args.name, [relation.name for relation in found])
            print(f"servebench: no table or view {args.name!r} in the warehouse"
                  + (f": {hint}" if hint else " (`servebench tables` lists them)"), file=sys.stderr)
            return EXIT_FAILED
        found = chosen
    if args.format == "json":
        print(json.dumps([asdict(relation) for relation in found], indent=1))
    elif args.format == "markdown":
        print("\n\n".join(relation_markdown(relation) for relation in found))
    else:
        print_relations(Console(), found)
    return EXIT_OK


def relation_heading(relation: Relation) -> str:
    return f"{relation.name} ({relation.kind}): {relation.comment or 'no comment'}"


def column_rows(relation: Relation) -> list[tuple[str, str, str]]:
    return [(column.name, column.type, column.comment or "") for column in relation.columns]


def print_relations(console: Console, found: list[Relation]) -> None:
    """Each relation's line, then its columns as a table whose comments wrap to the console."""
    for index, relation in enumerate(found):
        if index:
            console.print()
        console.print(Text(relation_heading(relation), style="bold"), soft_wrap=True)
        print_rows(console, COLUMN_HEADINGS, column_rows(relation), wrappable=["comment"])


def relation_markdown(relation: Relation) -> str:
    return f"### `{relation.name}` ({relation.kind})\n\n{relation.comment or ''}\n\n" \
           + markdown_table(COLUMN_HEADINGS, column_rows(relation))
