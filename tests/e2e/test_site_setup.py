"""A site's setup on every node: `provider.setup` (shell lines every node command runs first), `provider.env`
(environment for every node command, on no command line) and, for Slurm, `provider.export` (what a step takes
from the login node's environment).

Here the tests that start real components (servers, the testbed, qemu, a browser); the logic's own are in
tests/unit/test_site_setup.py."""

from __future__ import annotations

import secrets
import time
from pathlib import Path

import pytest

from servebench.providers.base import Node
from servebench.providers.ssh import SshProvider
from servebench.providers.ssh.spec import SshProviderSpec
from tests.support.shared_testbed import shared_testbed
from tests.support.site_setup import SECRET, SETUP
from tests.support.testbed import allocated, node_named, on_the_testbed


@pytest.fixture(scope="module")
def testbed(request):
    """The session's testbed of 2 hosts, shared with the other provider tests."""
    return shared_testbed(request)


@on_the_testbed
def test_a_process_over_ssh_sees_the_setup_lines_effect_and_the_env(testbed, tmp_path):
    layout = testbed
    host = layout.hosts[0]
    flag = f"/tmp/sb-setup-flag-{secrets.token_hex(4)}"   # made on the host by the setup line
    setup = [f"SB_FLAG={flag}", *SETUP]
    spec = SshProviderSpec.model_validate({
        "kind": "ssh", "known_hosts": str(layout.known_hosts), "setup": setup, "env": {"SB_TOKEN": SECRET},
        "hosts": [{"name": host.name, "address": host.address, "key": str(layout.ssh_key), "cpus": "0"}]})
    with allocated(SshProvider(spec)) as provider:
        node: Node = node_named(provider, host.name)
        log = tmp_path / "server.log"
        process = provider.start(node, ["sh", "-c", f'echo "$SB_SITE|$SB_TOKEN|$(cat {flag})"'], {}, log)
        deadline = time.monotonic() + 30
        while process.alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert process.exit_code() == 0, Path(log).read_text()
        assert Path(log).read_text().strip() == f"lmod|{SECRET}|ready"
        mode = provider.run(node, ["stat", "-c", "%a", provider.prelude], timeout=30).stdout.strip()
        assert mode == "600"
        # node tools (the host's python) run after the setup too: the inventory still works
        assert provider.inventory(node)
        provider.run(node, ["rm", "-f", flag], timeout=30)
