"""Whether the load generator can run at the campaign's nice value here (`load.client.nice`), and
what `servebench plan` says about it.

A process may always lower its own priority (a higher nice value). Raising it (a nice value below
the current one) needs root, the CAP_SYS_NICE capability, or an RLIMIT_NICE soft limit of at least
20 - nice (Linux: the limit r allows nice values down to 20 - r; most distributions give users 0).
`nice_verdict` decides from those facts (pure); `this_process` reads them.
"""

from __future__ import annotations

import os
import resource
from dataclasses import dataclass

CAP_SYS_NICE = 23  # the bit in /proc/PID/status's CapEff


@dataclass(frozen=True)
class PriorityFacts:
    """What decides whether this process may lower its nice value."""

    current: int              # the nice value it runs at now
    euid: int
    cap_sys_nice: bool        # CAP_SYS_NICE in its effective capabilities
    rlimit_nice: int | None   # RLIMIT_NICE's soft limit (None: unlimited)


def this_process() -> PriorityFacts:
    soft, _hard = resource.getrlimit(resource.RLIMIT_NICE)
    return PriorityFacts(current=os.getpriority(os.PRIO_PROCESS, 0), euid=os.geteuid(),
                         cap_sys_nice=_has_capability(CAP_SYS_NICE),
                         rlimit_nice=None if soft == resource.RLIM_INFINITY else int(soft))


def _has_capability(bit: int) -> bool:
    try:
        for line in open("/proc/self/status"):
            if line.startswith("CapEff:"):
                return bool(int(line.split()[1], 16) >> bit & 1)
    except (OSError, ValueError):
        pass
    return False


def nice_verdict(wanted: int, facts: PriorityFacts) -> tuple[int, str | None]:
    """(the nice value the generator will run at, why not `wanted`; None when it is `wanted`)."""
    if wanted >= facts.current or facts.euid == 0 or facts.cap_sys_nice:
        return wanted, None
    if facts.rlimit_nice is None or wanted >= 20 - facts.rlimit_nice:
        return wanted, None
    needed = 20 - wanted
    return facts.current, (f"nice {wanted} needs root, CAP_SYS_NICE or RLIMIT_NICE >= {needed}; this user has "
                           f"RLIMIT_NICE {facts.rlimit_nice} (`ulimit -e`; a site grants more in "
                           "/etc/security/limits.conf)")


def nice_text(wanted: int, facts: PriorityFacts, client_node: str | None = None) -> str:
    """The plan's words on the generator's priority."""
    if client_node is not None:
        return f"nice {wanted} on {client_node} where its user may raise priority there (else its current nice)"
    value, why = nice_verdict(wanted, facts)
    if why is None:
        return f"nice {value}"
    return f"runs at its current nice {value}, not {wanted}: {why}"
