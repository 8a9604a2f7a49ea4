-- `servebench bisect`: one row per measured commit, landed as soon as it is measured (a
-- bisect stopped half way keeps its steps). Each step is also an ordinary run (run_id) of the
-- campaign's mode at that commit, with its cells, requests and build.

CREATE TABLE IF NOT EXISTS bisect_steps (
    bisect_id    VARCHAR NOT NULL,
    step         INTEGER NOT NULL,     -- 0: the good commit (the baseline), then the midpoints in order
    campaign     VARCHAR NOT NULL,
    mode         VARCHAR NOT NULL,
    metric       VARCHAR NOT NULL,     -- a column of cells (tpot_p50_ms, output_throughput, ...)
    direction    VARCHAR NOT NULL,     -- which way is better: higher | lower
    good         VARCHAR NOT NULL,     -- the commits the bisect was given (full hashes)
    bad          VARCHAR NOT NULL,
    commit_hash  VARCHAR NOT NULL,
    subject      VARCHAR,              -- the commit's first line
    run_id       VARCHAR NOT NULL,     -- the run that measured it
    build_key    VARCHAR,
    repeat_values DOUBLE[] NOT NULL,   -- the metric of each repeat
    value        DOUBLE NOT NULL,      -- their median
    change       DOUBLE,               -- worse than the baseline by this (relative; NULL for the baseline)
    separation   DOUBLE,               -- the least any repeat is worse than any baseline repeat (relative)
    verdict      VARCHAR NOT NULL,     -- baseline | good | bad
    measured_at  TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (bisect_id, step)
);
