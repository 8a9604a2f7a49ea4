"""Provider registry: `provider.kind` in a campaign -> implementation."""

from __future__ import annotations

from servebench.providers.base import Node, Provider
from servebench.providers.local import LocalProvider


def get_provider(spec) -> Provider:
    if spec.kind == "local":
        return LocalProvider(spec)
    raise ValueError(f"unknown provider {spec.kind!r}; known: ['local']")


__all__ = ["Node", "Provider", "get_provider"]
