"""A prefect.yaml of the user's own: one nightly deployment per campaign file, in the user's time zone
(`servebench deployments init`). Pure but for reading the machine's zone (`local_timezone`).

Each deployment runs the project's campaign flow by its module path (`servebench.flows.campaign:campaign_run`),
so the file works from any directory where servebench is installed: `prefect deploy --all` and a worker,
or `servebench deployments serve` without one. The checkout's own prefect.yaml is the project's nightly lane.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import yaml

ENTRYPOINT = "servebench.flows.campaign:campaign_run"
DEFAULT_CRON = "0 2 * * *"
DEFAULT_POOL = "servebench"
CRON_FIELDS = 5


@dataclass(frozen=True)
class CampaignDeployment:
    """One campaign file, scheduled: its deployment's name is the campaign's name with `-nightly`."""

    name: str            # the campaign's `name:`
    campaign_file: Path  # absolute
    description: str = ""


def local_timezone(environ: dict[str, str] | None = None, localtime: Path = Path("/etc/localtime"),
                   timezone_file: Path = Path("/etc/timezone")) -> str:
    """The machine's IANA zone: TZ when it names one, else the zone /etc/localtime links to, else
    /etc/timezone, else UTC."""
    env = os.environ if environ is None else environ
    for candidate in (_zone_of_tz(env.get("TZ", "")), _zone_of_link(localtime), _read(timezone_file)):
        if candidate and valid_timezone(candidate):
            return candidate
    return "UTC"


def _zone_of_tz(value: str) -> str:
    value = value.removeprefix(":")
    return value.split("zoneinfo/", 1)[1] if "zoneinfo/" in value else value


def _zone_of_link(path: Path) -> str:
    try:
        target = os.readlink(path)
    except OSError:
        return ""
    return target.split("zoneinfo/", 1)[1] if "zoneinfo/" in target else ""


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def valid_timezone(name: str) -> bool:
    if not re.match(r"^[A-Za-z0-9_+/-]+$", name):
        return False
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return False
    return True


def check_cron(expression: str) -> str:
    """A five-field cron expression (minute hour day month weekday), else ValueError."""
    if len(expression.split()) != CRON_FIELDS:
        raise ValueError(f"cron {expression!r}: give five fields, minute hour day month weekday (\"0 2 * * *\")")
    return expression


def deployment_name(campaign_name: str) -> str:
    return f"{campaign_name}-nightly"


@dataclass(frozen=True)
class Schedule:
    """When and where every deployment of the file runs."""

    timezone: str
    cron: str = DEFAULT_CRON
    warehouse: Path | None = None    # absolute; None: the campaign flow's default
    directory: Path = Path("/")      # the flow run's working directory: the file's own
    file_name: str = "prefect.yaml"  # the file, in that directory
    pool: str = DEFAULT_POOL


def prefect_yaml(campaigns: list[CampaignDeployment], schedule: Schedule) -> str:
    """The file's text: a comment saying how to serve it, then one deployment per campaign, every one
    at the schedule's cron in its time zone, one run at a time, into one warehouse (absolute paths)."""
    timezone, cron, pool = schedule.timezone, schedule.cron, schedule.pool
    if not valid_timezone(timezone):
        raise ValueError(f"time zone {timezone!r}: give an IANA name such as America/Chicago")
    check_cron(cron)
    names = [deployment_name(c.name) for c in campaigns]
    if len(set(names)) != len(names):
        raise ValueError(f"two campaign files have the same campaign name: {sorted(names)}")
    document = {
        "name": "servebench-nightly",
        "pull": [{"prefect.deployments.steps.set_working_directory": {"directory": str(schedule.directory)}}],
        "deployments": [{
            "name": deployment_name(c.name),
            "description": c.description or f"The campaign {c.name} every night.",
            "entrypoint": ENTRYPOINT,
            "parameters": {"campaign_file": str(c.campaign_file)} | (
                {} if schedule.warehouse is None else {"warehouse_path": str(schedule.warehouse)}),
            "schedules": [{"cron": cron, "timezone": timezone, "active": True}],
            "concurrency_limit": 1,
            "tags": ["servebench"],
            "work_pool": {"name": pool, "work_queue_name": "default"},
        } for c in campaigns],
    }
    file = schedule.directory / schedule.file_name
    header = "\n".join([
        f"# Nightly servebench campaigns, every day at `{cron}` in {timezone} (servebench deployments init).",
        "# Schedules live in a Prefect server (PREFECT_API_URL). Then either, without a worker:",
        f"#   servebench deployments serve --file {file}",
        "# or with a worker (one run at a time: the pool's limit):",
        f"#   prefect work-pool create {pool} --type process && prefect work-pool set-concurrency-limit {pool} 1",
        f"#   prefect --no-prompt deploy --all --prefect-file {file}",
        f"#   prefect worker start --pool {pool}",
    ])
    return header + "\n" + yaml.safe_dump(document, sort_keys=False, width=1000)
