-- Faults injected by a campaign's `faults:` block, one row each: where, when (wall and
-- the orchestrator's monotonic clock, as cells and samples), what was hit, or why nothing was.

CREATE TABLE faults (
    run_id    VARCHAR NOT NULL,
    cell_key  VARCHAR NOT NULL,
    mode      VARCHAR NOT NULL,
    action    VARCHAR NOT NULL,      -- kill | stop
    node      VARCHAR NOT NULL,
    match     VARCHAR NOT NULL,      -- the regex over the run's command lines on the node
    at_s      DOUBLE NOT NULL,       -- asked: seconds into the cell's load
    injected_at TIMESTAMPTZ,         -- when it was sent (NULL: not injected)
    t_mono    DOUBLE,
    hit       JSON,                  -- [[pid, command], ...]
    error     VARCHAR                -- why it was not injected
);
