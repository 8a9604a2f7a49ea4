"""A campaign's link setting applied to its nodes' links between cells, through the
provider (its LINK_SHAPING capability, with the testbed's link shaper handed to it: testbed hosts'
links, servebench/devtools/testbed/links.py, set and read back), plain again at the end."""

from __future__ import annotations

from servebench.config.campaign import LinkSetting
from servebench.devtools.testbed.links import with_testbed_links
from servebench.providers import Node, Provider


def set_links(provider: Provider, testbed: str, link: LinkSetting, nodes: list[Node]) -> dict[str, dict]:
    """Every node's link as the setting says (the hosts it names, or all), the others plain;
    the links as the kernel has them afterwards. A link that does not read back as set fails."""
    provider = with_testbed_links(provider)
    chosen = set(link.hosts or [node.name for node in nodes])
    states = {}
    for node in nodes:
        on = node.name in chosen
        states[node.name] = provider.shape_link(testbed, node, link.delay_ms if on else 0.0,
                                                link.rate_mbit if on else None)
        if states[node.name].get("problems"):
            raise RuntimeError(f"link {node.name} of testbed {testbed} is not as set: "
                               f"{'; '.join(states[node.name]['problems'])}")
    return states


def clear_links(provider: Provider, testbed: str, nodes: list[Node]) -> None:
    """Plain links again (a plain call: it also runs while a Ctrl-C unwinds)."""
    provider = with_testbed_links(provider)
    for node in nodes:
        provider.shape_link(testbed, node, 0.0, None)
