"""Commands that must not reach the network: `servebench plan`, `predict` and `build --dry-run`.

A login node often has the network and compute nodes do not; a plan is read on either, and a dry run
says what a build would fetch without fetching it. Inside `no_network()`, every place servebench
would download (an sdist from the package index, a git clone or fetch, Debian packages for a
sysroot) raises `NeedsNetwork` instead, naming what is missing and the command that fetches it;
the caller prints that as a line of its output."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

_OFFLINE: contextvars.ContextVar[bool] = contextvars.ContextVar("servebench_offline", default=False)


class NeedsNetwork(RuntimeError):
    """What a command run without the network would have had to download."""


@contextlib.contextmanager
def no_network() -> Iterator[None]:
    """Within: every download servebench would start raises NeedsNetwork."""
    token = _OFFLINE.set(True)
    try:
        yield
    finally:
        _OFFLINE.reset(token)


def offline() -> bool:
    return _OFFLINE.get()


def refuse_download(what: str, fetched_by: str = "servebench build CAMPAIGN") -> None:
    """Raise NeedsNetwork where a download of `what` would start, inside `no_network()`."""
    if _OFFLINE.get():
        raise NeedsNetwork(f"{what} is not in the cache yet: `{fetched_by}` fetches it (on a host with the "
                           f"network: the login node; compute nodes never need it)")
