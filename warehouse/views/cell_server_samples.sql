-- Every server sample that falls inside a cell (from its t0 to its last token).
CREATE OR REPLACE VIEW cell_server_samples AS
SELECT c.run_id, c.cell_id, c.cell_key, c.mode, s.*
EXCLUDE (run_id, mode)
FROM cells c
JOIN server_samples s
  ON s.run_id = c.run_id AND s.mode = c.mode
 AND s.t_mono BETWEEN c.t0_monotonic AND c.t_end_monotonic;
