-- Who else used a cell's server cores, whether its hang watch judged it, and how old and how busy a
-- node's roofline was (docs/load-generator.md, docs/roofline.md). Rows landed before this migration
-- were not checked for either: their new columns stay NULL.

ALTER TABLE cells ADD COLUMN foreign_cpu_share DOUBLE;
ALTER TABLE cells ADD COLUMN server_cpu_share DOUBLE;
ALTER TABLE cells ADD COLUMN node_cpu JSON;
ALTER TABLE cells ADD COLUMN hang_watch_error VARCHAR;

ALTER TABLE nodes ADD COLUMN roofline_measured_at TIMESTAMP WITH TIME ZONE;
ALTER TABLE nodes ADD COLUMN roofline_cached BOOLEAN;
ALTER TABLE nodes ADD COLUMN roofline_busy DOUBLE;
ALTER TABLE nodes ADD COLUMN roofline_load_avg DOUBLE;

COMMENT ON COLUMN cells.foreign_cpu_share IS 'the largest share of a server node''s cores'' time that processes neither the server''s nor servebench''s took over the cell''s window (above validity.max_foreign_cpu the cell is invalid); NULL: no samples of the window on the orchestrator''s host [0-1]';
COMMENT ON COLUMN cells.server_cpu_share IS 'the share of that node''s cores'' time the server''s processes got over the cell''s window [0-1]';
COMMENT ON COLUMN cells.node_cpu IS 'per server node: its cores, the window''s seconds, the server''s, servebench''s and foreign shares of the cores'' time and the busiest foreign process (JSON list)';
COMMENT ON COLUMN cells.hang_watch_error IS 'why the hang watch asked for broke during the cell (the cell was not checked for hangs and is invalid); NULL: it judged, or none was asked for';
COMMENT ON COLUMN nodes.roofline_measured_at IS 'when the node''s roofline figures were measured (for cached figures: when they were measured then)';
COMMENT ON COLUMN nodes.roofline_cached IS 'whether the roofline figures came from the cache of an earlier run rather than measured in this one';
COMMENT ON COLUMN nodes.roofline_busy IS 'how busy other processes kept the roofline''s cores just before it was measured (above roofline.max_busy it is measured again on the next run) [0-1]';
COMMENT ON COLUMN nodes.roofline_load_avg IS 'the node''s 1-minute load average when its roofline was measured';
