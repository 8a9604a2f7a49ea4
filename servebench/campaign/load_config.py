"""A cell's load as the load generator takes it (`LoadConfig`): the campaign's load and validity
limits, the cell's point and seed, the engine's request extensions, and the CPUs the generator
runs on. Pure: the same campaign and cell give the same config."""

from __future__ import annotations

from servebench.config.campaign import Campaign
from servebench.config.sweep import Cell, cell_workload_config
from servebench.cpus import format_cpu_list
from servebench.engines import Engine
from servebench.load.config import LoadConfig
from servebench.planning.placement import ClientPlacement


def cell_load_config(campaign: Campaign, cell: Cell, base_url: str, served_name: str, vocab_size: int,
                     client: ClientPlacement, engine: Engine, health_path: str | None = None,
                     metrics_urls: list[str] | None = None) -> LoadConfig:
    """The cell's load with the engine's request extensions, run on the generator's own CPUs and
    judged by the campaign's validity limits; the server's health path probed to catch a hang; its
    counters read where `metrics_urls` say (a balancer's replicas), else at `base_url`."""
    load, validity = campaign.load, campaign.validity
    return LoadConfig(
        base_url=base_url, model=served_name, rate=cell.point.rate, clients=cell.point.clients,
        arrival=load.arrival, input_len=load.input_len, output_len=load.output_len, vocab_size=vocab_size,
        requests=load.requests, duration=load.duration, warmup=load.warmup,
        warm_until_steady=load.warm_until_steady, seed=cell.seed,
        timeout_s=load.timeout_s, max_schedule_lag_ms=validity.max_schedule_lag_ms,
        min_achieved_fraction=validity.min_achieved_fraction, max_client_cpu=validity.max_client_cpu,
        cpus=format_cpu_list(client.cpus) if client.cpus else None, nice=load.client.nice,
        request_extras=dict(engine.api.request_extras), token_counter=engine.api.generation_tokens_metric,
        health_url=base_url.rstrip("/") + health_path if health_path and load.hang_after_s else None,
        hang_after_s=load.hang_after_s if health_path else None,
        prefix_cache_counters=engine.api.prefix_cache_metrics, metrics_urls=list(metrics_urls or []),
        stream_token_counts=list(engine.api.stream_token_counts), prompt_cache_tokens=engine.api.prompt_cache_tokens,
        **cell_workload_config(campaign, cell),  # docs/workloads.md
    )

