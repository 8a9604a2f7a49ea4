"""What tests/unit/test_ssh_provider.py and tests/e2e/test_ssh_provider.py share."""

from __future__ import annotations

from servebench.providers.ssh.spec import SshProviderSpec

TIMEOUT_S = 60


def spec_of(*hosts: dict, **fields) -> SshProviderSpec:
    return SshProviderSpec.model_validate({"kind": "ssh", "hosts": list(hosts), **fields})
