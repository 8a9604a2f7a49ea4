-- Engine knobs as sweep axes, and the tuner's verdict.
-- A cell's knobs (part of its series identity where set; NULL: the mode had none); each
-- capacity's configuration and the TPOT p50 at it (the Pareto chart's other axis); and per
-- tuning run the best configuration against the campaign's default.

ALTER TABLE cells ADD COLUMN knobs JSON;              -- {"max_num_seqs": 8, "chunked_prefill": false}
ALTER TABLE capacity ADD COLUMN knobs JSON;
ALTER TABLE capacity ADD COLUMN tpot_p50_ms DOUBLE;   -- median over the repeats of the probe at the capacity

CREATE TABLE tuning (
    run_id           VARCHAR PRIMARY KEY,
    search_over      VARCHAR NOT NULL,    -- rate | clients
    slo              JSON NOT NULL,
    configurations   INTEGER NOT NULL,    -- searched (one server launch each, restarts apart)
    launches         INTEGER NOT NULL,    -- configurations whose server was launched (restarts not counted)
    probes           INTEGER NOT NULL,    -- probe cells over all configurations
    default_mode     VARCHAR NOT NULL,    -- the first mode, every knob axis at its first value
    best_mode        VARCHAR,             -- the highest capacity (ties: the lower TPOT p50)
    default_capacity DOUBLE,
    best_capacity    DOUBLE,
    ratio            DOUBLE,              -- best / default capacity
    ratio_low        DOUBLE,              -- what the probes' brackets allow at worst ...
    ratio_high       DOUBLE,              -- ... and at best (NULL: unbounded)
    pareto           JSON,                -- modes on the capacity / TPOT p50 front
    why              VARCHAR
);
