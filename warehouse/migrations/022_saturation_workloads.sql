-- Issue 34: a cell with a workload block lands the schema's default input_len/output_len (64, 32)
-- beside it, so capacity / (input_len + output_len) is no theoretical point for it: a session holds
-- its whole conversation at its last turn, and drawn lengths have no one peak. Such cells get NULL
-- here; `servebench saturation` (servebench/analysis/saturation.py) computes the point from the
-- workload block (docs/llamacpp.md).
CREATE OR REPLACE VIEW cell_saturation AS
SELECT c.run_id, c.cell_id, c.cell_key, c.mode, s.kv_capacity_tokens,
       CASE WHEN c.workload IS NULL THEN s.kv_capacity_tokens / (c.input_len + c.output_len) END
           AS saturation_clients
FROM cells c JOIN servers s ON s.run_id = c.run_id AND s.mode = c.mode;
