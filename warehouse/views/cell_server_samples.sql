-- Every server sample that falls inside a cell (from its t0 to its last token).
CREATE OR REPLACE VIEW cell_server_samples AS
SELECT c.run_id, c.cell_id, c.cell_key, c.mode, s.*
EXCLUDE (run_id, mode)
FROM cells c
JOIN server_samples s
  ON s.run_id = c.run_id AND s.mode = c.mode
 AND s.t_mono BETWEEN c.t0_monotonic AND c.t_end_monotonic;

COMMENT ON VIEW cell_server_samples IS 'Every server sample (/metrics scrape) that falls inside a cell, from its t0 to its last token';
COMMENT ON COLUMN cell_server_samples.run_id IS 'the run';
COMMENT ON COLUMN cell_server_samples.cell_id IS 'the cell';
COMMENT ON COLUMN cell_server_samples.cell_key IS 'the cell''s key';
COMMENT ON COLUMN cell_server_samples.mode IS 'the cell''s mode';
COMMENT ON COLUMN cell_server_samples.t_mono IS 'when, on the load generator''s monotonic clock [monotonic s]';
COMMENT ON COLUMN cell_server_samples.t_wall IS 'when, as unix time [unix s]';
COMMENT ON COLUMN cell_server_samples.kv_usage IS 'KV-cache usage (vllm:kv_cache_usage_perc); several engines or replicas: the mean of theirs [0-1]';
COMMENT ON COLUMN cell_server_samples.running IS 'sequences running';
COMMENT ON COLUMN cell_server_samples.waiting IS 'sequences waiting';
COMMENT ON COLUMN cell_server_samples.preemptions_total IS 'counter: preemptions since the server started';
COMMENT ON COLUMN cell_server_samples.prompt_tokens_total IS 'counter: prompt tokens since the server started [tokens]';
COMMENT ON COLUMN cell_server_samples.generation_tokens_total IS 'counter: generated tokens since the server started [tokens]';
COMMENT ON COLUMN cell_server_samples.kv_tokens IS 'KV tokens held by the sequences in flight [tokens]';
COMMENT ON COLUMN cell_server_samples.decode_steps_total IS 'counter: decode calls (llama.cpp) / engine steps (vLLM)';
COMMENT ON COLUMN cell_server_samples.requests_total IS 'counter: requests the server finished since it started (vllm:request_success_total; NULL: not counted)';
COMMENT ON COLUMN cell_server_samples.instances IS 'per DP engine (dp0, dp1) or replica (r0, r1), with two or more: each one''s columns (server_samples.instances; cell_balance reads them per cell)';
