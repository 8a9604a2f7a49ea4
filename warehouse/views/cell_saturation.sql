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
