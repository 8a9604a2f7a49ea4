"""What tests/unit/test_vllm_dp_modes.py and tests/nightly/test_vllm_dp_modes.py share."""

from __future__ import annotations

from pathlib import Path

E2E_CAMPAIGN = Path(__file__).parents[1] / "campaigns" / "good" / "e2e-dp.yaml"
