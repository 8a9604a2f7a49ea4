"""Provider registry: `provider.kind` in a campaign -> its class. A new provider is a folder
here and one `register_provider` line below."""

from __future__ import annotations

import inspect
from typing import Callable, TypeVar, cast

from servebench.providers.base import (
    CAPABILITIES,
    LinkShaper,
    Node,
    NodeAllocation,
    NodeCommands,
    NodeFiles,
    NodeProcess,
    NodeProcesses,
    Provider,
    check_capabilities,
    run_tag,
)
from servebench.providers.local import LocalProvider
from servebench.providers.slurm import SlurmProvider
from servebench.providers.ssh import SshProvider

_PROVIDERS: dict[str, type[Provider]] = {}

_ProviderT = TypeVar("_ProviderT", bound=Provider)


def register_provider(provider_class: type[_ProviderT]) -> type[_ProviderT]:
    """Make a provider class available to campaigns under its `kind`: its capabilities checked, and
    refused unless it is a whole `Provider` (a method missing would fail mid-run, not here)."""
    check_capabilities(provider_class)
    check_complete(provider_class)
    _PROVIDERS[provider_class.kind] = provider_class
    return provider_class


def check_complete(provider_class: type) -> None:
    """TypeError unless the class is a `Provider` with every abstract method implemented, naming what is missing."""
    if not (isinstance(provider_class, type) and issubclass(provider_class, Provider)):
        raise TypeError(f"provider {provider_class.__name__} is not a servebench.providers.base.Provider subclass")
    if inspect.isabstract(provider_class):
        missing = ", ".join(sorted(provider_class.__abstractmethods__))
        raise TypeError(f"provider {provider_class.__name__} is abstract: it lacks {missing}")


register_provider(LocalProvider)
register_provider(SshProvider)
register_provider(SlurmProvider)


def provider_kinds() -> list[str]:
    return list(_PROVIDERS)


def get_provider_class(kind: str) -> type[Provider]:
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


def get_provider(campaign, reserved_cpus: list[int] | None = None, run_id: str | None = None,
                 links: LinkShaper | None = None) -> Provider:
    """The provider of one run; the load generator's CPUs (`reserved_cpus`) are kept from its nodes;
    its processes are marked with the run's tag (`run_tag(run_id)`; a random one without a run);
    `links` shapes its nodes' links (LINK_SHAPING: the testbed's, `servebench.devtools.testbed.links.TestbedLinks`)."""
    # Every registered provider class takes (spec, reserved_cpus=, run_id=): the registry's convention for
    # constructors, which `Provider` itself (an ABC without an __init__ of its own) cannot declare.
    provider_class = cast(Callable[..., Provider], get_provider_class(campaign.provider.kind))
    provider = provider_class(campaign.provider, reserved_cpus=reserved_cpus or [],
                              run_id=run_tag(run_id) if run_id else None)
    if links is not None:
        provider.use_link_shaper(links)
    return provider


__all__ = ["LinkShaper", "Node", "NodeAllocation", "NodeCommands", "NodeFiles", "NodeProcess", "NodeProcesses",
           "Provider", "capability_problem", "get_provider", "get_provider_class", "provider_kinds",
           "register_provider", "run_tag"]
