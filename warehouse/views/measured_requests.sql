-- The requests a cell's figures are computed from: every request after the warm-up (`requests.warmup`
-- marks the leading `load.warmup` requests; a warm-up until steady sends its own, never landed), with
-- each request's latencies in ms as the load generator computes them (servebench/load/metrics.py).
-- A latency is NULL for a failed request (error_kind set): the cell's percentiles are over completed
-- requests only, so quantile_cont(ttft_ms, 0.99) over a cell's rows is its ttft_p99_ms (both
-- Hyndman-Fan type 7, linear interpolation). TPOT needs two output tokens.
CREATE OR REPLACE VIEW measured_requests AS
SELECT r.run_id, r.cell_id, c.cell_key, c.mode, r.request_index, r.client,
       r.scheduled_s, r.sent_s, r.first_token_s, r.last_token_s,
       r.input_tokens, r.output_tokens, r.http_status, r.error_kind, r.error,
       r.prefix_group, r."session", r.turn,
       r.error_kind IS NULL AS completed,
       CASE WHEN r.error_kind IS NULL THEN (r.first_token_s - r.sent_s) * 1000 END AS ttft_ms,
       CASE WHEN r.error_kind IS NULL AND r.output_tokens >= 2
            THEN (r.last_token_s - r.first_token_s) / (r.output_tokens - 1) * 1000 END AS tpot_ms,
       CASE WHEN r.error_kind IS NULL THEN (r.last_token_s - r.sent_s) * 1000 END AS e2el_ms,
       CASE WHEN r.error_kind IS NULL THEN (r.first_text_s - r.sent_s) * 1000 END AS ttft_text_ms,
       (r.sent_s - r.scheduled_s) * 1000 AS schedule_lag_ms
FROM requests r
JOIN cells c ON c.cell_id = r.cell_id
WHERE NOT r.warmup;

COMMENT ON VIEW measured_requests IS 'The requests after warm-up, the ones a cell''s percentiles are computed from, with their latencies in ms';
COMMENT ON COLUMN measured_requests.run_id IS 'the run';
COMMENT ON COLUMN measured_requests.cell_id IS 'the cell (join to cells)';
COMMENT ON COLUMN measured_requests.cell_key IS 'the cell''s key (mode.point.repeat)';
COMMENT ON COLUMN measured_requests.mode IS 'the cell''s mode';
COMMENT ON COLUMN measured_requests.request_index IS 'the request''s index in the cell''s schedule';
COMMENT ON COLUMN measured_requests.client IS 'closed loop: which client sent it';
COMMENT ON COLUMN measured_requests.scheduled_s IS 'when the schedule said to send, from the cell''s t0 [s]';
COMMENT ON COLUMN measured_requests.sent_s IS 'when it was sent, from the cell''s t0 [s]';
COMMENT ON COLUMN measured_requests.first_token_s IS 'the first event carrying a token, from the cell''s t0 [s]';
COMMENT ON COLUMN measured_requests.last_token_s IS 'the last event carrying a token, from the cell''s t0 [s]';
COMMENT ON COLUMN measured_requests.input_tokens IS 'prompt tokens, from the server''s usage [tokens]';
COMMENT ON COLUMN measured_requests.output_tokens IS 'output tokens, from the server''s usage [tokens]';
COMMENT ON COLUMN measured_requests.http_status IS 'the HTTP status';
COMMENT ON COLUMN measured_requests.error_kind IS 'what went wrong; NULL: the request completed';
COMMENT ON COLUMN measured_requests.error IS 'the error''s text';
COMMENT ON COLUMN measured_requests.prefix_group IS 'shared-prefix workload: the request''s group';
COMMENT ON COLUMN measured_requests."session" IS 'sessions workload: the conversation';
COMMENT ON COLUMN measured_requests.turn IS 'sessions workload: the turn in it (0 first)';
COMMENT ON COLUMN measured_requests.completed IS 'no error: the request counts in the cell''s latency percentiles';
COMMENT ON COLUMN measured_requests.ttft_ms IS 'time to first token: first token event - send (NULL: failed) [ms]';
COMMENT ON COLUMN measured_requests.tpot_ms IS 'time per output token: (last token - first token) / (output tokens - 1) (NULL: failed, or under 2 tokens) [ms]';
COMMENT ON COLUMN measured_requests.e2el_ms IS 'end-to-end latency: last token - send (NULL: failed) [ms]';
COMMENT ON COLUMN measured_requests.ttft_text_ms IS 'time to the first visible text: first event with text - send (NULL: failed) [ms]';
COMMENT ON COLUMN measured_requests.schedule_lag_ms IS 'how late the generator sent it: send - scheduled [ms]';
