"""The load generator: arrival schedules (pure timing), a lean HTTP/1.1 client and SSE parser (transport only),
per-request records (raw timestamps only) and metrics (pure functions over records).

`run_load(config)` is the one entry point the campaign flow and `servebench load` use.
"""

from servebench.load.config import LoadConfig
from servebench.load.runner import run_load

__all__ = ["LoadConfig", "run_load"]
