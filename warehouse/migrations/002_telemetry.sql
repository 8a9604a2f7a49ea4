-- Telemetry: node samples (CPU, memory, engine RSS, network per node) and server samples
-- (the engine's /metrics), both on the load generator's monotonic clock, and per-cell views.

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

-- Every server sample that falls inside a cell (from its t0 to its last token).
CREATE VIEW cell_server_samples AS
SELECT c.run_id, c.cell_id, c.cell_key, c.mode, s.*
EXCLUDE (run_id, mode)
FROM cells c
JOIN server_samples s
  ON s.run_id = c.run_id AND s.mode = c.mode
 AND s.t_mono BETWEEN c.t0_monotonic AND c.t_end_monotonic;

-- Per cell: KV-cache usage, preemptions, and the fraction of requests that were preempted
-- ("cache-miss probability": preemptions during the cell per completed request, capped at 1,
-- an upper bound on the share of requests that lost their KV cache and had to recompute).
CREATE VIEW cell_kv AS
SELECT c.run_id, c.cell_id, c.cell_key, c.mode, c.clients, c.rate, c.completed,
       max(s.kv_usage) AS kv_usage_peak,
       avg(s.kv_usage) AS kv_usage_mean,
       max(s.preemptions_total) - min(s.preemptions_total) AS preemptions,
       (max(s.preemptions_total) - min(s.preemptions_total)) / nullif(c.completed, 0) AS preemptions_per_request,
       least(1.0, (max(s.preemptions_total) - min(s.preemptions_total)) / nullif(c.completed, 0)) AS cache_miss_probability,
       count(s.t_mono) AS samples
FROM cells c
LEFT JOIN server_samples s
  ON s.run_id = c.run_id AND s.mode = c.mode
 AND s.t_mono BETWEEN c.t0_monotonic AND c.t_end_monotonic
GROUP BY c.run_id, c.cell_id, c.cell_key, c.mode, c.clients, c.rate, c.completed;

-- Per cell and node: mean CPU while the cell ran.
CREATE VIEW cell_node_cpu AS
SELECT c.run_id, c.cell_id, c.cell_key, c.mode, n.node,
       avg(n.cpu_pct) AS cpu_pct_mean, max(n.engine_rss_bytes) AS engine_rss_peak_bytes, count(*) AS samples
FROM cells c
JOIN node_samples n
  ON n.run_id = c.run_id AND n.mode = c.mode
 AND n.t_mono BETWEEN c.t0_monotonic AND c.t_end_monotonic
GROUP BY ALL;

-- Throughput normalized to the best cell of the same mode in the same run (1.0 = best).
CREATE VIEW cell_normalized AS
SELECT run_id, cell_id, cell_key, mode, clients, rate, output_throughput,
       output_throughput / nullif(max(output_throughput) OVER (PARTITION BY run_id, mode), 0)
           AS normalized_throughput
FROM cells;

-- KV-cache capacity in tokens, as vLLM reports it at start-up ("KV cache size: N tokens").
ALTER TABLE servers ADD COLUMN kv_capacity_tokens BIGINT;

-- Per cell: the theoretical saturation point, capacity / (input + output tokens per request):
-- the number of parallel clients whose sequences fill the KV cache.
CREATE VIEW cell_saturation AS
SELECT c.run_id, c.cell_id, c.cell_key, c.mode, s.kv_capacity_tokens,
       s.kv_capacity_tokens / (c.input_len + c.output_len) AS saturation_clients
FROM cells c JOIN servers s ON s.run_id = c.run_id AND s.mode = c.mode;
