-- Per cell: the theoretical saturation point, capacity / (input + output tokens per request): the
-- number of parallel clients whose sequences fill the KV cache. A cell with a workload block lands
-- the schema's default input_len/output_len beside it, so that is no point for it (a session holds
-- its whole conversation at its last turn, drawn lengths have no one peak): NULL here, and
-- `servebench saturation` (servebench/analysis/saturation.py) computes it from the workload block.
CREATE OR REPLACE VIEW cell_saturation AS
SELECT c.run_id, c.cell_id, c.cell_key, c.mode, s.kv_capacity_tokens,
       CASE WHEN c.workload IS NULL THEN s.kv_capacity_tokens / (c.input_len + c.output_len) END
           AS saturation_clients
FROM cells c JOIN servers s ON s.run_id = c.run_id AND s.mode = c.mode;

COMMENT ON VIEW cell_saturation IS 'Per cell: the theoretical KV saturation point, capacity / tokens a request (NULL with a workload block)';
COMMENT ON COLUMN cell_saturation.run_id IS 'the run';
COMMENT ON COLUMN cell_saturation.cell_id IS 'the cell';
COMMENT ON COLUMN cell_saturation.cell_key IS 'the cell''s key';
COMMENT ON COLUMN cell_saturation.mode IS 'the cell''s mode';
COMMENT ON COLUMN cell_saturation.kv_capacity_tokens IS 'KV-cache capacity the engine reported at start-up [tokens]';
COMMENT ON COLUMN cell_saturation.saturation_clients IS 'clients whose sequences fill the KV cache: capacity / (input_len + output_len); NULL: a workload block';
