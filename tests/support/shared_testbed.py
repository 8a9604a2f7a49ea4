"""One testbed for the provider tests of a session (the contract suite, the ssh and the slurm
provider's own tests): brought up by the first module that asks, taken down when the session
ends, so three modules pay for one `testbed up` and one `down` instead of three.

Only tests that leave the hosts as they found them share it (every provider run releases what
it started, and the contract's release test checks that nothing is left); a test that changes a
host (its links, its sshd) brings up a testbed of its own (`tests.support.testbed.own_testbed`).
"""

from __future__ import annotations

import contextlib

from servebench.devtools.testbed import Layout
from tests.support.testbed import own_testbed

_UP: dict[int, Layout] = {}


def shared_testbed(request, hosts: int = 2) -> Layout:
    """The session's testbed of `hosts` hosts (up on first use; skipped, saying why, where none can
    come up); `request` is a fixture's, whose session ends it."""
    if hosts not in _UP:
        stack = contextlib.ExitStack()
        try:
            _UP[hosts] = stack.enter_context(own_testbed("pv", hosts))
        except BaseException:
            stack.close()
            raise
        request.config.add_cleanup(lambda: (_UP.pop(hosts, None), stack.close()))
    return _UP[hosts]
