"""Provider registry: `provider.kind` in a campaign -> its class. A new provider is a folder
here and one `register_provider` line below."""

from __future__ import annotations

from servebench.providers.base import CAPABILITIES, Node, NodeProcess, Provider, check_capabilities, run_tag
from servebench.providers.local import LocalProvider
from servebench.providers.slurm import SlurmProvider
from servebench.providers.ssh import SshProvider

_PROVIDERS: dict[str, type] = {}


def register_provider(provider_class: type) -> type:
    """Make a provider class available to campaigns under its `kind` (its capabilities checked)."""
    check_capabilities(provider_class)
    _PROVIDERS[provider_class.kind] = provider_class
    return provider_class


register_provider(LocalProvider)
register_provider(SshProvider)
register_provider(SlurmProvider)


def provider_kinds() -> list[str]:
    return list(_PROVIDERS)


def get_provider_class(kind: str) -> type:
    try:
        return _PROVIDERS[kind]
    except KeyError:
        raise ValueError(f"unknown provider {kind!r}; known: {provider_kinds()}") from None


def capability_problem(kind: str, capability: str, what: str) -> str | None:
    """Why a campaign's `what` cannot run on provider `kind` (it lacks `capability`), or None."""
    if capability in get_provider_class(kind).capabilities:
        return None
    able = [other for other, cls in _PROVIDERS.items() if capability in cls.capabilities]
    return (f"{what} needs a provider that can {CAPABILITIES[capability]}; provider {kind!r} cannot"
            + (f" (providers that can: {', '.join(able)})" if able else ""))


def get_provider(campaign, reserved_cpus: list[int] | None = None, run_id: str | None = None) -> Provider:
    """The provider of one run; the load generator's CPUs (`reserved_cpus`) are kept from its nodes;
    its processes are marked with the run's tag (`run_tag(run_id)`; a random one without a run)."""
    return get_provider_class(campaign.provider.kind)(campaign.provider, reserved_cpus=reserved_cpus or [],
                                                      run_id=run_tag(run_id) if run_id else None)


__all__ = ["Node", "NodeProcess", "Provider", "capability_problem", "get_provider", "get_provider_class", "provider_kinds",
           "register_provider", "run_tag"]
