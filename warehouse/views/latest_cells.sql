-- The cells of each campaign's latest ended run (latest_runs), with the figures a reader asks for first;
-- every other column is in cells, joined by cell_id.
CREATE OR REPLACE VIEW latest_cells AS
SELECT l.campaign, c.run_id, c.cell_id, c.cell_key, c.mode, c.load_kind, c.clients, c.offered_rate, c.realized_rate,
       c."repeat", c.status, c.valid, c.request_throughput, c.output_throughput, c.ttft_p50_ms, c.ttft_p99_ms,
       c.tpot_p50_ms, c.tpot_p99_ms
FROM cells c
JOIN latest_runs l USING (run_id);

COMMENT ON VIEW latest_cells IS 'The cells of each campaign''s latest ended run, with their main figures';
COMMENT ON COLUMN latest_cells.campaign IS 'the campaign''s name';
COMMENT ON COLUMN latest_cells.run_id IS 'the run (its campaign''s latest ended run)';
COMMENT ON COLUMN latest_cells.cell_id IS 'the cell''s id (cells.cell_id)';
COMMENT ON COLUMN latest_cells.cell_key IS 'stable across runs: mode.point.repeat';
COMMENT ON COLUMN latest_cells.mode IS 'the mode (server configuration)';
COMMENT ON COLUMN latest_cells.load_kind IS 'closed (N clients) | open (scheduled arrivals)';
COMMENT ON COLUMN latest_cells.clients IS 'closed loop: concurrent clients';
COMMENT ON COLUMN latest_cells.offered_rate IS 'open loop: the rate offered, as the cell key names it (cells.offered_rate) [req/s]';
COMMENT ON COLUMN latest_cells.realized_rate IS 'open loop: the rate of the schedule as drawn, after warm-up [req/s]';
COMMENT ON COLUMN latest_cells."repeat" IS 'which repeat of the load point (0 first)';
COMMENT ON COLUMN latest_cells.status IS 'completed | failed | skipped';
COMMENT ON COLUMN latest_cells.valid IS 'the load generator''s verdict on its own measurement';
COMMENT ON COLUMN latest_cells.request_throughput IS 'the rate achieved: completed requests per second over the steady window [req/s]';
COMMENT ON COLUMN latest_cells.output_throughput IS 'output tokens per second over the steady window [tok/s]';
COMMENT ON COLUMN latest_cells.ttft_p50_ms IS 'time to first token, median of the requests after warm-up [ms]';
COMMENT ON COLUMN latest_cells.ttft_p99_ms IS 'time to first token, p99 of the requests after warm-up [ms]';
COMMENT ON COLUMN latest_cells.tpot_p50_ms IS 'time per output token, median [ms]';
COMMENT ON COLUMN latest_cells.tpot_p99_ms IS 'time per output token, p99 [ms]';
