"""How much does the load generator itself add? servebench vs `vllm bench serve`, one run.

Starts nginx (Debian's) on loopback answering every POST at once with a fixed SSE body of
64 token events plus usage, pins the generator to one core and nginx to the other, and
prints, side by side:
- the maximum sustained request rate at concurrency 64 (closed loop);
- client-added TTFT p50/p99 and schedule lag p99 at 500 and 1000 req/s (Poisson).
The server answers in ~0.1 ms, so any TTFT above that is the client's own overhead.

    python benchmarks/loadgen.py [--engine-python PATH] [--requests N] [--quick]

`--engine-python` is the engine venv's python (default: the smoke campaign's cached
build) for `vllm bench serve`; without it, only servebench is measured.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from servebench.processes import ManagedProcess, free_port  # noqa: E402

TOKENS = 64
GENERATOR_CPU, SERVER_CPU = "0", "1"


def sse_body(tokens: int = TOKENS, prompt_tokens: int = 16) -> str:
    """What vLLM streams for a completion with running usage: one event per token, then usage, then DONE."""
    events = []
    for n in range(1, tokens + 1):
        events.append(json.dumps({
            "id": "cmpl-bench", "object": "text_completion", "created": 0, "model": "tiny",
            "choices": [{"index": 0, "text": f" t{n}", "logprobs": None, "finish_reason": None}],
            "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + n, "completion_tokens": n},
        }))
    events.append(json.dumps({"id": "cmpl-bench", "object": "text_completion", "created": 0, "model": "tiny",
                              "choices": [], "usage": {"prompt_tokens": prompt_tokens,
                                                       "total_tokens": prompt_tokens + tokens,
                                                       "completion_tokens": tokens}}))
    return "".join(f"data: {e}\n\n" for e in events) + "data: [DONE]\n\n"


def start_nginx(workdir: Path) -> tuple[ManagedProcess, int]:
    port = free_port()
    body = workdir / "body.sse"
    body.write_text(sse_body())
    workdir.chmod(0o755)  # nginx's workers run as an unprivileged user
    body.chmod(0o644)
    conf = workdir / "nginx.conf"
    conf.write_text(f"""
