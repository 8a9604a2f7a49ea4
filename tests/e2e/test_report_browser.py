"""The report in a real browser: Debian's headless Chromium opens it offline, no console
message may appear, every chart must render, and a screenshot is saved for a person.

The warehouse is synthetic but landed through servebench's own landing code, so the test
needs no engine; the campaign end-to-end tests render reports from real runs.
"""

import json
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
SCREENSHOTS = Path(__file__).parents[1] / "artifacts"

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
    assert "kv_usage.png" in charts and "node_timelines.svg" in charts and len(charts) == 20
    assert "rank_network.svg" in charts  # the synthetic run was sampled on two nodes


@pytest.mark.browser
def test_report_renders_in_chromium_without_console_messages(report):
    done = chromium("--enable-logging=stderr", "--v=0", "--virtual-time-budget=15000", "--dump-dom", report.as_uri())
    console = [line for line in done.stderr.splitlines() if "CONSOLE" in line]
    assert console == [], "\n".join(console)
    rendered = re.findall(r'<div id="chart-\d+" class="chart[^"]*vega-embed', done.stdout)
    assert len(rendered) == 10, f"{len(rendered)} charts rendered"
    assert done.stdout.count('class="marks"') >= 10
    assert 'data-name="history"' in done.stdout
    SCREENSHOTS.mkdir(exist_ok=True)
    shot = SCREENSHOTS / "report.png"
    chromium("--window-size=1300,3600", "--virtual-time-budget=15000", f"--screenshot={shot}", report.as_uri())
    assert shot.exists() and shot.stat().st_size > 50_000


FIRST_SCREEN = (1400, 900)     # px: a laptop's browser window, what a reader sees before scrolling
# appended to a copy of the page only: where the first screen's parts landed, written into the DOM
LAYOUT_PROBE = """<script>addEventListener("load", () => setTimeout(() => {
  const box = sel => { const e = document.querySelector(sel); if (!e) return null;
    const r = e.getBoundingClientRect(); return {top: r.top + scrollY, bottom: r.bottom + scrollY, right: r.right}; };
  const pre = document.createElement("pre"); pre.id = "layout";
  pre.textContent = JSON.stringify({context: box("#context"), summary: box("#summary table"),
    notes: box("#summary .sub"), chart: box(".chart")});
  document.body.appendChild(pre); }, 500));</script>"""


@pytest.mark.browser
def test_the_first_screen_holds_the_hardware_line_and_the_summary_with_a_verdict_per_load_point(report, tmp_path):
    html = report.read_text()
    # in the page's order: the hardware line, then the summary, then the first chart (the side-by-side one)
    context, summary, first_chart = html.index('id="context"'), html.index('id="summary"'), html.index('class="chart"')
    assert context < summary < first_chart and 'data-name="modes_side_by_side"' in html[first_chart:first_chart + 80]
    line = re.search(r'<p class="context" id="context">([^<]*)</p>', html).group(1)
    assert "Synthetic CPU" in line and "cores" in line and "memory bandwidth not measured" in line
    assert "matmul not measured" in line and "engine vllm" in line and "model tiny-llama" in line and "run " in line
    table = html[summary:first_chart]
    verdicts = re.findall(r'<td rowspan="\d+" class="verdict[^"]*">([^<]*)</td>', table)
    points = ["1 client", "4 clients", "8 clients", "2 req/s", "8 req/s"]
    assert len(verdicts) == len(points) and all(f">{p}</td>" in table for p in points)
    assert all(re.match(r"(tp1|tp2-ray) by \d", v) or v.startswith("no significant difference") for v in verdicts)
    assert "run r1" not in html[html.index("<body"):first_chart] and "run r1" in html[first_chart:]  # below
    assert not re.search(r"\d{2}:\d{2}:\d{2}\.\d", html[first_chart:].split("<script")[0])   # no microseconds
    probed = tmp_path / "probed.html"
    probed.write_text(html.replace("</body>", LAYOUT_PROBE + "</body>"))
    width, height = FIRST_SCREEN
    done = chromium(f"--window-size={width},{height}", "--virtual-time-budget=15000", "--dump-dom", probed.as_uri())
    layout = json.loads(html_unescape(re.search(r'<pre id="layout">([^<]*)</pre>', done.stdout).group(1)))
    assert layout["context"]["bottom"] <= layout["summary"]["top"] <= layout["chart"]["top"]
    assert layout["summary"]["bottom"] <= height, layout      # the whole summary table on the first screen
    assert max(layout[part]["right"] for part in ("context", "summary", "notes")) <= width, layout  # nor wider
    SCREENSHOTS.mkdir(exist_ok=True)
    shot = SCREENSHOTS / "report_first_screen.png"
    chromium(f"--window-size={width},{height}", "--virtual-time-budget=15000", f"--screenshot={shot}", report.as_uri())
    assert shot.exists() and shot.stat().st_size > 30_000


def html_unescape(text: str) -> str:
    import html as html_module
    return html_module.unescape(text)
