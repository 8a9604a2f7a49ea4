"""Engine registry: one place that maps a campaign's `engine.kind` to its implementation."""

from __future__ import annotations

from servebench.engines.base import Engine, ServerLaunch
from servebench.engines.vllm import VllmEngine

_ENGINES: dict[str, type] = {"vllm": VllmEngine}


def get_engine(kind: str) -> Engine:
    try:
        return _ENGINES[kind]()
    except KeyError:
        raise ValueError(f"unknown engine {kind!r}; known: {sorted(_ENGINES)}") from None


__all__ = ["Engine", "ServerLaunch", "get_engine"]
