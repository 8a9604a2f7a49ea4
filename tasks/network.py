"""Network stage: a campaign's link setting applied to the testbed's host links between cells
(servebench/testbed/links.py sets and reads back the kernel's state), plain again at the end."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NONE

from servebench.campaign.schema import LinkSetting


@task(name="set-links", cache_policy=NONE)
def set_links(testbed: str, link: LinkSetting, node_names: list[str]) -> dict[str, dict]:
    """Every node's link as the setting says (the hosts it names, or all), the others plain;
    the links as the kernel has them afterwards. A link that does not read back as set fails."""
    from servebench.testbed import load
    from servebench.testbed.links import set_link

    layout = load(testbed)
    chosen = set(link.hosts or node_names)
    states = {}
    for name in node_names:
        on = name in chosen
        states[name] = set_link(layout, name, link.delay_ms if on else 0.0, link.rate_mbit if on else None)
        if states[name].get("problems"):
            raise RuntimeError(f"link {name} of testbed {testbed} is not as set: {'; '.join(states[name]['problems'])}")
    return states


def clear_links(testbed: str, node_names: list[str]) -> None:
    """Plain links again (a plain call: it also runs while a Ctrl-C unwinds)."""
    from servebench.testbed import load
    from servebench.testbed.links import clear_link

    layout = load(testbed)
    for name in node_names:
        clear_link(layout, name)
