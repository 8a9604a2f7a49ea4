"""Warehouse speed: landing 1M request rows, and the report from a year of nightly runs.

1. One cell of 1,000,000 requests, landed through `landing.land_cell` from the CSV the
   load generator writes (target <= 2 s; writing the CSV is the generator's cost, shown apart).
2. A warehouse holding 365 runs of the smoke campaign (8 cells x 24 requests each, with
   node and server samples at the campaign's rates), then `run_report` for the newest run,
   charts and PNG/SVG included (target <= 10 s).

    python benchmarks/warehouse.py [--rows 1000000] [--runs 365]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# run as a script (`python benchmarks/warehouse.py`): servebench imports only after the sys.path change above
from servebench import landing, warehouse  # noqa: E402
from servebench.analysis.report import run_report  # noqa: E402
from servebench.campaign.loading import load_campaign  # noqa: E402
from servebench.config.sweep import expand  # noqa: E402
from servebench.load.records import write_requests_csv  # noqa: E402


def fake_requests(n: int, output_len: int = 32) -> list[dict]:
    return [{"index": i, "warmup": i < 2, "client": i % 4, "scheduled_s": i * 0.01, "sent_s": i * 0.01 + 1e-5,
             "first_token_s": i * 0.01 + 0.02, "last_token_s": i * 0.01 + 0.2, "input_tokens": 64,
             "output_tokens": output_len, "chunks": output_len + 1, "token_source": "usage", "http_status": 200,
             "error_kind": None, "error": None} for i in range(n)]


def summary(n: int) -> dict:
    return {"completed": n, "failed": 0, "duration_s": n * 0.01, "output_throughput": 300.0,
            "request_throughput": 10.0, "ttft_ms": {"p50": 12.0, "p99": 30.0}, "tpot_ms": {"p50": 2.0, "p99": 4.0},
            "valid": True, "invalid_reasons": []}


def land_million(tmp: Path, rows: int) -> tuple[float, float]:
    campaign = load_campaign(ROOT / "campaigns" / "smoke.yaml")
    cell = expand(campaign)[0]
    requests = fake_requests(rows)
    started = time.perf_counter()
    csv_path = write_requests_csv(requests, tmp / "cell.requests.csv")
    write_s = time.perf_counter() - started
    con = warehouse.connect(tmp / "million.duckdb")
    landing.insert_run(con, "big", landing.RunRecord(
        campaign=campaign.name, spec_hash=campaign.spec_hash(), spec_text="", spec_normalized=campaign.normalized(),
        campaign_file="smoke.yaml", run_dir=tmp))
    started = time.perf_counter()
    landing.land_cell(con, "big", landing.CellRecord(
        cell=cell, input_len=64, output_len=32, status="completed",
        measured=landing.CellMeasurement(result={"t0": {"monotonic": 0.0}, "summary": summary(rows)},
                                         requests_csv=csv_path)))
    land_s = time.perf_counter() - started
    assert con.execute("select count(*) from requests").fetchone()[0] == rows
    con.close()
    return write_s, land_s


def year_of_runs(tmp: Path, runs: int) -> tuple[float, float, int]:
    campaign = load_campaign(ROOT / "campaigns" / "smoke.yaml")
    cells = expand(campaign)
    db = tmp / "year.duckdb"
    con = warehouse.connect(db)
    started = time.perf_counter()
    requests = fake_requests(24)
    csv_path = write_requests_csv(requests, tmp / "smoke.requests.csv")
    for night in range(runs):
        run_id = f"night-{night:03d}"
        landing.insert_run(con, run_id, landing.RunRecord(
            campaign=campaign.name, spec_hash=campaign.spec_hash(), spec_text="", spec_normalized=campaign.normalized(),
            campaign_file="smoke.yaml", run_dir=tmp))
        for index, cell in enumerate(cells):
            landing.land_cell(con, run_id, landing.CellRecord(
                cell=cell, input_len=64, output_len=32, status="completed", measured=landing.CellMeasurement(
                    result={"t0": {"monotonic": 1000.0 + index * 20}, "summary": summary(24), "requests": requests},
                    requests_csv=csv_path)))
        for mode in ("tp1", "tp2"):
            landing.land_server(con, run_id, landing.ServerRecord(
                mode=mode, layout=landing.ServerLayout.of(next(m for m in campaign.modes if m.name == mode)), pid=1,
                port=1, command=["x"], ready_seconds=50.0, status="ready", gate=landing.ServerGate(status="passed"),
                kv_capacity_tokens=1_048_576))
    # telemetry at the campaign's rates: 5 Hz node samples, 1 Hz scrapes, over each run's 160 s of cells
    con.execute("""insert into node_samples
        select r.run_id, m.mode, 'node0', 1000 + s / 5.0, 0, 50 + 40 * sin(s), '{"0": 50, "1": 50}',
               6e9, 1.8e10, 2e9, 3, '{"lo": [1, 2, 3, 4]}'
        from runs r, (values ('tp1'), ('tp2')) m(mode), range(800) t(s)""")
    con.execute("""insert into server_samples
        select r.run_id, m.mode, 1000 + s, 0, s / 200.0, 4, 0, s // 40, s * 64, s * 32
        from runs r, (values ('tp1'), ('tp2')) m(mode), range(160) t(s)""")
    fill_s = time.perf_counter() - started
    con.close()
    con = warehouse.connect(db, read_only=True)
    started = time.perf_counter()
    run_report(con, f"night-{runs - 1:03d}", tmp / "report")
    report_s = time.perf_counter() - started
    node_rows = con.execute("select count(*) from node_samples").fetchone()[0]
    con.close()
    return fill_s, report_s, node_rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=365)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        write_s, land_s = land_million(Path(tmp), args.rows)
        fill_s, report_s, node_rows = year_of_runs(Path(tmp), args.runs)
    print(f"\n{'what':<58} {'seconds':>8}  target")
    print(f"{'write ' + format(args.rows, ',') + ' request rows as CSV (load generator side)':<58} {write_s:>8.2f}")
    print(f"{'land ' + format(args.rows, ',') + ' request rows (land_cell from that CSV)':<58} {land_s:>8.2f}  <= 2")
    fill_what = "fill a warehouse with " + str(args.runs) + " smoke runs (" + format(node_rows, ",") + " node samples)"
    print(f"{fill_what:<58} {fill_s:>8.2f}")
    print(f"{'render the newest run report from it (HTML + 7 PNG + 7 SVG)':<58} {report_s:>8.2f}  <= 10")


if __name__ == "__main__":
    main()
