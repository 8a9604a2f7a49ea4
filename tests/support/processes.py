"""What the end-to-end tests look for after a run: no engine or load-generator process left."""

from __future__ import annotations

import psutil


def engine_processes() -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if "vllm.entrypoints" in cmdline or "VLLM::" in cmdline or "servebench load" in cmdline:
            found.append(proc)
    return found
