"""A cell's load as the load generator takes it (`LoadConfig`): the campaign's load and validity
limits, the cell's point and seed, the engine's request extensions, and the CPUs the generator
runs on, and where the server's key is on the generator's node (the run's token file: its path, never the
token), and, for a `replicas` mode the load generator balances, its replicas. Pure but for that path and
those replicas, which a target not given them takes from the started server
(`servebench.serving.mode_server.client_key_file`, `client_balanced`): the same campaign and cell give the
same config."""

from __future__ import annotations

from dataclasses import dataclass, field

from servebench.config.campaign import Campaign
from servebench.config.sweep import Cell, cell_workload_config
from servebench.cpus import format_cpu_list
from servebench.engines import Engine
from servebench.load.config import LoadConfig
from servebench.planning.placement import ClientPlacement
from servebench.serving.mode_server import client_balanced, client_key_file


@dataclass(frozen=True)
class LoadTarget:
    """The server a cell's load goes to: its URL, the name it serves the model under, the health path
    probed during the load to catch a hang (None: not probed), and the servers whose /metrics hold its
    counters (a balancer's replicas; empty: the URL's own), and the server's key file where the load
    generator runs (not given: the one the server at `base_url` was started with, if any); and the
    replicas the load generator itself spreads the requests over, by name, with the policy (not given: those
    the server at `base_url` was started with when the load generator balances it; none: all to `base_url`)."""

    base_url: str
    served_name: str
    health_path: str | None = None
    metrics_urls: tuple[str, ...] = ()
    api_key_file: str | None = field(default=None, compare=False)
    replica_urls: tuple[tuple[str, str], ...] | None = None
    replica_policy: str = "least-connections"

    def __post_init__(self) -> None:
        if self.api_key_file is None:
            object.__setattr__(self, "api_key_file", client_key_file(self.base_url))
        if self.replica_urls is None:
            balanced = client_balanced(self.base_url)
            object.__setattr__(self, "replica_urls", tuple(balanced[0].items()) if balanced else ())
            if balanced:
                object.__setattr__(self, "replica_policy", balanced[1])

    @property
    def health_url(self) -> str | None:
        return self.base_url.rstrip("/") + self.health_path if self.health_path else None


def cell_load_config(campaign: Campaign, cell: Cell, target: LoadTarget, vocab_size: int, client: ClientPlacement,
                     engine: Engine) -> LoadConfig:
    """The cell's load against `target` with the engine's request extensions, run on the generator's own
    CPUs and judged by the campaign's validity limits; the server's health path probed to catch a hang
    when the campaign sets `hang_after_s`."""
    load, validity = campaign.load, campaign.validity
    return LoadConfig(
        base_url=target.base_url, model=target.served_name, rate=cell.point.rate, clients=cell.point.clients,
        arrival=load.arrival, input_len=load.input_len, output_len=load.output_len, vocab_size=vocab_size,
        requests=load.requests, duration=load.duration, warmup=load.warmup,
        warm_until_steady=load.warm_until_steady, seed=cell.seed,
        timeout_s=load.timeout_s, max_schedule_lag_ms=validity.max_schedule_lag_ms,
        min_achieved_fraction=validity.min_achieved_fraction, max_client_cpu=validity.max_client_cpu,
        cpus=format_cpu_list(client.cpus) if client.cpus else None, nice=load.client.nice,
        request_extras=dict(engine.api.request_extras), token_counter=engine.api.generation_tokens_metric,
        health_url=target.health_url if load.hang_after_s else None,
        hang_after_s=load.hang_after_s if target.health_path else None,
        prefix_cache_counters=engine.api.prefix_cache_metrics, metrics_urls=list(target.metrics_urls),
        stream_token_counts=list(engine.api.stream_token_counts), prompt_cache_tokens=engine.api.prompt_cache_tokens,
        api_key_file=target.api_key_file, replica_urls=dict(target.replica_urls or ()),
        replica_policy=target.replica_policy,
        **cell_workload_config(campaign, cell),  # docs/workloads.md
    )

