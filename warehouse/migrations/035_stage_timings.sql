-- How long each stage of a run took (provision, placement, server starts, sampler starts, fetching
-- results, release), with the hosts it covered and what the orchestrator itself spent on it: its CPU
-- time, its threads and its open connections at the stage's end. From these a campaign at 2 to 32
-- hosts shows which stage's cost grows with the hosts (docs/scale.md). Runs landed before this
-- migration have no rows here.

CREATE TABLE IF NOT EXISTS stage_timings (
    run_id               VARCHAR NOT NULL,
    seq                  INTEGER NOT NULL,
    stage                VARCHAR NOT NULL,
    subject              VARCHAR,
    hosts                INTEGER NOT NULL,
    started_at           TIMESTAMP WITH TIME ZONE NOT NULL,
    seconds              DOUBLE NOT NULL,
    orchestrator_cpu_s   DOUBLE,
    orchestrator_threads INTEGER,
    open_connections     INTEGER,
    ok                   BOOLEAN NOT NULL,
    error                VARCHAR,
    PRIMARY KEY (run_id, seq)
);

COMMENT ON TABLE stage_timings IS 'Each stage of a run as it ran: its wall time, the hosts it covered and the orchestrator''s own CPU time, threads and connections over it';
COMMENT ON COLUMN stage_timings.run_id IS 'the run';
COMMENT ON COLUMN stage_timings.seq IS 'the stage''s place in the run''s order (0, 1, ...): a stage that ran more than once (a mode''s server start) has a row each time';
COMMENT ON COLUMN stage_timings.stage IS 'what ran: provision, placement, server-start, sampler-start, fetch-results, release, ...';
COMMENT ON COLUMN stage_timings.subject IS 'what the stage was for: an engine, a mode, a cell (NULL: the run as a whole)';
COMMENT ON COLUMN stage_timings.hosts IS 'how many hosts the stage covered';
COMMENT ON COLUMN stage_timings.started_at IS 'when the stage began, on the orchestrator''s clock';
COMMENT ON COLUMN stage_timings.seconds IS 'the stage''s wall time [s]';
COMMENT ON COLUMN stage_timings.orchestrator_cpu_s IS 'CPU time the orchestrator process and the children it waited for (ssh, srun, tar) spent during the stage [s]';
COMMENT ON COLUMN stage_timings.orchestrator_threads IS 'the orchestrator process''s threads at the stage''s end (the most of start and end)';
COMMENT ON COLUMN stage_timings.open_connections IS 'TCP connections the orchestrator process and its children held at the stage''s end (ssh masters and their channels, srun, HTTP clients)';
COMMENT ON COLUMN stage_timings.ok IS 'whether the stage ended without an error';
COMMENT ON COLUMN stage_timings.error IS 'the error the stage ended with (NULL: it ended well)';
