-- Per cell and instance: how the load spread over a server's vLLM data-parallel engines
-- (dp0, dp1) or the replicas behind its balancer (r0, r1), from server_samples.instances. Counters
-- (requests finished, tokens generated) change over the cell's counter window: from the last sample at or
-- before the cell's t0 to the first at or after its last token (a short cell, a second or two at the
-- scraper's 1 Hz, holds too few samples inside it; a counter is monotonic, so the change is max - min over
-- the window, NULL with under two samples). The window's edges lie up to one scrape period outside the
-- cell: warm-up requests count (they are the cell's; between cells nothing is served, but the gate's last
-- answers may fall in the first cell's window when it starts within a scrape period of the gate). Gauges
-- (waiting, running, KV usage) are over the samples inside the cell, as cell_kv's.
CREATE OR REPLACE VIEW cell_balance AS
WITH points AS (
    SELECT s.run_id, s.mode, s.t_mono, i.key AS instance,
           try_cast(i.value->>'requests_total' AS DOUBLE) AS requests_total,
           try_cast(i.value->>'generation_tokens_total' AS DOUBLE) AS generation_tokens_total,
           try_cast(i.value->>'waiting' AS DOUBLE) AS waiting,
           try_cast(i.value->>'running' AS DOUBLE) AS running,
           try_cast(i.value->>'kv_usage' AS DOUBLE) AS kv_usage
    FROM server_samples s, json_each(s.instances) i
    WHERE s.instances IS NOT NULL
), windows AS (
    SELECT c.run_id, c.cell_id, c.cell_key, c.mode, c.clients, c.offered_rate, c.t0_monotonic, c.t_end_monotonic,
           coalesce((SELECT max(p.t_mono) FROM points p WHERE p.run_id = c.run_id AND p.mode = c.mode
                       AND p.t_mono <= c.t0_monotonic), c.t0_monotonic) AS t_from,
           coalesce((SELECT min(p.t_mono) FROM points p WHERE p.run_id = c.run_id AND p.mode = c.mode
                       AND p.t_mono >= c.t_end_monotonic), c.t_end_monotonic) AS t_to
    FROM cells c
    WHERE c.t0_monotonic IS NOT NULL AND c.t_end_monotonic IS NOT NULL
), per_instance AS (
    SELECT w.run_id, w.cell_id, w.cell_key, w.mode, w.clients, w.offered_rate, p.instance,
           CASE WHEN count(p.requests_total) >= 2 THEN max(p.requests_total) - min(p.requests_total) END AS requests,
           CASE WHEN count(p.generation_tokens_total) >= 2
                THEN max(p.generation_tokens_total) - min(p.generation_tokens_total) END AS generation_tokens,
           avg(p.waiting) FILTER (WHERE p.t_mono BETWEEN w.t0_monotonic AND w.t_end_monotonic) AS waiting_mean,
           max(p.waiting) FILTER (WHERE p.t_mono BETWEEN w.t0_monotonic AND w.t_end_monotonic) AS waiting_max,
           avg(p.running) FILTER (WHERE p.t_mono BETWEEN w.t0_monotonic AND w.t_end_monotonic) AS running_mean,
           avg(p.kv_usage) FILTER (WHERE p.t_mono BETWEEN w.t0_monotonic AND w.t_end_monotonic) AS kv_usage_mean,
           count(*) FILTER (WHERE p.t_mono BETWEEN w.t0_monotonic AND w.t_end_monotonic) AS samples,
           w.t_to - w.t_from AS window_s
    FROM windows w
    JOIN points p ON p.run_id = w.run_id AND p.mode = w.mode AND p.t_mono BETWEEN w.t_from AND w.t_to
    GROUP BY ALL
)
SELECT *,
       requests / nullif(sum(requests) OVER (PARTITION BY cell_id), 0) AS requests_share,
       count(*) OVER (PARTITION BY cell_id) AS instances
FROM per_instance;

COMMENT ON VIEW cell_balance IS 'Per cell and instance (a DP engine dp0, dp1 or a replica r0, r1): requests finished, tokens generated, queue depth: how evenly the load spread';
COMMENT ON COLUMN cell_balance.run_id IS 'the run';
COMMENT ON COLUMN cell_balance.cell_id IS 'the cell';
COMMENT ON COLUMN cell_balance.cell_key IS 'the cell''s key';
COMMENT ON COLUMN cell_balance.mode IS 'the cell''s mode';
COMMENT ON COLUMN cell_balance.clients IS 'closed loop: concurrent clients';
COMMENT ON COLUMN cell_balance.offered_rate IS 'open loop: the rate offered, as the cell key names it (cells.offered_rate) [req/s]';
COMMENT ON COLUMN cell_balance.instance IS 'the instance: dp0, dp1 (vLLM''s engine label) or r0, r1 (a replica behind the balancer; r0.dp1 its own engines)';
COMMENT ON COLUMN cell_balance.requests IS 'requests the instance finished during the cell, warm-up included: the change of vllm:request_success_total over the counter window (NULL: under two samples, or not counted)';
COMMENT ON COLUMN cell_balance.generation_tokens IS 'tokens the instance generated during the cell, over the counter window [tokens]';
COMMENT ON COLUMN cell_balance.waiting_mean IS 'requests waiting in the instance''s queue, mean over the samples inside the cell';
COMMENT ON COLUMN cell_balance.waiting_max IS 'requests waiting in the instance''s queue, most in one sample inside the cell';
COMMENT ON COLUMN cell_balance.running_mean IS 'requests running on the instance, mean over the samples inside the cell';
COMMENT ON COLUMN cell_balance.kv_usage_mean IS 'the instance''s KV-cache usage, mean over the samples inside the cell [0-1]';
COMMENT ON COLUMN cell_balance.samples IS 'server samples inside the cell (the gauges'' basis)';
COMMENT ON COLUMN cell_balance.window_s IS 'the counter window: the last sample at or before the cell''s t0 to the first at or after its last token [s]';
COMMENT ON COLUMN cell_balance.requests_share IS 'the instance''s share of the requests the cell''s instances finished (1 / instances: even) [0-1]';
COMMENT ON COLUMN cell_balance.instances IS 'instances of the cell''s server with samples in the window';
