-- Telemetry: node samples (CPU, memory, engine RSS, network per node) and server samples
-- (the engine's /metrics), both on the load generator's monotonic clock (the per-cell views
-- over them: warehouse/views/).

CREATE TABLE node_samples (
    run_id            VARCHAR NOT NULL,
    mode              VARCHAR NOT NULL,     -- whose server was up while this was sampled
    node              VARCHAR NOT NULL,
    t_mono            DOUBLE NOT NULL,
    t_wall            DOUBLE NOT NULL,      -- unix seconds
    cpu_pct           DOUBLE,               -- mean over the node's CPUs, 0-100
    cpu_pct_per_core  JSON,                 -- {"0": 93.1, "1": 12.0}
    mem_used_bytes    BIGINT,
    mem_available_bytes BIGINT,
    engine_rss_bytes  BIGINT,               -- the engine's processes on this node, descendants included
    engine_processes  INTEGER,
    net               JSON                  -- {"eth0": [bytes_sent, bytes_recv, packets_sent, packets_recv]}, cumulative
);

CREATE TABLE server_samples (
    run_id            VARCHAR NOT NULL,
    mode              VARCHAR NOT NULL,
    t_mono            DOUBLE NOT NULL,
    t_wall            DOUBLE NOT NULL,
    kv_usage          DOUBLE,               -- vllm:kv_cache_usage_perc, a 0-1 fraction
    running           DOUBLE,
    waiting           DOUBLE,
    preemptions_total DOUBLE,               -- counters: cumulative since the server started
    prompt_tokens_total DOUBLE,
    generation_tokens_total DOUBLE
);

-- KV-cache capacity in tokens, as vLLM reports it at start-up ("KV cache size: N tokens").
ALTER TABLE servers ADD COLUMN kv_capacity_tokens BIGINT;
