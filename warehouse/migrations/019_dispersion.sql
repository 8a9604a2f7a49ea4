-- How far a cell's repeats are apart (servebench/analysis/dispersion.py says why the
-- median, why a bootstrap of it, and what its interval is worth with 2 to 5 repeats).
-- A load point is the cell key without its repeat (tp2.c4.r1 -> tp2.c4): mode, network setting,
-- workload and load point, the same in every repeat of one run. Only completed cells the load
-- generator found valid count, as in `cell_metrics`.

-- The bootstrap interval is not SQL: servebench computes it (seeded) when a run's cells are
-- landed (servebench/analysis/cell_dispersion.py, land_intervals) from the values the view
-- `cell_repeat_values` lists (warehouse/views/).
CREATE TABLE cell_intervals (
    run_id        VARCHAR NOT NULL,
    cell_point    VARCHAR NOT NULL,          -- e.g. tp2.c4
    metric        VARCHAR NOT NULL,
    repeat_values DOUBLE[] NOT NULL,         -- the repeats it was computed from, in repeat order
    ci_low        DOUBLE NOT NULL,           -- percentile bootstrap of the median of repeats
    ci_high       DOUBLE NOT NULL,
    level         DOUBLE NOT NULL,           -- 0.95
    resamples     INTEGER NOT NULL,
    seed          BIGINT NOT NULL,
    computed_at   TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (run_id, cell_point, metric)
);
