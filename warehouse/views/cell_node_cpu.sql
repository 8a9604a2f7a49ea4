-- Per cell and node: mean CPU while the cell ran.
CREATE OR REPLACE VIEW cell_node_cpu AS
SELECT c.run_id, c.cell_id, c.cell_key, c.mode, n.node,
       avg(n.cpu_pct) AS cpu_pct_mean, max(n.engine_rss_bytes) AS engine_rss_peak_bytes, count(*) AS samples
FROM cells c
JOIN node_samples n
  ON n.run_id = c.run_id AND n.mode = c.mode
 AND n.t_mono BETWEEN c.t0_monotonic AND c.t_end_monotonic
GROUP BY ALL;
