"""What tests/unit/test_site_setup.py and tests/e2e/test_site_setup.py share."""

from __future__ import annotations

SETUP = ["export SB_SITE=lmod", "echo ready >\"$SB_FLAG\""]   # SB_FLAG: a file of the test's own


SECRET = "s3cret-'value' with spaces"
