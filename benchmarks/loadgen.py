"""How much does the load generator itself add? servebench vs `vllm bench serve`, one run.

Starts nginx (Debian's) on loopback answering every POST at once with a fixed SSE body of
64 token events plus usage, pins the generator to one core and nginx to the other, and
prints, side by side:
- the maximum sustained request rate at concurrency 64 (closed loop);
- client-added TTFT p50/p99 and schedule lag p99 at 500 and 1000 req/s (Poisson).
The server answers in ~0.1 ms, so any TTFT above that is the client's own overhead.

    flock /tmp/servebench-heavy.lock python benchmarks/loadgen.py [--engine-python PATH] [--requests N]
        [--seconds S] [--workloads] [--no-vllm] [--wire] [--all-cpus-poll] [--generator-halts] [--tree DIR]

`--engine-python` is the engine venv's python (default: the smoke campaign's cached
build) for `vllm bench serve`; without it (or with `--no-vllm`), only servebench is measured.
`--workloads` adds servebench's rows for two workloads (docs/workloads.md) beside the fixed one:
a dataset (JSONL of token ids, 16-200 tokens, mean ~108: 7x the fixed prompt) at the same three
loads, and a Mooncake trace of Poisson arrivals (prompts 16-200 tokens, shared 512-token blocks
left out) replayed at 500 and 1000 req/s and, for its capacity, all at once under 64 clients; and
prints each one's capacity as a fraction of the fixed one's (the target: at least 80 %).
`--tree DIR` measures the `servebench load` of another checkout (e.g. a `git worktree` of an
older commit, run with this environment's python): an A/B of the generator's own cost.
`servebench load` itself keeps its own CPU polling when idle while it measures (`--idle-poll auto`,
servebench/load/pinning.py: it runs pinned apart from nginx): a halted vCPU's wake-up is not stamped
into its TTFT. `--generator-halts` turns that off (`--idle-poll off`) to show what it is worth;
`--all-cpus-poll` holds /dev/cpu_dma_latency at 0 (benchmarks/cpu_latency.py): every idle CPU polls,
nginx's too, which takes the server's own wake-up out of what this table calls client-added TTFT.
`vllm bench serve` runs with the machine's idle behaviour unless `--all-cpus-poll`.
`--wire` (root, tcpdump) captures servebench's open-loop runs on lo and prints the client's own share
of TTFT per request: servebench's TTFT minus the wire's, so nginx's and its CPU's delays, which the
stamped TTFT p99 includes, are left out (docs/load-generator.md, "What a TTFT p99 against nginx is made of").
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.cpu_latency import idle_states, zero_wakeup_latency  # noqa: E402
from benchmarks.wire_streams import exchanges  # noqa: E402
from benchmarks.wire_truth import ClockOffset, differences, match, skip_reason, start_capture, stop_capture  # noqa: E402
from servebench.load.config import LoadConfig  # noqa: E402
from servebench.load.metrics import percentile  # noqa: E402
from servebench.processes import ManagedProcess, free_port  # noqa: E402

TOKENS = 64
TREE = ROOT  # the checkout whose `servebench load` is measured (--tree)
GENERATOR_HALTS = False  # --generator-halts: servebench load --idle-poll off
WIRE = False  # --wire: open-loop runs captured on lo, the client's own share of TTFT measured on packets
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


def dataset_file(workdir: Path, lines: int = 2000, seed: int = 0) -> Path:
    """JSONL of `{"prompt_ids": [...], "output_len": 64}`, prompts of 16-200 random token ids."""
    rng = random.Random(seed)
    path = workdir / "dataset.jsonl"
    with path.open("w") as f:
        for _ in range(lines):
            ids = [rng.randrange(3, 32000) for _ in range(rng.randint(16, 200))]
            f.write(json.dumps({"prompt_ids": ids, "output_len": TOKENS}) + "\n")
    return path


def trace_file(workdir: Path, requests: int, seed: int = 0) -> Path:
    """A Mooncake trace of `requests` Poisson arrivals (mean gap 1 ms; `--rate` rescales it), prompts
    of 16-200 tokens without hash ids (every prompt its own), 64 answer tokens each."""
    rng = random.Random(seed)
    path = workdir / "trace.jsonl"
    t_ms = 0.0
    with path.open("w") as f:
        for _ in range(requests):
            f.write(json.dumps({"timestamp": round(t_ms, 3), "input_length": rng.randint(16, 200),
                                "output_length": TOKENS, "hash_ids": []}) + "\n")
            t_ms += rng.expovariate(1.0)
    return path


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
                    requests: int, workload: str | None = None) -> dict:
    """One run; `workload` a --workload block (else the fixed 16-token prompts). With --wire, an open-loop
    run of the fixed workload is captured on lo and its client-added TTFT measured against the packets."""
    if WIRE and rate and not workload:
        return on_the_wire(port, workdir, lambda: _servebench_load(port, workdir, clients=clients, rate=rate,
                                                                  requests=requests, workload=workload))
    return _servebench_load(port, workdir, clients=clients, rate=rate, requests=requests, workload=workload)


def on_the_wire(port: int, workdir: Path, run) -> dict:
    """`run()` under a loopback capture (tcpdump on nginx's CPU); adds the client's own share of each TTFT:
    servebench's TTFT minus the wire's (its send stamp before the request's first packet, its first-token
    stamp after the first token event's packet), which leaves out nginx's and its CPU's delays."""
    pcap, log = workdir / "lo.pcap", workdir / "tcpdump.log"
    log.unlink(missing_ok=True)
    capture = start_capture(port, pcap, log, cpu=int(SERVER_CPU))
    try:
        row = run()
    finally:
        counts = stop_capture(capture, pcap, log)
    result = json.loads((workdir / "servebench.json").read_text())
    pairs, problems = match(result, LoadConfig(**result["config"]), exchanges(pcap, port))
    pcap.unlink()
    added = sorted(differences(pairs, result["t0"]["monotonic"], ClockOffset.sample())["TTFT"])
    row.update(wire_n=len(added), wire_p50=percentile(added, 50), wire_p99=percentile(added, 99),
               wire_problems=problems[:3] + ([f"... {len(problems) - 3} more"] if len(problems) > 3 else []),
               tcpdump=counts)
    return row


def _servebench_load(port: int, workdir: Path, *, clients: int | None = None, rate: float | None = None,
                     requests: int, workload: str | None = None) -> dict:
    out = workdir / "servebench.json"
    lengths = ["--workload", workload] if workload else ["--input-len", "16", "--output-len", str(TOKENS)]
    argv = ["taskset", "-c", GENERATOR_CPU, sys.executable, "-m", "servebench", "load", "--engine", "vllm",
            "--base-url", f"http://127.0.0.1:{port}", "--model", "tiny", *lengths,
            "--requests", str(requests), "--token-counter", "", "--timeout", "30",
            "--output-json", str(out), "--quiet"]
    argv += ["--clients", str(clients)] if clients else []
    argv += ["--rate", str(rate)] if rate else []
    argv += ["--idle-poll", "off"] if GENERATOR_HALTS else []
    subprocess.run(argv, check=True, cwd=TREE)  # `-m` imports servebench from the working directory first
    summary = json.loads(out.read_text())["summary"]
    return {"idle_poll": summary["client"].get("idle_poll_cpus"), "req_s": summary["request_throughput"],
            "ttft_p50": summary["ttft_ms"]["p50"], "ttft_p99": summary["ttft_ms"]["p99"],
            "lag_p99": summary["schedule_lag_ms"]["p99"],
            "achieved": summary["achieved_rate"], "offered": summary["scheduled_rate"],
            "failed": summary["failed"], "valid": summary["valid"], "why": summary.get("invalid_reasons") or []}


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
    done = subprocess.run(argv, capture_output=True, text=True, errors="replace", env=env)
    if done.returncode != 0 or not out.exists():
        raise RuntimeError(f"vllm bench serve failed ({done.returncode}): {done.stderr[-1500:]}")
    result = json.loads(out.read_text())
    return {"req_s": result["request_throughput"], "ttft_p50": result["p50_ttft_ms"],
            "ttft_p99": result["p99_ttft_ms"], "lag_p99": None,
            "achieved": result["completed"] / result["duration"], "offered": rate,
            "failed": result.get("failed", 0), "valid": None}


def workload_rows(port: int, workdir: Path, requests: int, seconds: float) -> list[tuple[str, str, dict]]:
    """servebench with a dataset (the fixed rows' three loads) and with a trace (all at once under 64
    clients, then rescaled to 500 and 1000 req/s mean)."""
    rows = []
    dataset = f"{{kind: dataset, format: jsonl, path: {dataset_file(workdir)}}}"
    rows.append(("servebench dataset", "concurrency 64",
                 servebench_load(port, workdir, clients=64, requests=requests, workload=dataset)))
    for rate in (500, 1000):
        rows.append(("servebench dataset", f"Poisson {rate} req/s",
                     servebench_load(port, workdir, rate=rate, requests=int(rate * seconds), workload=dataset)))
    trace_path = trace_file(workdir, max(requests, int(1000 * seconds)))
    at_once = f"{{kind: trace, format: mooncake, path: {trace_path}, time_scale: 0.000001}}"
    rows.append(("servebench trace", "concurrency 64",
                 servebench_load(port, workdir, clients=64, requests=requests, workload=at_once)))
    trace = f"{{kind: trace, format: mooncake, path: {trace_path}}}"
    for rate in (500, 1000):
        rows.append(("servebench trace", f"trace {rate} req/s",
                     servebench_load(port, workdir, rate=rate, requests=int(rate * seconds), workload=trace)))
    return rows


def starts(python: Path) -> bool:
    try:
        return subprocess.run([python, "-c", ""], capture_output=True).returncode == 0
    except OSError:  # Exec format error: a build for another architecture
        return False


def default_engine() -> tuple[str | None, str | None]:
    cache = Path(os.environ.get("SERVEBENCH_CACHE", Path.home() / ".cache" / "servebench"))
    pythons = sorted(cache.glob("engines/vllm-*/bin/python"), key=lambda p: p.stat().st_mtime, reverse=True)
    runs = [p for p in pythons if starts(p)]  # not another architecture's build
    models = sorted((p for p in cache.glob("models/tiny-llama-*") if p.is_dir()), key=lambda p: p.stat().st_mtime)
    return (str(runs[0]) if runs else None), (str(models[-1]) if models else None)


def git_head(tree: Path) -> str:
    done = subprocess.run(["git", "-C", str(tree), "log", "-1", "--format=%h %s"], capture_output=True, text=True)
    return done.stdout.strip()[:72] or "not a git checkout"


def fmt(value, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    engine_python, tokenizer = default_engine()
    parser.add_argument("--engine-python", default=engine_python)
    parser.add_argument("--tokenizer", default=tokenizer, help="model dir for vllm bench serve's tokenizer")
    parser.add_argument("--requests", type=int, default=20000, help="requests per capacity measurement")
    parser.add_argument("--seconds", type=float, default=15.0, help="length of each rate measurement")
    parser.add_argument("--workloads", action="store_true",
                        help="also servebench with a dataset and a trace workload")
    parser.add_argument("--no-vllm", action="store_true", help="servebench only")
    parser.add_argument("--all-cpus-poll", action="store_true", help="every idle CPU polls during the runs (root)")
    parser.add_argument("--wire", action="store_true",
                        help="capture the open-loop runs on lo (root, tcpdump): the client's own share of TTFT")
    parser.add_argument("--generator-halts", action="store_true",
                        help="servebench load --idle-poll off: its CPU halts when idle, as the machine has it")
    parser.add_argument("--tree", type=Path, default=ROOT, help="the servebench checkout to measure")
    args = parser.parse_args()
    global TREE, GENERATOR_HALTS, WIRE
    TREE, GENERATOR_HALTS, WIRE = args.tree.resolve(), args.generator_halts, args.wire
    if WIRE and skip_reason():
        sys.exit(f"--wire: {skip_reason()}")
    if shutil.which("nginx") is None:
        sys.exit("nginx is needed: apt-get install -y nginx")
    rows = []
    print(idle_states(int(GENERATOR_CPU)))
    with tempfile.TemporaryDirectory() as tmp, zero_wakeup_latency(args.all_cpus_poll) as idle:
        workdir = Path(tmp)
        nginx, port = start_nginx(workdir)
        try:
            tools = [("servebench", lambda **kw: servebench_load(port, workdir, **kw))]
            if args.no_vllm:
                pass
            elif args.engine_python and args.tokenizer:
                tools.append(("vllm bench serve",
                              lambda **kw: vllm_bench(args.engine_python, args.tokenizer, port, workdir, **kw)))
            else:
                print("no engine venv found: measuring servebench only (run the smoke campaign first)")
            for name, run in tools:
                rows.append((name, "concurrency 64", run(clients=64, requests=args.requests)))
                for rate in (500, 1000):
                    rows.append((name, f"Poisson {rate} req/s", run(rate=rate, requests=int(rate * args.seconds))))
            if args.workloads:
                rows += workload_rows(port, workdir, args.requests, args.seconds)
        finally:
            nginx.stop()
    print(f"\nservebench load of {TREE} ({git_head(TREE)})")
    print(f"load generator on CPU {GENERATOR_CPU}, nginx on CPU {SERVER_CPU}; {TOKENS} streamed tokens per request; "
          f"{idle}")
    held = sorted({str(r.get("idle_poll")) for name, _, r in rows if name.startswith("servebench")})
    print(f"servebench load's own CPU polling when idle: {', '.join(held)} "
          f"({'--idle-poll off' if GENERATOR_HALTS else 'CPU list held; None: not held or an older tree'})")
    print(f"{'tool':<18} {'load':<20} {'req/s':>9} {'achieved':>9} {'TTFT p50 ms':>12} {'TTFT p99 ms':>12} "
          f"{'lag p99 ms':>11} {'failed':>7} {'valid':>6}")
    for name, load, r in rows:
        print(f"{name:<18} {load:<20} {fmt(r['req_s'], 0):>9} {fmt(r['achieved'], 1):>9} {fmt(r['ttft_p50'], 3):>12} "
              f"{fmt(r['ttft_p99'], 3):>12} {fmt(r['lag_p99'], 3):>11} {r['failed']:>7} {str(r['valid']):>6}")
    wired = [(name, load, r) for name, load, r in rows if r.get("wire_n") is not None]
    if wired:
        print("\nthe client's own share of TTFT, on the wire (servebench's TTFT - the packets': its send stamp before "
              "the request's first packet + its first-token stamp after the first token event's packet; nginx's "
              "and its CPU's delays left out)")
        print(f"{'tool':<18} {'load':<20} {'matched':>8} {'p50 ms':>9} {'p99 ms':>9}  capture")
        for name, load, r in wired:
            print(f"{name:<18} {load:<20} {r['wire_n']:>8} {fmt(r['wire_p50'], 3):>9} {fmt(r['wire_p99'], 3):>9}  "
                  f"{r['tcpdump']}")
            for problem in r["wire_problems"]:
                print(f"  {name}, {load}: wire: {problem}")
    for name, load, r in rows:
        for reason in r.get("why", []):
            print(f"  {name}, {load}: invalid: {reason}")
    capacity = {name: r["req_s"] for name, load, r in rows if load == "concurrency 64"}
    for name in [n for n in capacity if n.startswith("servebench ")]:
        print(f"capacity {name} / servebench fixed: {capacity[name] / capacity['servebench']:.2f} (target >= 0.80)")
    if "vllm bench serve" in capacity:
        print(f"\ncapacity ratio servebench / vllm bench serve: "
              f"{capacity['servebench'] / capacity['vllm bench serve']:.2f}x (target >= 2.5x)")


if __name__ == "__main__":
    main()
