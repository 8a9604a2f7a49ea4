-- Per instance (docs/parallel-modes.md): a server of several vLLM data-parallel engines
-- (`engine` label: dp0, dp1, ...) or of replicas behind a balancer (each scraped at its own URL: r0, r1,
-- ...) keeps each instance's columns in its samples, so the load each took shows; and the requests a
-- server finished (vLLM's request_success counter). The server-level columns stay the server's whole:
-- counters and running/waiting summed over the instances, kv_usage their mean (rows landed before this
-- migration summed kv_usage over a DP server's engines; such a row can exceed 1).

ALTER TABLE server_samples ADD COLUMN requests_total DOUBLE;
ALTER TABLE server_samples ADD COLUMN instances JSON;

COMMENT ON COLUMN server_samples.kv_usage IS 'KV-cache usage (vllm:kv_cache_usage_perc); a server of several engines or replicas: the mean of theirs (rows before migration 029: a DP server''s sum) [0-1]';
COMMENT ON COLUMN server_samples.requests_total IS 'counter: requests the server finished since it started (vllm:request_success_total, every finish reason; NULL: the engine counts none)';
COMMENT ON COLUMN server_samples.instances IS 'per instance, with two or more: vLLM''s data-parallel engines (dp0, dp1 by the engine label) or the replicas behind a balancer (r0, r1; r0.dp1 for a replica''s own engines), each with its columns, e.g. {"dp0": {"requests_total": 5, "running": 1, "waiting": 0, "kv_usage": 0.1, "generation_tokens_total": 80}}; NULL: one instance';
