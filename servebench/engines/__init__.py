"""Engine registry: a campaign's `engine.kind` -> its implementation. A new engine is a folder
here and one `register_engine` line below; the first registered is the default kind."""

from __future__ import annotations

from servebench.engines.base import Engine, EngineAPI, LaunchRequest, ProcessLaunch, ServerLaunch, contract_problems
from servebench.engines.llamacpp import LlamaCppEngine
from servebench.engines.vllm import VllmEngine

_ENGINES: dict[str, type[Engine]] = {}


class EngineRegistrationError(TypeError):
    """An engine class the neutral code could not use, or a second class for a kind already taken."""


def register_engine(engine_class: type[Engine]) -> type[Engine]:
    """Make an engine class available to campaigns under its `kind`, once it is known to keep the
    contract of `servebench.engines.base` (a broken engine fails here, at import, not mid-run)."""
    name = getattr(engine_class, "__qualname__", repr(engine_class))
    if problems := contract_problems(engine_class):
        raise EngineRegistrationError(f"engine class {name}: " + "; ".join(problems))
    taken = _ENGINES.get(engine_class.kind)
    if taken is not None and taken is not engine_class:
        raise EngineRegistrationError(f"engine class {name}: kind {engine_class.kind!r} is already "
                                      f"{taken.__module__}.{taken.__qualname__}'s")
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


__all__ = ["Engine", "EngineAPI", "EngineRegistrationError", "LaunchRequest", "ProcessLaunch", "ServerLaunch",
           "engine_kinds", "get_engine", "register_engine"]
