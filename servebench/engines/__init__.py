"""Engine registry: a campaign's `engine.kind` -> its implementation. A new engine is a folder
here and one `register_engine` line below; the first registered is the default kind."""

from __future__ import annotations

from servebench.engines.base import Engine, LaunchRequest, ProcessLaunch, ServerLaunch
from servebench.engines.llamacpp import LlamaCppEngine
from servebench.engines.vllm import VllmEngine

_ENGINES: dict[str, type] = {}


def register_engine(engine_class: type) -> type:
    """Make an engine class available to campaigns under its `kind`."""
    _ENGINES[engine_class.kind] = engine_class
    return engine_class


register_engine(VllmEngine)
register_engine(LlamaCppEngine)


def engine_kinds() -> list[str]:
    return list(_ENGINES)


def default_engine_kind() -> str:
    return next(iter(_ENGINES))


def get_engine(kind: str) -> Engine:
    try:
        return _ENGINES[kind]()
    except KeyError:
        raise ValueError(f"unknown engine {kind!r}; known: {engine_kinds()}") from None


__all__ = ["Engine", "LaunchRequest", "ProcessLaunch", "ServerLaunch", "engine_kinds", "get_engine",
           "register_engine"]
