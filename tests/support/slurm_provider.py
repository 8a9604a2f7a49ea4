"""What tests/unit/test_slurm_provider.py and tests/e2e/test_slurm_provider.py share."""

from __future__ import annotations

from servebench.providers.slurm.spec import SlurmProviderSpec

TIMEOUT_S = 60


def spec_of(**fields) -> SlurmProviderSpec:
    return SlurmProviderSpec.model_validate({"kind": "slurm", "nodes": 2, "cpus_per_node": 1, "time_limit": "10",
                                             **fields})
