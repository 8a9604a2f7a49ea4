-- Issue 16: KV-cache saturation measured the same way on every engine.
-- vLLM reports its KV usage as a fraction and its cache misses as preemptions; llama.cpp has no KV
-- gauge (its /slots says how many tokens each busy slot holds) and no miss counter (a batch that
-- finds no room logs "failed to find a memory slot" and is retried smaller).

ALTER TABLE server_samples ADD COLUMN kv_tokens DOUBLE;           -- KV tokens held by the sequences in flight
ALTER TABLE server_samples ADD COLUMN decode_steps_total DOUBLE;  -- counter: decode calls (llama.cpp) / engine steps (vLLM)
ALTER TABLE cells ADD COLUMN kv_failures INTEGER;                 -- KV-full log lines during the cell (llama.cpp)

-- Per cell: peak and mean KV usage (the engine's fraction, else tokens in flight / the server's
-- capacity), KV misses (llama.cpp's failed batches, else vLLM's preemptions), and the cache-miss
-- probability: misses per decode attempt (attempts = steps that succeeded + batches that failed);
-- without a step counter, preemptions per completed request as before (capped at 1).
CREATE OR REPLACE VIEW cell_kv AS
WITH capacity AS (
    SELECT run_id, mode, max(kv_capacity_tokens) AS kv_capacity_tokens FROM servers GROUP BY run_id, mode
), per_cell AS (
    SELECT c.run_id, c.cell_id, c.cell_key, c.mode, c.clients, c.rate, c.completed, c.kv_failures,
           k.kv_capacity_tokens,
           max(s.kv_usage) AS gauge_peak, avg(s.kv_usage) AS gauge_mean,
           max(s.kv_tokens) AS kv_tokens_peak, avg(s.kv_tokens) AS kv_tokens_mean,
           max(s.preemptions_total) - min(s.preemptions_total) AS preemptions,
           max(s.decode_steps_total) - min(s.decode_steps_total) AS decode_steps,
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
            ELSE least(1.0, preemptions / nullif(completed, 0)) END AS cache_miss_probability,
       samples
FROM per_cell;

-- What went into a build and what it says it is: the key's parts (packages, pip options, CMake
-- flags, CPU flags) and the built tool's version line (llama.cpp: its commit and compiler).
ALTER TABLE builds ADD COLUMN inputs JSON;
ALTER TABLE builds ADD COLUMN tool_version VARCHAR;

-- Side by side (a campaign's `engines:`): which engine served each mode (NULL before: the run's one engine).
ALTER TABLE servers ADD COLUMN engine VARCHAR;
