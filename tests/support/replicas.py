"""What tests/unit/test_replicas.py and tests/e2e/test_replicas.py share."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

NEEDS_NGINX = pytest.mark.skipif(shutil.which("nginx") is None and not Path("/usr/sbin/nginx").exists(),
                                 reason="needs Debian's nginx (nginx-light): the balancer of a replicas mode")
