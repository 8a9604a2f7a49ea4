"""A trivial OpenAI-compatible server for the test-only `echo` engine: standard library only,
so it runs with the bare venv the engine's recipe builds.

Greedy answers are a pure function of the prompt (token i = (sum(prompt) + 7 i) % vocab),
so every mode answers the correctness gate alike. It streams completions with the running
usage in every chunk when asked (`stream_options.continuous_usage_stats`), answers
non-streamed completions with logprobs, exposes /health and Prometheus /metrics, logs its
KV capacity at start-up like a real engine, and with `--worker-port` first checks that
its worker process (`--serve-worker`, started earlier on another node) accepts.

    python server.py --host 127.0.2.1 --port 8000 --model-dir M --served-name tiny
    python server.py --serve-worker --host 127.0.2.2 --port 9000
"""

from __future__ import annotations

import argparse
import json
import socket
import socketserver
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

KV_CAPACITY_TOKENS = 4096


class State:
    def __init__(self, vocab: int, served_name: str, delay_s: float, prefill_s: float = 0.0):
        self.vocab, self.served_name, self.delay_s, self.prefill_s = vocab, served_name, delay_s, prefill_s
        self.lock = threading.Lock()
        self.engine = threading.Lock()  # one prefill at a time: a server of capacity 1 / prefill_s
        self.running = 0
        self.prompt_tokens = 0
        self.generated = 0


def answer(prompt: list[int], count: int, vocab: int) -> list[int]:
    return [(sum(prompt) + 7 * i) % vocab for i in range(count)]


def handler(state: State) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:  # quiet: the log holds start-up lines only
            return

        def do_GET(self) -> None:
            if self.path == "/health":
                self._send(200, b"ok", "text/plain")
            elif self.path == "/metrics":
                with state.lock:
                    text = (f"# TYPE echo_requests_running gauge\necho_requests_running {state.running}\n"
                            f"# TYPE echo_kv_usage gauge\necho_kv_usage {min(1.0, state.running / 64):.4f}\n"
                            f"# TYPE echo_prompt_tokens counter\necho_prompt_tokens_total {state.prompt_tokens}\n"
                            f"# TYPE echo_generation_tokens counter\n"
                            f"echo_generation_tokens_total {state.generated}\n")
                self._send(200, text.encode(), "text/plain; version=0.0.4")
            else:
                self._send(404, b"not found", "text/plain")

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            if self.path != "/v1/completions" or not isinstance(body.get("prompt"), list):
                self._send(400, b'{"error": "token-id prompts on /v1/completions only"}', "application/json")
                return
            prompt, count = body["prompt"], int(body.get("max_tokens") or 16)
            tokens = answer(prompt, count, state.vocab)
            with state.lock:
                state.running += 1
                state.prompt_tokens += len(prompt)
            try:
                if state.prefill_s:
                    with state.engine:
                        time.sleep(state.prefill_s)
                if body.get("stream"):
                    self._stream(prompt, tokens, body.get("stream_options") or {})
                else:
                    self._complete(prompt, tokens, int(body.get("logprobs") or 0))
            finally:
                with state.lock:
                    state.running -= 1

        def _complete(self, prompt: list[int], tokens: list[int], top: int) -> None:
            with state.lock:
                state.generated += len(tokens)
            logprobs = {"tokens": [str(t) for t in tokens], "token_logprobs": [-0.5] * len(tokens),
                        "top_logprobs": [{str(t): -0.5, **{str((t + k) % state.vocab): -1.0 - k
                                                          for k in range(1, top)}} for t in tokens]}
            choice = {"index": 0, "text": " ".join(map(str, tokens)), "logprobs": logprobs, "finish_reason": "length"}
            usage = {"prompt_tokens": len(prompt), "completion_tokens": len(tokens),
                     "total_tokens": len(prompt) + len(tokens)}
            self._send(200, json.dumps({"choices": [choice], "usage": usage, "model": state.served_name}).encode(),
                       "application/json")

        def _stream(self, prompt: list[int], tokens: list[int], options: dict) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for done, token in enumerate(tokens, 1):
                time.sleep(state.delay_s)
                with state.lock:
                    state.generated += 1
                chunk = {"choices": [{"index": 0, "text": f" {token}", "finish_reason": None}]}
                if options.get("continuous_usage_stats"):
                    chunk["usage"] = {"prompt_tokens": len(prompt), "completion_tokens": done,
                                      "total_tokens": len(prompt) + done}
                self._chunk(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            if options.get("include_usage"):
                usage = {"prompt_tokens": len(prompt), "completion_tokens": len(tokens),
                         "total_tokens": len(prompt) + len(tokens)}
                self._chunk(b"data: " + json.dumps({"choices": [], "usage": usage}).encode() + b"\n\n")
            self._chunk(b"data: [DONE]\n\n")
            self._chunk(b"")

        def _chunk(self, data: bytes) -> None:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

        def _send(self, status: int, data: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler


class EchoWorker(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        self.wfile.write(self.rfile.readline())


def serve_worker(host: str, port: int) -> None:
    socketserver.ThreadingTCPServer.allow_reuse_address = True
    with socketserver.ThreadingTCPServer((host, port), EchoWorker) as server:
        print(f"worker listening on {host}:{port}", flush=True)
        server.serve_forever()


def check_worker(address: str) -> None:
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as connection:
        connection.sendall(b"ping\n")
        if connection.makefile().readline().strip() != "ping":
            sys.exit(f"worker at {address} did not echo")
    print(f"worker at {address} answered", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--serve-worker", action="store_true")
    parser.add_argument("--model-dir")
    parser.add_argument("--served-name", default="model")
    parser.add_argument("--worker", help="host:port of the worker to check before serving")
    parser.add_argument("--token-delay-ms", type=float, default=2.0)
    parser.add_argument("--prefill-ms", type=float, default=0.0)
    args = parser.parse_args()
    if args.serve_worker:
        serve_worker(args.host, args.port)
        return
    if args.worker:
        check_worker(args.worker)
    vocab = int(json.loads((Path(args.model_dir) / "config.json").read_text())["vocab_size"])
    state = State(vocab, args.served_name, args.token_delay_ms / 1000.0, args.prefill_ms / 1000.0)
    print(f"echo server: capacity {KV_CAPACITY_TOKENS} tokens, vocab {vocab}", flush=True)
    ThreadingHTTPServer((args.host, args.port), handler(state)).serve_forever()


if __name__ == "__main__":
    main()
