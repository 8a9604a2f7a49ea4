"""One Prefect server for the whole pytest run, started by the first test that runs a flow.

A flow run with no Prefect API to report to starts a temporary server of its own (so does
`prefect_test_harness`): 15 s on two shared cores, and the tests run some forty campaigns. They
all report to this one instead, a server of Prefect's own test harness on a database of its own
(never ~/.prefect): the in-process flows through the harness's settings, the `servebench run`
processes a test starts through PREFECT_API_URL. tests/e2e/test_e2e_nightly.py runs a `prefect server`
of its own (it deploys), README's smoke command the temporary server a user gets.
"""

from __future__ import annotations

import os
from contextlib import ExitStack

from servebench.providers.node_tools import INSTRUMENT_VARIABLE

_session: ExitStack | None = None


def session_api_url() -> str:
    """The session server's API URL, the server started on first use: from then on every flow this
    process runs reports to it (the harness's settings are global), a process started with
    PREFECT_API_URL set to it too."""
    global _session
    from prefect.settings import PREFECT_API_URL
    from prefect.testing.utilities import prefect_test_harness

    if _session is None:
        stack = ExitStack()
        # the server is servebench's own infrastructure beside the campaigns' servers, as a user's CLI's temporary
        # one is (its child): marked so the node sampler does not count its CPU as another user's
        marked = os.environ.get(INSTRUMENT_VARIABLE)
        os.environ[INSTRUMENT_VARIABLE] = "1"
        try:
            stack.enter_context(prefect_test_harness(server_startup_timeout=120))
        finally:
            if marked is None:
                os.environ.pop(INSTRUMENT_VARIABLE, None)
            else:
                os.environ[INSTRUMENT_VARIABLE] = marked
        _session = stack
    return PREFECT_API_URL.value()


def close_session_prefect() -> None:
    """At the session's end: what the harness sent is drained, its server stopped by PID."""
    global _session
    if _session is not None:
        stack, _session = _session, None
        stack.close()
