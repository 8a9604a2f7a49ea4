-- Per cell: peak and mean KV usage (the engine's fraction, else tokens in flight / the server's
-- capacity), KV misses (llama.cpp's failed batches, else vLLM's preemptions), and the cache-miss
-- probability, defined here once (the report's chart, `servebench saturation` and the docs read this
-- column): the fraction of decode attempts that found no room in the KV cache, misses / (decode steps
-- that succeeded + batches that failed). That is the rate a user can act on (more cache, fewer
-- clients or shorter sequences move it), comparable between engines and load points. Only without a
-- step count (a cell too short for two telemetry samples, or an engine that counts no steps) it falls
-- back to misses per completed request (capped at 1), and `cache_miss_basis` says which it is; NULL
-- when neither is known: least(1.0, NULL) would be 1.0 (DuckDB skips NULLs) and a cell without one miss
-- would read as saturated. A counter's change needs two samples: from one, preemptions and decode steps
-- are unknown (NULL), not 0.
CREATE OR REPLACE VIEW cell_kv AS
WITH capacity AS (
    SELECT run_id, mode, max(kv_capacity_tokens) AS kv_capacity_tokens FROM servers GROUP BY run_id, mode
), per_cell AS (
    SELECT c.run_id, c.cell_id, c.cell_key, c.mode, c.clients, c.offered_rate, c.completed, c.kv_failures,
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
), basis AS (
    SELECT *, CASE WHEN misses IS NULL THEN NULL
                   WHEN decode_steps IS NOT NULL AND decode_steps + coalesce(kv_failures, 0) > 0 THEN 'decode attempts'
                   WHEN coalesce(completed, 0) > 0 THEN 'completed requests' END AS cache_miss_basis
    FROM (SELECT *, coalesce(kv_failures, preemptions) AS misses FROM per_cell)
)
SELECT run_id, cell_id, cell_key, mode, clients, offered_rate, completed,
       coalesce(gauge_peak, kv_tokens_peak / nullif(kv_capacity_tokens, 0)) AS kv_usage_peak,
       coalesce(gauge_mean, kv_tokens_mean / nullif(kv_capacity_tokens, 0)) AS kv_usage_mean,
       kv_tokens_peak, kv_capacity_tokens,
       preemptions,
       preemptions / nullif(completed, 0) AS preemptions_per_request,
       misses AS kv_misses,
       decode_steps,
       CASE cache_miss_basis
            WHEN 'decode attempts' THEN least(1.0, misses / (decode_steps + coalesce(kv_failures, 0)))
            WHEN 'completed requests' THEN least(1.0, misses / completed) END AS cache_miss_probability,
       cache_miss_basis,
       samples
FROM basis;

COMMENT ON VIEW cell_kv IS 'Per cell: KV-cache usage, KV misses and the cache-miss probability (misses per decode attempt)';
COMMENT ON COLUMN cell_kv.run_id IS 'the run';
COMMENT ON COLUMN cell_kv.cell_id IS 'the cell';
COMMENT ON COLUMN cell_kv.cell_key IS 'the cell''s key';
COMMENT ON COLUMN cell_kv.mode IS 'the cell''s mode';
COMMENT ON COLUMN cell_kv.clients IS 'closed loop: concurrent clients';
COMMENT ON COLUMN cell_kv.offered_rate IS 'open loop: the rate offered, as the cell key names it (cells.offered_rate) [req/s]';
COMMENT ON COLUMN cell_kv.completed IS 'requests completed after warm-up';
COMMENT ON COLUMN cell_kv.kv_usage_peak IS 'KV-cache usage, peak during the cell: the engine''s gauge, else KV tokens / capacity [0-1]';
COMMENT ON COLUMN cell_kv.kv_usage_mean IS 'KV-cache usage, mean over the cell''s samples [0-1]';
COMMENT ON COLUMN cell_kv.kv_tokens_peak IS 'KV tokens held by the sequences in flight, peak [tokens]';
COMMENT ON COLUMN cell_kv.kv_capacity_tokens IS 'KV-cache capacity the engine reported at start-up [tokens]';
COMMENT ON COLUMN cell_kv.preemptions IS 'sequences the engine preempted during the cell (vLLM; NULL: under two samples)';
COMMENT ON COLUMN cell_kv.preemptions_per_request IS 'preemptions / completed requests (not the cache-miss probability)';
COMMENT ON COLUMN cell_kv.kv_misses IS 'KV misses: llama.cpp''s failed batches (kv_failures), else vLLM''s preemptions';
COMMENT ON COLUMN cell_kv.decode_steps IS 'decode steps that succeeded during the cell (NULL: under two samples, or not counted)';
COMMENT ON COLUMN cell_kv.cache_miss_probability IS 'fraction of decode attempts that found no room in the KV cache: kv_misses / (decode_steps + failed batches); without a step count, kv_misses per completed request, capped at 1 (cache_miss_basis says which) [0-1]';
COMMENT ON COLUMN cell_kv.cache_miss_basis IS 'what cache_miss_probability is per: decode attempts | completed requests (no step count); NULL: no miss count';
COMMENT ON COLUMN cell_kv.samples IS 'server samples inside the cell';
