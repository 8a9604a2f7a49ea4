"""Engine registry: a campaign's `engine.kind` -> its implementation. A new engine is a folder
here and one `register_engine` line below; the first registered is the default kind."""

from __future__ import annotations

from servebench.config.campaign import EngineSpecBase
from servebench.engines.base import Engine, EngineAPI, LaunchRequest, ProcessLaunch, ServerLaunch, contract_problems
from servebench.engines.endpoint import EndpointEngine
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
register_engine(EndpointEngine)


def engine_kinds() -> list[str]:
    return list(_ENGINES)


def default_engine_kind() -> str:
    return next(iter(_ENGINES))


def get_engine(kind: str) -> Engine:
    try:
        return _ENGINES[kind]()
    except KeyError:
        raise ValueError(f"unknown engine {kind!r}; known: {engine_kinds()}") from None


def engine_for(spec: EngineSpecBase) -> Engine:
    """The engine of an `engine:` block as the block has it: its kind's, or (an engine measuring another
    engine's server) one speaking that engine's API (`Engine.for_spec`)."""
    return get_engine(spec.kind).for_spec(spec, get_engine)


__all__ = ["Engine", "EngineAPI", "EngineRegistrationError", "LaunchRequest", "ProcessLaunch", "ServerLaunch",
           "engine_for", "engine_kinds", "get_engine", "register_engine"]
