"""Who balances a `replicas` mode's requests over its replicas, decided before anything starts.

Two choices (docs/parallel-modes.md): nginx, one endpoint in front of the replicas where the load generator
runs (servebench/serving/balancer.py), or the load generator itself, each request to the replica with the
fewest requests in flight (servebench/load/balance.py). A cluster user often has no /usr/sbin/nginx and
cannot install one, so nginx is looked up where the campaign says (`balancing.nginx`: a site module's, a
build of one's own), else on PATH, else at Debian's /usr/sbin/nginx (an ordinary user's PATH lacks /usr/sbin).
A mode's `balanced_by` or the campaign's `balancing.by` chooses; left to the default, nginx where one is
found, else the load generator, and `servebench plan` says which and why. A campaign that asks for nginx
where there is none is refused at validation, naming what is missing and both ways out.

Where nginx would run on another host (a client node of an ssh or Slurm provider) nothing can be looked at
before the run: the lookup is made there when the mode's server starts (`remote_lookup_argv`).
"""

from __future__ import annotations

import os
import shlex
import shutil
from dataclasses import dataclass
from typing import Callable, Literal

from servebench.builds.prerequisites import Prerequisite
from servebench.config.campaign import Campaign, ModeSpec

SYSTEM_NGINX = "/usr/sbin/nginx"   # Debian's nginx-light or nginx package
Balancing = Literal["nginx", "client"]
CHOICES = ("name the binary (`balancing: {nginx: /path/to/sbin/nginx}`: a site module's, your own build) or "
           "put it on PATH; or let the load generator balance (`balanced_by: client` on the mode, or "
           "`balancing: {by: client}`)")


@dataclass(frozen=True)
class NginxFound:
    """The outcome of looking for nginx on one host: the binary (None: none) and where it was looked for."""

    binary: str | None
    looked: str


def find_nginx(named: str | None = None, path: str | None = None, system: str | None = None) -> NginxFound:
    """nginx on this host: the campaign's `named` binary (only it, when given), else `nginx` on PATH
    (`path`; None: this process's), else `system` (None: SYSTEM_NGINX). An entry is found only if it is an
    executable file."""
    system = SYSTEM_NGINX if system is None else system
    if named is not None:
        usable = os.path.isfile(named) and os.access(named, os.X_OK)
        return NginxFound(named if usable else None, f"the campaign's balancing.nginx {named}"
                          + ("" if usable else (" (not executable)" if os.path.exists(named) else " (no such file)")))
    on_path = shutil.which("nginx", path=os.environ.get("PATH", os.defpath) if path is None else path)
    if on_path is not None:
        return NginxFound(on_path, "PATH")
    usable = os.path.isfile(system) and os.access(system, os.X_OK)
    return NginxFound(system if usable else None, f"PATH, then {system}")


Lookup = Callable[[str | None], NginxFound]   # the campaign's named binary -> what this host has


@dataclass(frozen=True)
class BalancingChoice:
    """A replicas mode's balancing as decided before the run. `checked`: nginx was looked for on the host it
    would run on (this one); False for a client node on another host, where `remote_lookup_argv` looks when
    the mode starts and, the choice left to the default, the load generator balances if none is there."""

    by: Balancing
    explicit: bool                 # the mode's `balanced_by` or the campaign's `balancing.by` said so
    nginx: str | None              # the binary (found here, or the campaign's named one for another host)
    why: str                       # for the plan: how the choice was made
    checked: bool = True
    problem: str | None = None     # nginx asked for and missing: the campaign is refused with this

    def line(self, mode: str, policy: str) -> str:
        """What `servebench plan` says of the choice, one line."""
        if self.by == "client":
            picking = ("the replica with the fewest requests in flight, ties in turn" if policy == "least-connections"
                       else "the replicas in turn")
            return (f"  balancing by the load generator ({policy}: {picking}; each request's replica in its "
                    f"record): {self.why}")
        return f"  balancing by nginx {self.nginx or 'nginx'}: {self.why}"


def balances_here(campaign: Campaign) -> bool:
    """Whether nginx would run on this host's file system: the load generator's host is this one, or a
    client node of a provider whose nodes are this host's."""
    return campaign.load.client.node is None or campaign.provider.nodes_on_this_host


