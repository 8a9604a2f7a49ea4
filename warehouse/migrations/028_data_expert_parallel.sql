-- Data and expert parallelism (docs/parallel-modes.md): a mode's `dp` (vLLM's data-parallel
-- engines, each of tp x pp workers) and `ep` (vLLM's expert parallelism over the dp x tp ranks) on its
-- cells, and the whole layout (tp, pp, dp, ep) on its server's row, which had none. Rows landed before
-- this migration were all dp = 1 without ep; their servers take tp and pp from their cells, a reference
-- server (reference-tp1) is one worker.

ALTER TABLE cells ADD COLUMN dp INTEGER;
ALTER TABLE cells ADD COLUMN ep BOOLEAN;
UPDATE cells SET dp = 1, ep = false;

ALTER TABLE servers ADD COLUMN tp INTEGER;
ALTER TABLE servers ADD COLUMN pp INTEGER;
ALTER TABLE servers ADD COLUMN dp INTEGER;
ALTER TABLE servers ADD COLUMN ep BOOLEAN;
UPDATE servers SET tp = c.tp, pp = c.pp, dp = 1, ep = false
    FROM (SELECT run_id, mode, any_value(tp) AS tp, any_value(pp) AS pp FROM cells GROUP BY ALL) AS c
    WHERE servers.run_id = c.run_id AND servers.mode = c.mode;
UPDATE servers SET tp = 1, pp = 1, dp = 1, ep = false WHERE tp IS NULL AND mode LIKE 'reference-%';

COMMENT ON COLUMN cells.dp IS 'data-parallel size: engines of tp x pp workers behind the mode''s one API server (1: none)';
COMMENT ON COLUMN cells.ep IS 'expert parallel: the MoE layers'' routed experts split over the dp x tp ranks (vLLM''s --enable-expert-parallel)';
COMMENT ON COLUMN servers.tp IS 'tensor-parallel size of the mode served';
COMMENT ON COLUMN servers.pp IS 'pipeline-parallel size of the mode served';
COMMENT ON COLUMN servers.dp IS 'data-parallel size of the mode served: its engines, each of tp x pp workers (1: none)';
COMMENT ON COLUMN servers.ep IS 'expert parallel: the routed experts split over the dp x tp ranks';
