"""Query output a reader can read at any width, and the end-of-run summary of a run's cells."""

import io
from datetime import datetime, timezone

import pytest
from rich.console import Console

from servebench import cli, warehouse
from servebench.analysis.run_summary import summarize
from servebench.warehouse.landing import insert_row


@pytest.fixture
def db(tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")  # what rich assumes for a non-terminal anyway
    path = tmp_path / "w.duckdb"
    warehouse.connect(path).close()
    return str(path)


def test_a_wide_query_prints_every_value_unbroken(db, capsys):
    values = [f"the quick brown fox number {i:02d} jumps over the lazy dog" for i in range(15)]
    sql = "select " + ", ".join(f"'{v}' as column_{i:02d}" for i, v in enumerate(values))
    assert cli.main(["query", sql, "--warehouse", db]) == 0
    out = capsys.readouterr().out
    for i, value in enumerate(values):
        assert f"column_{i:02d}  {value}\n" in out


def test_a_narrow_query_prints_a_table_with_literal_values(db, capsys):
    assert cli.main(["query", "select 1 as n, '[bold]x[/]' as s, null as nothing", "--warehouse", db]) == 0
    assert capsys.readouterr().out.splitlines()[2] == " 1 │ [bold]x[/] │ NULL    "


def test_markdown_format(db, capsys):
    sql = "select * from (values (1, 'a|b'), (22, null)) t(n, s)"
    assert cli.main(["query", sql, "--format", "markdown", "--warehouse", db]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "| n | s |",
        "| ---: | --- |",
        "| 1 | a\\|b |",
        "| 22 | NULL |",
    ]


def add_cell(con, run_id: str, key: str, **values) -> None:
    insert_row(con, "cells", dict(run_id=run_id, cell_id=f"{run_id}/{key}", cell_key=key, mode=key.split(".")[0],
                                  tp=1, pp=1, executor="mp", load_kind="closed", clients=int(key.split(".")[1][1:]),
                                  repeat=0, input_len=32, output_len=16, seed=1, **values))


@pytest.fixture
def landed(db):
    con = warehouse.connect(db)
    for run_id in ("r1", "r2"):
        insert_row(con, "runs", dict(run_id=run_id, campaign="smoke", spec_hash="h", spec_text="", spec_normalized="{}",
                                     started_at=datetime.now(timezone.utc), status="completed", host="h",
                                     run_dir="/tmp/x"))
    add_cell(con, "r1", "tp1.c2.r0", status="completed", correctness="reference", valid=True,
             output_throughput=439.12, invalid_reasons=[])
    add_cell(con, "r1", "tp1.c16.r0", status="completed", correctness="reference", valid=False,
             output_throughput=80.0, invalid_reasons=["schedule lag p99 250 ms > 50 ms", "client CPU 0.97 of a core"])
    add_cell(con, "r1", "tp2.c2.r0", status="failed", correctness="failed", error="correctness gate failed: 3 of 4")
    add_cell(con, "r2", "tp1.c2.r0", status="completed", valid=True, output_throughput=1.0)
    con.close()
    return db


def test_the_run_summary_lists_the_runs_cells_and_its_invalid_ones(landed):
    con = warehouse.connect(landed, read_only=True)
    summary = summarize(con, "r1")
    con.close()
    assert summary.rows == [
        ("tp1.c2.r0", "completed", "reference", "yes", "439.1", ""),
        ("tp1.c16.r0", "completed", "reference", "NO", "80.0",
         "schedule lag p99 250 ms > 50 ms; client CPU 0.97 of a core"),
        ("tp2.c2.r0", "failed", "failed", "-", "-", "correctness gate failed: 3 of 4"),
    ]
    assert summary.alarm_lines() == [
        "INVALID: 1 of 3 cells failed their validity checks; their numbers are not trustworthy measurements",
        "  tp1.c16.r0: schedule lag p99 250 ms > 50 ms; client CPU 0.97 of a core",
    ]


def test_the_end_of_run_output_shows_cells_invalid_reasons_and_a_readable_status(landed):
    stream = io.StringIO()
    console = Console(file=stream)
    cli.print_cells_summary(console, landed, "r1")
    outcome = {"run_id": "r1", "status": "invalid", "cells": {"a": "completed", "b": "completed"}}
    console.print(cli.status_line("smoke", outcome), soft_wrap=True)
    lines = stream.getvalue().splitlines()
    assert lines[0].split() == ["cell", "┃", "status", "┃", "correctness", "┃", "valid", "┃", "tok/s", "┃", "reasons",
                                "/", "error"]  # a table, only the free text wraps at 80 columns
    assert lines[3].startswith(" tp1.c16.r0 │ completed │ reference   │ NO    │ 80.0  │ schedule lag p99")
    assert lines[-3:-1] == ["INVALID: 1 of 3 cells failed their validity checks; their numbers are not trustworthy "
                            "measurements", "  tp1.c16.r0: schedule lag p99 250 ms > 50 ms; client CPU 0.97 of a core"]
    assert lines[-1] == ("campaign smoke run r1: invalid (2 completed): every cell ran, but some "
                         "measurements failed their validity checks (validity: fail)")


def test_the_end_of_run_output_survives_a_missing_warehouse(tmp_path):
    stream = io.StringIO()
    cli.print_cells_summary(Console(file=stream), str(tmp_path / "none.duckdb"), "r1")
    assert stream.getvalue().startswith("no cell summary: no warehouse at")