daemon off;
worker_processes 1;
pid {workdir}/nginx.pid;
error_log {workdir}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_buffer_size 64k;
    keepalive_requests 10000000;
    keepalive_timeout 300s;
    server {{
        listen 127.0.0.1:{port} backlog=4096;
        location / {{
            # a static file answers only GET; turn every POST's 405 into the file
            root {workdir};
            error_page 405 =200 /body.sse;
            rewrite ^ /body.sse break;
            default_type text/event-stream;
        }}
        location = /metrics {{ return 404; }}
    }}
}}
""")
    nginx = ManagedProcess.start(["taskset", "-c", SERVER_CPU, "nginx", "-c", str(conf), "-p", str(workdir)],
                                 log_path=workdir / "nginx.out")
    for _ in range(100):
        try:
            request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=b"{}", method="POST")
            with urllib.request.urlopen(request, timeout=1) as response:
                if response.read().count(b"data: ") == TOKENS + 2:
                    return nginx, port
        except OSError:
            time.sleep(0.1)
    nginx.stop()
    raise RuntimeError(f"nginx did not answer: {(workdir / 'error.log').read_text()}")


def servebench_load(port: int, workdir: Path, *, clients: int | None = None, rate: float | None = None,
                    requests: int) -> dict:
    out = workdir / "servebench.json"
    argv = ["taskset", "-c", GENERATOR_CPU, sys.executable, "-m", "servebench", "load", "--engine", "vllm",
            "--base-url", f"http://127.0.0.1:{port}", "--model", "tiny", "--input-len", "16",
            "--output-len", str(TOKENS), "--requests", str(requests), "--token-counter", "", "--timeout", "30",
            "--output-json", str(out), "--quiet"]
    argv += ["--clients", str(clients)] if clients else []
    argv += ["--rate", str(rate)] if rate else []
    subprocess.run(argv, check=True, cwd=ROOT)
    summary = json.loads(out.read_text())["summary"]
    return {"req_s": summary["request_throughput"], "ttft_p50": summary["ttft_ms"]["p50"],
            "ttft_p99": summary["ttft_ms"]["p99"], "lag_p99": summary["schedule_lag_ms"]["p99"],
            "achieved": summary["achieved_rate"], "offered": summary["scheduled_rate"],
            "failed": summary["failed"], "valid": summary["valid"]}


def vllm_bench(engine_python: str, tokenizer: str, port: int, workdir: Path, *, clients: int | None = None,
               rate: float | None = None, requests: int) -> dict:
    out = workdir / "vllm.json"
    out.unlink(missing_ok=True)
    argv = ["taskset", "-c", GENERATOR_CPU, engine_python, "-m", "vllm.entrypoints.cli.main", "bench", "serve",
            "--backend", "openai", "--base-url", f"http://127.0.0.1:{port}", "--endpoint", "/v1/completions",
            "--model", "tiny", "--tokenizer", tokenizer, "--dataset-name", "random", "--random-input-len", "16",
            "--random-output-len", str(TOKENS), "--ignore-eos", "--num-prompts", str(requests),
            "--disable-tqdm", "--save-result", "--result-dir", str(workdir), "--result-filename", out.name,
            "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,99",
            "--request-rate", str(rate) if rate else "inf"]
    argv += ["--max-concurrency", str(clients)] if clients else []
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}
    done = subprocess.run(argv, capture_output=True, text=True, env=env)
    if done.returncode != 0 or not out.exists():
        raise RuntimeError(f"vllm bench serve failed ({done.returncode}): {done.stderr[-1500:]}")
    result = json.loads(out.read_text())
    return {"req_s": result["request_throughput"], "ttft_p50": result["p50_ttft_ms"],
            "ttft_p99": result["p99_ttft_ms"], "lag_p99": None,
            "achieved": result["completed"] / result["duration"], "offered": rate,
            "failed": result.get("failed", 0), "valid": None}


def default_engine() -> tuple[str | None, str | None]:
    cache = Path(os.environ.get("SERVEBENCH_CACHE", Path.home() / ".cache" / "servebench"))
    pythons = sorted(cache.glob("engines/vllm-*/bin/python"), key=lambda p: p.stat().st_mtime)
    models = sorted(cache.glob("models/tiny-llama-*"), key=lambda p: p.stat().st_mtime)
    return (str(pythons[-1]) if pythons else None), (str(models[-1]) if models else None)


def fmt(value, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    engine_python, tokenizer = default_engine()
    parser.add_argument("--engine-python", default=engine_python)
    parser.add_argument("--tokenizer", default=tokenizer, help="model dir for vllm bench serve's tokenizer")
    parser.add_argument("--requests", type=int, default=20000, help="requests per capacity measurement")
    parser.add_argument("--seconds", type=float, default=15.0, help="length of each rate measurement")
    args = parser.parse_args()
    if shutil.which("nginx") is None:
        sys.exit("nginx is needed: apt-get install -y nginx")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        nginx, port = start_nginx(workdir)
        try:
            tools = [("servebench", lambda **kw: servebench_load(port, workdir, **kw))]
            if args.engine_python and args.tokenizer:
                tools.append(("vllm bench serve",
                              lambda **kw: vllm_bench(args.engine_python, args.tokenizer, port, workdir, **kw)))
            else:
                print("no engine venv found: measuring servebench only (run the smoke campaign first)")
            for name, run in tools:
                rows.append((name, "concurrency 64", run(clients=64, requests=args.requests)))
                for rate in (500, 1000):
                    rows.append((name, f"Poisson {rate} req/s", run(rate=rate, requests=int(rate * args.seconds))))
        finally:
            nginx.stop()
    print(f"\nload generator on CPU {GENERATOR_CPU}, nginx on CPU {SERVER_CPU}; {TOKENS} streamed tokens per request")
    print(f"{'tool':<18} {'load':<20} {'req/s':>9} {'achieved':>9} {'TTFT p50 ms':>12} {'TTFT p99 ms':>12} "
          f"{'lag p99 ms':>11} {'failed':>7} {'valid':>6}")
    for name, load, r in rows:
        print(f"{name:<18} {load:<20} {fmt(r['req_s'], 0):>9} {fmt(r['achieved'], 1):>9} {fmt(r['ttft_p50'], 3):>12} "
              f"{fmt(r['ttft_p99'], 3):>12} {fmt(r['lag_p99'], 3):>11} {r['failed']:>7} {str(r['valid']):>6}")
    capacity = {name: r["req_s"] for name, load, r in rows if load == "concurrency 64"}
    if len(capacity) == 2:
        print(f"\ncapacity ratio servebench / vllm bench serve: "
              f"{capacity['servebench'] / capacity['vllm bench serve']:.2f}x (target >= 2.5x)")


if __name__ == "__main__":
    main()
