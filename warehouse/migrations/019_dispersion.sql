-- Issue 35: how far a cell's repeats are apart (servebench/analysis/dispersion.py says why the
-- median, why a bootstrap of it, and what its interval is worth with 2 to 5 repeats).
-- A load point is the cell key without its repeat (tp2.c4.r1 -> tp2.c4): mode, network setting,
-- workload and load point, the same in every repeat of one run. Only completed cells the load
-- generator found valid count, as in `cell_metrics`.

-- One row per valid measured value of a main metric, with its load point.
CREATE VIEW cell_repeat_values AS
UNPIVOT (
    SELECT run_id, regexp_replace(cell_key, '\.r[0-9]+$', '') AS cell_point, cell_id, "repeat", series_id,
           mode, load_kind, clients, rate, link, workload_name,
           output_throughput, request_throughput, ttft_p50_ms, ttft_p99_ms, tpot_p50_ms, e2el_p50_ms, goodput
    FROM cells
    WHERE status = 'completed' AND coalesce(valid, false)
)
ON output_throughput, request_throughput, ttft_p50_ms, ttft_p99_ms, tpot_p50_ms, e2el_p50_ms, goodput
INTO NAME metric VALUE value;

-- The bootstrap interval is not SQL: servebench computes it (seeded) when a run's cells are
-- landed (servebench/analysis/cell_dispersion.py, land_intervals) from the values it lists here.
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

-- Per run, load point and metric: the repeats, their median, CV, range and 95% interval. The CV
-- is computed here, always current; the interval is the landed one, and only while it was
-- computed from exactly these values (NULL: one repeat, or the run's cells changed since).
CREATE VIEW cell_dispersion AS
WITH points AS (
    SELECT run_id, cell_point, metric,
           any_value(mode) AS mode, any_value(load_kind) AS load_kind, any_value(clients) AS clients,
           any_value(rate) AS rate, any_value(link) AS link, any_value(workload_name) AS workload_name,
           any_value(series_id) AS series_id,
           count(*) AS repeats,
           list(value ORDER BY "repeat") AS repeat_values,
           median(value) AS median,
           CASE WHEN count(*) > 1 AND avg(value) <> 0 THEN stddev_samp(value) / abs(avg(value)) END AS cv,
           min(value) AS min_value,
           max(value) AS max_value
    FROM cell_repeat_values
    GROUP BY run_id, cell_point, metric
)
SELECT p.*, i.ci_low, i.ci_high
FROM points p
LEFT JOIN cell_intervals i
  ON i.run_id = p.run_id AND i.cell_point = p.cell_point AND i.metric = p.metric
 AND i.repeat_values = p.repeat_values;
