-- A run resumed after its orchestrator was killed, or whose failed cells were measured
-- again (`servebench resume`, `servebench rerun-failed`): one entry per resume, in order:
-- {at, kind: resume | rerun-failed, status_before, landed_from_run_dir: [cell keys],
--  measured: [cell keys], reclaimed: [what the killed orchestrator had left, stopped]}.

ALTER TABLE runs ADD COLUMN resumes JSON;
