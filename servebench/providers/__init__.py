"""Provider registry: `provider.kind` in a campaign -> implementation."""

from __future__ import annotations

from servebench.providers.base import Node, Provider
from servebench.providers.local import LocalProvider


def get_provider(campaign) -> Provider:
    """The campaign's provider; local nodes leave the load generator's CPUs to it."""
    from servebench.campaign.schema import client_placement

    if campaign.provider.kind == "local":
        return LocalProvider(campaign.provider, reserved_cpus=client_placement(campaign).cpus or [])
    raise ValueError(f"unknown provider {campaign.provider.kind!r}; known: ['local']")


__all__ = ["Node", "Provider", "get_provider"]
