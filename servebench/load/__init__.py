"""The load generator: arrival schedules (pure timing), a lean HTTP/1.1 client and SSE parser (transport only),
per-request records (raw timestamps only) and metrics (pure functions over records).

`run_load(config)` is the one entry point the campaign flow and `servebench load` use; `run_load_result`
gives the same run as its typed `LoadResult`, and `read_result` reads one back from its file.
"""

from servebench.load.config import LoadConfig
from servebench.load.result import LoadResult, read_result
from servebench.load.runner import run_load, run_load_result

__all__ = ["LoadConfig", "LoadResult", "read_result", "run_load", "run_load_result"]
