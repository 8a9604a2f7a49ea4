"""Network stage: a campaign's link setting applied to its nodes' links between cells
(`servebench.serving.links`, through the provider's link-shaping capability)."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NONE

from servebench.config.campaign import LinkSetting
from servebench.providers import Node, Provider
from servebench.serving import links


@task(name="set-links", cache_policy=NONE)
def set_links(provider: Provider, testbed: str, link: LinkSetting, nodes: list[Node]) -> dict[str, dict]:
    return links.set_links(provider, testbed, link, nodes)
