"""A stand-in for an engine that keeps its core busy: the fake OpenAI server (a real HTTP
server on loopback) plus spinner processes, pinned together to the CPUs given.

A real CPU engine runs OpenMP threads that spin between kernels, so under load its cores
are never idle; the tiny random-weight vLLM model used elsewhere leaves its core idle
between short steps, and a generator sharing that core keeps its schedule. This server
makes the contention certain, so a test can show the generator's validity check fail.

Run as a script: `python -m tests.support.busy_engine_server --cpus 0 --spinners 4 --port-file F`;
it writes its port to F and serves until SIGTERM.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import signal
import threading
from pathlib import Path

from tests.support.fake_openai_server import FakeServer


def spin() -> None:
    while True:
        pass


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cpus", required=True, help="CPU list, e.g. 0")
    parser.add_argument("--spinners", type=int, default=4)
    parser.add_argument("--token-delay", type=float, default=0.002)
    parser.add_argument("--port-file", required=True)
    args = parser.parse_args()
    os.sched_setaffinity(0, {int(c) for c in args.cpus.split(",")})  # inherited by the spinners
    spinners = [multiprocessing.Process(target=spin, daemon=True) for _ in range(args.spinners)]
    for process in spinners:
        process.start()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        with FakeServer("ok", token_delay_s=args.token_delay) as server:
            Path(args.port_file).write_text(str(server.port))
            stop.wait()
    finally:
        for process in spinners:
            process.kill()
            process.join(5)


if __name__ == "__main__":
    main()
