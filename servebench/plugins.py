"""Engines and providers from outside servebench's tree, for a command line.

`SERVEBENCH_PLUGINS=package.module[,other.module]` names modules imported before any command
runs; each registers what it brings (`servebench.engines.register_engine`,
`servebench.providers.register_provider`) when imported. The test suite uses it to run its
test-only engine and provider in a `servebench run` of their own (a process it can kill).
"""

from __future__ import annotations

import importlib
import os

PLUGINS_VARIABLE = "SERVEBENCH_PLUGINS"


def load_plugins() -> list[str]:
    """Import the modules SERVEBENCH_PLUGINS names; return their names."""
    names = [name.strip() for name in os.environ.get(PLUGINS_VARIABLE, "").split(",") if name.strip()]
    for name in names:
        importlib.import_module(name)
    return names
