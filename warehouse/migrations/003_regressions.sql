-- Regression detection: series, nights, annotations and findings.
-- A series is one metric of one cell identity (campaign, mode, tp, pp, executor, load,
-- lengths) on one hardware fingerprint; the engine version is not part of it, so engine
-- changes show up within a series. servebench/regression/series.py computes both ids.

ALTER TABLE runs ADD COLUMN hardware_fingerprint VARCHAR;   -- hash of the nodes' CPU model, cores, memory, NUMA
ALTER TABLE cells ADD COLUMN series_id VARCHAR;             -- the cell's identity on that hardware

-- A user's word on the history: 'accept' makes a night the start of a new baseline (the
-- change is intended), 'exclude' removes a night (a broken node, a half-failed run).
CREATE TABLE annotations (
    annotation_id VARCHAR PRIMARY KEY,
    created_at    TIMESTAMPTZ NOT NULL,
    action        VARCHAR NOT NULL CHECK (action IN ('accept', 'exclude')),
    run_id        VARCHAR NOT NULL,          -- the night
    series_id     VARCHAR,                   -- NULL: every series of that run
    metric        VARCHAR,                   -- NULL: every metric
    note          VARCHAR NOT NULL,
    author        VARCHAR
);

-- What each night's analysis found, per series and metric (re-analysis replaces a night's rows).
CREATE TABLE regressions (
    run_id         VARCHAR NOT NULL,         -- the night analyzed
    series_id      VARCHAR NOT NULL,
    metric         VARCHAR NOT NULL,
    detected_at    TIMESTAMPTZ NOT NULL,
    night_at       TIMESTAMPTZ NOT NULL,
    series_label   VARCHAR NOT NULL,         -- campaign/mode load lengths
    campaign       VARCHAR NOT NULL,
    mode           VARCHAR NOT NULL,
    cell_point     VARCHAR NOT NULL,         -- the cell key without its repeat, e.g. tp2.c4
    hardware_fingerprint VARCHAR,
    kind           VARCHAR NOT NULL,         -- regression | improvement | noisy
    status         VARCHAR NOT NULL,         -- suspected (gate only) | confirmed (change point) | noisy
    direction      VARCHAR NOT NULL,         -- higher | lower (is better)
    last_good_run  VARCHAR,
    first_bad_run  VARCHAR,
    last_good_at   TIMESTAMPTZ,
    first_bad_at   TIMESTAMPTZ,
    baseline_value DOUBLE,
    value          DOUBLE,
    change         DOUBLE,                   -- value / baseline - 1
    p_value        DOUBLE,                   -- one-sided Mann-Whitney U
    change_point   BOOLEAN,                  -- a change point sits at first_bad_run
    nights_since_change INTEGER,
    engine_last_good VARCHAR,
    engine_first_bad VARCHAR,
    engine_versions VARCHAR[],               -- every engine version from last good to first bad night
    detail         VARCHAR,
    PRIMARY KEY (run_id, series_id, metric)
);
