-- Per cell: peak and mean KV usage (the engine's fraction, else tokens in flight / the server's
-- capacity), KV misses (llama.cpp's failed batches, else vLLM's preemptions), and the cache-miss
-- probability: misses per decode attempt (attempts = steps that succeeded + batches that failed).
-- Without a step count (a cell too short for two telemetry samples), the misses the cell has per
-- completed request (capped at 1), NULL when neither is known: least(1.0, NULL) would be 1.0 (DuckDB
-- skips NULLs) and a cell without one miss would read as saturated. A counter's change needs two
-- samples: from one, preemptions and decode steps are unknown (NULL), not 0.
CREATE OR REPLACE VIEW cell_kv AS
WITH capacity AS (
    SELECT run_id, mode, max(kv_capacity_tokens) AS kv_capacity_tokens FROM servers GROUP BY run_id, mode
), per_cell AS (
    SELECT c.run_id, c.cell_id, c.cell_key, c.mode, c.clients, c.rate, c.completed, c.kv_failures,
           k.kv_capacity_tokens,
           max(s.kv_usage) AS gauge_peak, avg(s.kv_usage) AS gauge_mean,
           max(s.kv_tokens) AS kv_tokens_peak, avg(s.kv_tokens) AS kv_tokens_mean,
           CASE WHEN count(s.preemptions_total) >= 2
                THEN max(s.preemptions_total) - min(s.preemptions_total) END AS preemptions,
           CASE WHEN count(s.decode_steps_total) >= 2
                THEN max(s.decode_steps_total) - min(s.decode_steps_total) END AS decode_steps,
           count(s.t_mono) AS samples
    FROM cells c
    LEFT JOIN capacity k ON k.run_id = c.run_id AND k.mode = c.mode
    LEFT JOIN server_samples s
      ON s.run_id = c.run_id AND s.mode = c.mode
     AND s.t_mono BETWEEN c.t0_monotonic AND c.t_end_monotonic
    GROUP BY ALL
)
SELECT run_id, cell_id, cell_key, mode, clients, rate, completed,
       coalesce(gauge_peak, kv_tokens_peak / nullif(kv_capacity_tokens, 0)) AS kv_usage_peak,
       coalesce(gauge_mean, kv_tokens_mean / nullif(kv_capacity_tokens, 0)) AS kv_usage_mean,
       kv_tokens_peak, kv_capacity_tokens,
       preemptions,
       preemptions / nullif(completed, 0) AS preemptions_per_request,
       coalesce(kv_failures, preemptions) AS kv_misses,
       decode_steps,
       CASE WHEN decode_steps IS NOT NULL AND decode_steps + coalesce(kv_failures, 0) > 0
            THEN least(1.0, coalesce(kv_failures, preemptions) / (decode_steps + coalesce(kv_failures, 0)))
            WHEN coalesce(kv_failures, preemptions) IS NULL OR coalesce(completed, 0) = 0 THEN NULL
            ELSE least(1.0, coalesce(kv_failures, preemptions) / completed) END AS cache_miss_probability,
       samples
FROM per_cell;
