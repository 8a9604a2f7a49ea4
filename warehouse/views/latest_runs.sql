-- Each campaign's newest run that has ended: what "the latest run" means for every command and report.
-- A run still in progress (status 'running', or one whose orchestrator was killed and that was not resumed)
-- is left out, so a report or a comparison never reads a run half landed.
CREATE OR REPLACE VIEW latest_runs AS
SELECT r.run_id, r.campaign, r.started_at, r.ended_at, r.status,
       count(c.cell_id) AS cells,
       count(c.cell_id) FILTER (WHERE c.valid) AS cells_valid
FROM runs r
LEFT JOIN cells c USING (run_id)
WHERE r.status <> 'running'
  AND r.run_id = (SELECT arg_max(o.run_id, o.started_at) FROM runs o
                  WHERE o.campaign = r.campaign AND o.status <> 'running')
GROUP BY ALL;

COMMENT ON VIEW latest_runs IS 'Each campaign''s newest run that has ended (runs in progress left out)';
COMMENT ON COLUMN latest_runs.run_id IS 'the run''s id';
COMMENT ON COLUMN latest_runs.campaign IS 'the campaign''s name';
COMMENT ON COLUMN latest_runs.started_at IS 'when the run started';
COMMENT ON COLUMN latest_runs.ended_at IS 'when it ended';
COMMENT ON COLUMN latest_runs.status IS 'completed | partial | invalid | failed | interrupted';
COMMENT ON COLUMN latest_runs.cells IS 'cells the run landed';
COMMENT ON COLUMN latest_runs.cells_valid IS 'of them, cells whose measurement is valid';
