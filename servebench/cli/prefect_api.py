"""A temporary Prefect API server for `servebench run` when no PREFECT_API_URL is set.

Prefect would start one itself, but inside our process group: a terminal's Ctrl-C then
kills it while the flow is still stopping servers and landing results, and every later
API call hangs in retries. This one runs in its own session, so Ctrl-C reaches only the
flow, and it is stopped by PID when the command ends (or by the kernel when the command is
SIGKILLed: its parent-death signal).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
import tempfile
import urllib.error
import urllib.request
from pathlib import Path
from typing import Iterator

from servebench.logs import tail_text
from servebench.processes import ManagedProcess, free_port
from servebench.waiting import poll


@contextlib.contextmanager
def temporary_api(startup_timeout_s: float = 120.0) -> Iterator[str | None]:
    """Yield the API URL in use: the configured one, or a temporary server's.

    Enter this before prefect is imported: prefect reads PREFECT_API_URL once, at import.
    """
    if os.environ.get("PREFECT_API_URL"):
        yield os.environ["PREFECT_API_URL"]
        return
    if "prefect" in sys.modules:
        raise RuntimeError("temporary_api() must be entered before prefect is imported")
    spec = importlib.util.find_spec("prefect")
    if spec is None or spec.origin is None:
        raise RuntimeError("prefect is not installed (no importable prefect package): cannot start its API")
    prefect_dir = Path(spec.origin).parent

    port = free_port()
    argv = [sys.executable, "-m", "uvicorn", "--app-dir", str(prefect_dir.parent),
            "--factory", "prefect.server.api.server:create_app", "--host", "127.0.0.1", "--port", str(port),
            "--log-level", "error", "--lifespan", "on"]
    env = {**os.environ, "PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1",
           "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    log = api_log(os.getpid())
    remove_logs_of_killed_commands()
    server = ManagedProcess.start(argv, env=env, log_path=log, die_with_parent=True)  # even if we are SIGKILLed
    url = f"http://127.0.0.1:{port}/api"
    try:
        _wait_healthy(server, url, startup_timeout_s, log)
        os.environ["PREFECT_API_URL"] = url
        yield url
    finally:
        _drain_prefect_services()
        os.environ.pop("PREFECT_API_URL", None)
        server.stop(grace_s=10)
        log.unlink(missing_ok=True)


def api_log(pid: int) -> Path:
    """The temporary server's output, named by the command's PID: removed when the command ends,
    or by the next command if this one was SIGKILLed (no `finally` runs then)."""
    return Path(tempfile.gettempdir()) / f"servebench-prefect-api-{pid}.log"


def remove_logs_of_killed_commands() -> None:
    """The logs of temporary servers whose command no longer runs."""
    for log in api_log(0).parent.glob("servebench-prefect-api-*.log"):
        pid = log.name.removeprefix("servebench-prefect-api-").removesuffix(".log")
        if pid.isdigit() and not _running(int(pid)):
            log.unlink(missing_ok=True)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _drain_prefect_services(timeout_s: float = 20.0) -> None:
    """Deliver Prefect's pending events and logs while the API still answers.

    Otherwise they are drained at interpreter exit, after the server is gone, and the
    process waits on retries against a dead API.
    """
    if "prefect" not in sys.modules:
        return
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker

    for service in (APILogWorker, EventsWorker):
        service.drain_all(timeout=timeout_s)


def _wait_healthy(server: ManagedProcess, url: str, timeout_s: float, log: Path) -> None:
    def healthy() -> bool:
        if not server.alive():
            raise RuntimeError(f"the temporary Prefect API server exited: {tail_text(log, 20)}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as response:
                return response.status == 200
        except (urllib.error.URLError, OSError):
            return False

    if not poll(healthy, timeout_s, interval_s=0.2):
        raise RuntimeError(f"the temporary Prefect API server did not answer within {timeout_s:.0f} s")
