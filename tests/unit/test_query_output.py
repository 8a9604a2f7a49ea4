"""Query output a reader can read at any width, and the end-of-run summary of a run's cells."""

import io
from datetime import datetime, timezone

import pytest
from rich.console import Console

from servebench import cli, warehouse
from servebench.analysis.run_summary import summarize
from servebench.cli.campaign_flow import print_cells_summary, status_line
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
    print_cells_summary(console, landed, "r1")
    outcome = {"run_id": "r1", "status": "invalid", "cells": {"a": "completed", "b": "completed"}}
    console.print(status_line("smoke", outcome), soft_wrap=True)
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
    print_cells_summary(Console(file=stream), str(tmp_path / "none.duckdb"), "r1")
    assert stream.getvalue().startswith("no cell summary: no warehouse at")


def test_a_table_rounds_floats_and_reads_bytes_and_durations(db, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "120")
    sql = ("select 347.9515159138403::double as x, 0.0123456::double as small, 3190026240 as mem_used_bytes, "
           "0.0116::double as warmup_s, 4000::double as duration_s, [1.23456, 2.0]::double[] as v, 42 as n")
    assert cli.main(["query", sql, "--warehouse", db]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[2].split("│") == [" 347.952 ", " 0.0123 ", " 2.97 GiB       ", " 11.6 ms  ", " 1 h 6 min 40 s ",
                                  " [1.235, 2] ", " 42 "]


def test_a_rate_named_like_a_duration_stays_a_number(db, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "120")
    sql = ("select 0.15::double as tok_s, 3.5::double as out_tokens_s, 2.0::double as bytes_per_s, "
           "0.15::double as wait_s")
    assert cli.main(["query", sql, "--warehouse", db]) == 0
    cells = [cell.strip() for cell in capsys.readouterr().out.splitlines()[2].split("│")]
    assert cells == ["0.15", "3.5", "2", "150 ms"], cells


def test_a_header_carries_the_unit_its_columns_comments_give_it(db, capsys):
    sql = ("select 439.12::double as output_throughput, 8.0::double as offered_rate, 11.6::double as ttft_p99_ms, "
           "1.0 as value")
    assert cli.main(["query", sql, "--format", "markdown", "--warehouse", db]) == 0
    assert capsys.readouterr().out.splitlines()[:3] == [
        "| output_throughput [tok/s] | offered_rate [req/s] | ttft_p99_ms | value |",   # _ms says it; value: many units
        "| ---: | ---: | ---: | ---: |",
        "| 439.12 | 8 | 11.6 | 1 |",
    ]


def test_raw_csv_and_json_keep_every_value_as_stored(db, capsys):
    sql = "select 347.9515159138403::double as output_throughput, 3190026240 as mem_used_bytes"
    assert cli.main(["query", sql, "--raw", "--format", "markdown", "--warehouse", db]) == 0
    assert capsys.readouterr().out.splitlines()[2] == "| 347.9515159138403 | 3190026240 |"
    assert cli.main(["query", sql, "--format", "csv", "--warehouse", db]) == 0
    assert capsys.readouterr().out.splitlines()[1] == "347.9515159138403,3190026240"


def test_an_empty_result_says_so(db, capsys):
    assert cli.main(["query", "select cell_key from cells", "--warehouse", db]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "0 rows"
    assert cli.main(["query", "select cell_key from cells", "--format", "json", "--warehouse", db]) == 0
    assert capsys.readouterr().out.strip() == "[]"


@pytest.mark.parametrize("number, text", [(0, "0"), (2.5, "2.5"), (-0.000123456, "-0.000123"), (1e6 / 3, "333333.333"),
                                          (float("nan"), "nan")])
def test_the_rounding_rule(number, text):
    from servebench.cli.tables import rounded

    assert rounded(number) == text


@pytest.mark.parametrize("seconds, text", [(0.25, "250 ms"), (59.5, "59.5 s"), (61, "1 min 1 s"),
                                           (-90000, "-1 d 1 h"), (3600, "1 h")])
def test_the_duration_rule(seconds, text):
    from servebench.cli.tables import duration_text

    assert duration_text(seconds) == text


def test_tables_lists_every_table_and_view_with_its_columns_and_comments(db, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    assert cli.main(["tables", "--warehouse", db]) == 0
    out = capsys.readouterr().out
    for heading in ("cells (table): One row per cell", "requests (table):", "measured_requests (view):",
                    "cell_kv (view):"):
        assert heading in out, heading
    assert cli.main(["tables", "cells", "--warehouse", db]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("cells (table)") and "measured_requests (view)" not in "".join(lines)
    row = next(line for line in lines if line.startswith(" output_throughput "))
    assert [cell.strip() for cell in row.split("│")] == [
        "output_throughput", "DOUBLE", "output tokens per second over the steady window [tok/s]"]


def test_tables_of_one_unknown_name_suggests_the_close_ones(db, capsys):
    assert cli.main(["tables", "cell", "--warehouse", db]) == 1
    assert "no table or view 'cell' in the warehouse: did you mean cells" in capsys.readouterr().err


def test_tables_as_json(db, capsys):
    import json

    assert cli.main(["tables", "measured_requests", "--format", "json", "--warehouse", db]) == 0
    (view,) = json.loads(capsys.readouterr().out)
    assert view["kind"] == "view" and {"name": "ttft_ms", "type": "DOUBLE", "comment": (
        "time to first token: first token event - send (NULL: failed) [ms]")} in view["columns"]


def test_the_run_summary_and_the_report_say_when_a_schedule_missed_its_rate(landed):
    from servebench.analysis.report import cell_table
    from servebench.warehouse import reads

    con = warehouse.connect(landed)
    add_cell(con, "r1", "tp1.c1.r0", status="completed", valid=True, output_throughput=10.0,
             offered_rate=8.0, realized_rate=11.0)
    add_cell(con, "r1", "tp1.c3.r0", status="completed", valid=True, output_throughput=10.0,
             offered_rate=2.0, realized_rate=2.1)
    cells = reads.report_cells(con, "r1")
    con.close()
    stream = io.StringIO()
    print_cells_summary(Console(file=stream, width=200), landed, "r1")
    out = stream.getvalue()
    assert "schedule realized 11 req/s, +38% from the 8 req/s offered" in out
    assert "1 open-loop cell(s) ran a schedule more than 10% off the rate their key names" in out
    table = cell_table(cells, [])
    assert table.count("schedule realized") == 1 and "+38% from the 8 req/s offered" in table