def balancing_choice(campaign: Campaign, mode: ModeSpec, lookup: Lookup | None = None) -> BalancingChoice:
    """The mode's balancing: its `balanced_by`, else the campaign's `balancing.by`, else nginx where one is
    found and the load generator otherwise. `lookup`: what this host has (default `find_nginx`)."""
    named = campaign.balancing.nginx
    asked = mode.balanced_by or campaign.balancing.by
    source = ("the mode's balanced_by" if mode.balanced_by else "the campaign's balancing.by") if asked else ""
    if asked == "client":
        return BalancingChoice("client", True, None, f"{source}: client")
    if not balances_here(campaign):
        node = campaign.load.client.node
        said = f"{source}: nginx" if asked else f"the campaign names {named}" if named else ""
        why = (f"nginx looked up on node {node} when the mode starts ({named or 'PATH there, then ' + SYSTEM_NGINX})"
               + (f"; {said}, so the mode fails there without it" if said else
                  "; without one there the load generator balances"))
        return BalancingChoice("nginx", bool(said), named, why, checked=False)
    found = (lookup or (lambda given: find_nginx(given)))(named)
    return choice_here(found, mode.name, asked, source, named)


def choice_here(found: NginxFound, mode: str, asked: Balancing | None = None, source: str = "",
                named: str | None = None) -> BalancingChoice:
    """The balancing of a mode that balances on this host, from what was found here: nginx if it is there,
    else the load generator, unless nginx was asked for (`asked`, said by `source`) or named (`named`):
    then a problem that names what is missing and the choices."""
    if found.binary is not None:
        said = f"{source}: nginx; " if asked else ""
        where = "found on PATH" if found.looked == "PATH" else found.looked if named else \
            f"{found.binary} (not on PATH)"
        return BalancingChoice("nginx", bool(asked), found.binary, said + where)
    missing = f"no nginx on this host (looked for: {found.looked})"
    if asked or named:
        said = f"{source}: nginx" if asked else f"the campaign names {named}"
        return BalancingChoice("nginx", True, None, missing, problem=(
            f"mode {mode}: {said}, but there is {missing}: {CHOICES}"))
    return BalancingChoice("client", False, None, f"{missing}, so the load generator balances; for nginx, {CHOICES}")


def balancing_problems(campaign: Campaign, lookup: Lookup | None = None) -> list[tuple[tuple, str]]:
    """Each replicas mode that asks for nginx where there is none, at the field that asks."""
    problems: list[tuple[tuple, str]] = []
    for index, mode in enumerate(campaign.modes):
        if mode.replicas == 1:
            continue
        choice = balancing_choice(campaign, mode, lookup)
        if choice.problem is None:
            continue
        field = (("modes", index, "balanced_by") if mode.balanced_by else ("balancing", "by")
                 if campaign.balancing.by else ("balancing", "nginx"))
        problems.append((field, choice.problem))
    return list(dict.fromkeys(problems))


def balancing_prerequisites(campaign: Campaign, lookup: Lookup | None = None) -> list[Prerequisite]:
    """`servebench build --dry-run`'s lines for the replicas modes: nginx for each that balances with it
    (met when found here, or when it is looked up on another host at the start), the load generator for
    the others; unmet only where nginx is asked for and missing (the campaign is refused then too)."""
    rows = []
    for mode in campaign.modes:
        if mode.replicas == 1:
            continue
        choice = balancing_choice(campaign, mode, lookup)
        if choice.by == "client":
            rows.append(Prerequisite(name=f"balancer of mode {mode.name}", met=True,
                                     found=f"the load generator ({choice.why})", needed="nginx or the load generator"))
            continue
        found = (choice.nginx or "missing") if choice.checked else choice.why
        rows.append(Prerequisite(name=f"balancer of mode {mode.name}", met=choice.problem is None, found=found,
                                 needed="nginx (balanced_by: nginx)" if choice.explicit else "nginx or the load "
                                 "generator", fix=CHOICES))
    return rows


def remote_lookup_argv(named: str | None, system: str = SYSTEM_NGINX) -> list[str]:
    """A short command for a node of another host: prints the nginx binary there (the named one if it is
    executable, else `nginx` on PATH, else `system`) or nothing."""
    if named is not None:
        script = f"test -x {shlex.quote(named)} && echo {shlex.quote(named)}"
    else:
        script = f"command -v nginx || {{ test -x {shlex.quote(system)} && echo {shlex.quote(system)}; }}"
    return ["/bin/sh", "-c", script + "; true"]
