-- Per cell and node: mean CPU while the cell ran.
CREATE OR REPLACE VIEW cell_node_cpu AS
SELECT c.run_id, c.cell_id, c.cell_key, c.mode, n.node,
       avg(n.cpu_pct) AS cpu_pct_mean, max(n.engine_rss_bytes) AS engine_rss_peak_bytes, count(*) AS samples
FROM cells c
JOIN node_samples n
  ON n.run_id = c.run_id AND n.mode = c.mode
 AND n.t_mono BETWEEN c.t0_monotonic AND c.t_end_monotonic
GROUP BY ALL;

COMMENT ON VIEW cell_node_cpu IS 'Per cell and node: mean CPU and peak engine memory while the cell ran';
COMMENT ON COLUMN cell_node_cpu.run_id IS 'the run';
COMMENT ON COLUMN cell_node_cpu.cell_id IS 'the cell';
COMMENT ON COLUMN cell_node_cpu.cell_key IS 'the cell''s key';
COMMENT ON COLUMN cell_node_cpu.mode IS 'the cell''s mode';
COMMENT ON COLUMN cell_node_cpu.node IS 'the node';
COMMENT ON COLUMN cell_node_cpu.cpu_pct_mean IS 'CPU use, mean over the node''s CPUs and the cell''s samples, 0-100 [%]';
COMMENT ON COLUMN cell_node_cpu.engine_rss_peak_bytes IS 'resident memory of the engine''s processes on the node, peak [bytes]';
COMMENT ON COLUMN cell_node_cpu.samples IS 'node samples inside the cell';
