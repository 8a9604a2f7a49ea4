"""A campaign's first mode served for a test, by the campaign machinery itself: its engine's build
found (or made) by key, its model in that engine's format, the local provider's first node; stopped
after, with no engine process and no /dev/shm segment left behind."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Iterator

from servebench.builds.builders import ensure
from servebench.builds.venv import EngineBuild
from servebench.campaign.loading import load_campaign
from servebench.engines import LaunchRequest, get_engine
from servebench.models.artifact import ensure_model
from servebench.paths import cache_dir
from servebench.processes import shm_entries
from servebench.providers import get_provider
from servebench.serving.server import Server, start_server, stop_server, wait_ready
from tests.support.processes import engine_processes


@contextlib.contextmanager
def first_mode_served(campaign_file: Path, log_dir: Path, served_name: str = "tiny",
                      timeout_s: float = 600, secret_file: Path | None = None
                      ) -> Iterator[tuple[Server, Path, EngineBuild]]:
    """(the server, its model path, the engine build) while the campaign's first mode serves; asking for
    the key in `secret_file` (None: for none)."""
    campaign = load_campaign(campaign_file)
    engine = get_engine(campaign.engine.kind)
    build = ensure(engine.build_recipe(campaign.engine), cache_dir(), log=lambda _: None)
    model = ensure_model(campaign.model, build.python, cache_dir(), generator=engine.default_model)
    provider = get_provider(campaign)
    nodes = provider.allocate()[:1]
    launch = engine.launch(LaunchRequest(
        python=build.python, build_dir=build.venv_path, spec=campaign.engine, mode=campaign.modes[0],
        model_dir=str(model), served_name=served_name, dtype="auto", nodes=nodes, ports=provider,
        secret_file=None if secret_file is None else str(secret_file)))
    shm_before = shm_entries()
    server = start_server(provider, nodes, launch, campaign.modes[0].name, log_dir, timeout_s)
    try:
        wait_ready(server, timeout_s)
        yield server, model, build
    finally:
        stop_server(provider, server)
        provider.release()
    assert not any(running.process.alive() for running in server.processes)
    assert engine_processes() == []
    assert shm_entries() - shm_before == set()
