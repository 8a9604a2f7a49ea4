"""What telemetry costs: CPU time of the node sampler (at 10 Hz) and of the /metrics scraper.

Runs each for --seconds against a live process tree (this script's own child) and a local
HTTP endpoint serving a real-sized vLLM /metrics page, then prints CPU use as a percentage
of one core (target for the sampler: <= 1%).

    python benchmarks/telemetry.py [--seconds 30]
"""

from __future__ import annotations

import argparse
import http.server
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]


def metrics_page() -> bytes:
    """A vLLM-like /metrics page: the gauges and counters plus histogram buckets, ~40 KB."""
    lines = []
    for name, kind in (("vllm:kv_cache_usage_perc", "gauge"), ("vllm:num_requests_running", "gauge"),
                       ("vllm:num_requests_waiting", "gauge"), ("vllm:num_preemptions_total", "counter"),
                       ("vllm:prompt_tokens_total", "counter"), ("vllm:generation_tokens_total", "counter")):
        lines += [f"# HELP {name} x", f"# TYPE {name} {kind}", f'{name}{{engine="0",model_name="m"}} 1.0']
    for hist in ("time_to_first_token_seconds", "inter_token_latency_seconds", "e2e_request_latency_seconds",
                 "request_queue_time_seconds", "request_prefill_time_seconds", "request_decode_time_seconds"):
        lines += [f"# HELP vllm:{hist} x", f"# TYPE vllm:{hist} histogram"]
        for bucket in [0.001 * 2 ** k for k in range(40)] + ["+Inf"]:
            lines.append(f'vllm:{hist}_bucket{{engine="0",le="{bucket}",model_name="m"}} 3.0')
        lines += [f'vllm:{hist}_count{{engine="0",model_name="m"}} 3.0',
                  f'vllm:{hist}_sum{{engine="0",model_name="m"}} 1.5']
    return ("\n".join(lines) + "\n").encode()


def serve_metrics() -> tuple[http.server.ThreadingHTTPServer, int]:
    page = metrics_page()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, server.server_address[1]


def cpu_share(argv: list[str], seconds: float) -> tuple[float, int]:
    """Run argv for `seconds`; return (CPU % of one core, lines written)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.jsonl"
        proc = subprocess.Popen([*argv, "--out", str(out)], cwd=ROOT)
        watched = psutil.Process(proc.pid)
        time.sleep(1.0)  # start-up (imports) is not the steady cost
        before = sum(watched.cpu_times()[:2])
        started = time.monotonic()
        time.sleep(seconds)
        used = sum(watched.cpu_times()[:2]) - before
        elapsed = time.monotonic() - started
        proc.terminate()
        proc.wait(10)
        return 100.0 * used / elapsed, len(out.read_text().splitlines())


def metric_flags() -> list[str]:
    """The vLLM engine's metric map as the scraper's --metric flags (what a campaign passes)."""
    from servebench.engines import get_engine

    metrics = get_engine("vllm").api.metrics
    return [flag for name, column in metrics.items() for flag in ("--metric", f"{name}={column}")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    args = parser.parse_args()
    # something to follow: a small process tree like an engine's
    tree = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time; "
                             "[subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']) "
                             "for _ in range(4)]; "
                             "time.sleep(600)"])
    server, port = serve_metrics()
    cpus = ",".join(map(str, sorted(os.sched_getaffinity(0))))
    try:
        rows = []
        for hz in (5.0, 10.0):
            share, lines = cpu_share([sys.executable, "-m", "servebench.telemetry.node_sampler", "--node", "n0",
                                      "--cpus", cpus, "--pids", str(tree.pid), "--hz", str(hz)], args.seconds)
            rows.append((f"node sampler {hz:g} Hz", share, lines))
        for hz in (1.0, 5.0):
            share, lines = cpu_share([sys.executable, "-m", "servebench.telemetry.scraper", "--url",
                                      f"http://127.0.0.1:{port}", "--mode", "m", "--hz", str(hz),
                                      *metric_flags()], args.seconds)
            rows.append((f"scraper {hz:g} Hz", share, lines))
    finally:
        for child in psutil.Process(tree.pid).children(recursive=True):
            child.kill()
        tree.kill()
        server.shutdown()
    print(f"\n{'what':<22} {'CPU % of one core':>18} {'samples':>8}   ({args.seconds:g} s each)")
    for name, share, lines in rows:
        print(f"{name:<22} {share:>18.2f} {lines:>8}")
    print("target: node sampler at 10 Hz <= 1% of one core")


if __name__ == "__main__":
    main()

