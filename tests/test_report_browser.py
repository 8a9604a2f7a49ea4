"""The report in a real browser: Debian's headless Chromium opens it offline, no console
message may appear, every chart must render, and a screenshot is saved for a person.

The warehouse is synthetic but landed through servebench's own landing code, so the test
needs no engine; the campaign end-to-end tests render reports from real runs.
"""

import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from servebench import warehouse
from servebench.analysis.report import run_report
from tests.support.synthetic_runs import synthetic_warehouse

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-sync",
         "--disable-component-update", "--no-first-run", "--disable-quic"]
SCREENSHOTS = Path(__file__).parent / "artifacts"

@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("report")
    db = tmp / "w.duckdb"
    run_id = synthetic_warehouse(db, tmp)
    con = warehouse.connect(db, read_only=True)
    path = run_report(con, run_id, tmp / "out")
    con.close()
    return path


def chromium(*args: str) -> subprocess.CompletedProcess:
    assert CHROMIUM, "Debian's chromium is needed for this test: apt-get install -y chromium (README command 2)"
    with tempfile.TemporaryDirectory() as profile:
        return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True,
                              text=True, timeout=120)


def test_report_is_self_contained(report):
    html = report.read_text()
    assert not re.search(r"<script[^>]+src=", html), "the page loads a script from elsewhere"
    assert "cdn.jsdelivr" not in html and "unpkg.com" not in html
    charts = sorted(p.name for p in (report.parent / "charts").iterdir())
    assert "kv_usage.png" in charts and "node_timelines.svg" in charts and len(charts) == 18
    assert "rank_network.svg" in charts  # the synthetic run was sampled on two nodes


@pytest.mark.browser
def test_report_renders_in_chromium_without_console_messages(report):
    done = chromium("--enable-logging=stderr", "--v=0", "--virtual-time-budget=15000", "--dump-dom", report.as_uri())
    console = [line for line in done.stderr.splitlines() if "CONSOLE" in line]
    assert console == [], "\n".join(console)
    rendered = re.findall(r'<div id="chart-\d+" class="chart[^"]*vega-embed', done.stdout)
    assert len(rendered) == 9, f"{len(rendered)} charts rendered"
    assert done.stdout.count('class="marks"') >= 9
    assert 'data-name="history"' in done.stdout
    SCREENSHOTS.mkdir(exist_ok=True)
    shot = SCREENSHOTS / "report.png"
    chromium("--window-size=1300,3600", "--virtual-time-budget=15000", f"--screenshot={shot}", report.as_uri())
    assert shot.exists() and shot.stat().st_size > 50_000
