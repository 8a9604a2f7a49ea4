"""The report's history section on two synthetic nights (tp2-ray a third slower on the second): every
series' regression verdict counted and the changed ones listed, and the comparison with the campaign's
previous run as `servebench compare` gives it."""

import pytest

from servebench import warehouse
from servebench.analysis.report_changes import comparison_html, history_section, previous_run
from tests.support.synthetic_runs import synthetic_warehouse


@pytest.fixture(scope="module")
def con(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("nights")
    path = tmp / "w.duckdb"
    synthetic_warehouse(path, tmp)
    con = warehouse.connect(path, read_only=True)
    yield con
    con.close()


def test_the_second_night_is_compared_with_the_first_and_the_first_with_nothing(con):
    assert previous_run(con, "r1") == "r0"
    assert previous_run(con, "r0") is None
    assert previous_run(con, "no-such-run") is None


def test_the_section_lists_the_slower_modes_regressions_and_its_worse_figures_first(con):
    page = history_section(con, "r1")
    regressions, comparison = page.split('<h2 id="previous-run">')
    assert "series judged" in regressions and "regression" in regressions
    listed = regressions.split("<tr>")[2:]
    assert listed and all("tp2-ray" in row for row in listed if ">regression<" in row)
    assert not any("tp1." in row and ">regression<" in row for row in listed)
    assert "servebench compare r0 r1" in comparison
    rows = comparison.split("<tr>")[2:]
    assert ">worse<" in rows[0] and "tp2-ray" in rows[0]           # the worst first
    assert any("tp1.c4" in row and ">within noise<" in row for row in rows)


def test_the_first_run_says_there_is_nothing_to_compare_with():
    assert "first finished run" in comparison_html(None, "r0", [])
