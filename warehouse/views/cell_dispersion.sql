-- Per run, load point and metric: the repeats, their median, CV, range and 95% interval. The CV
-- is computed here, always current; the interval is the landed one (`cell_intervals`, a seeded
-- bootstrap servebench computes: servebench/analysis/dispersion.py), and only while it was
-- computed from exactly these values (NULL: one repeat, or the run's cells changed since).
CREATE OR REPLACE VIEW cell_dispersion AS
WITH points AS (
    SELECT run_id, cell_point, metric,
           any_value(mode) AS mode, any_value(load_kind) AS load_kind, any_value(clients) AS clients,
           any_value(offered_rate) AS offered_rate, any_value(link) AS link, any_value(workload_name) AS workload_name,
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

COMMENT ON VIEW cell_dispersion IS 'Per run, load point and metric: the repeats, their median, CV, range and the landed 95% interval';
COMMENT ON COLUMN cell_dispersion.run_id IS 'the run';
COMMENT ON COLUMN cell_dispersion.cell_point IS 'the load point: the cell key without its repeat, e.g. tp2.c4';
COMMENT ON COLUMN cell_dispersion.metric IS 'the cells column, e.g. output_throughput';
COMMENT ON COLUMN cell_dispersion.mode IS 'the point''s mode';
COMMENT ON COLUMN cell_dispersion.load_kind IS 'closed | open';
COMMENT ON COLUMN cell_dispersion.clients IS 'closed loop: concurrent clients';
COMMENT ON COLUMN cell_dispersion.offered_rate IS 'open loop: the rate offered, as the cell key names it (cells.offered_rate) [req/s]';
COMMENT ON COLUMN cell_dispersion.link IS 'the network setting';
COMMENT ON COLUMN cell_dispersion.workload_name IS 'the workload''s name';
COMMENT ON COLUMN cell_dispersion.series_id IS 'the point''s nightly series';
COMMENT ON COLUMN cell_dispersion.repeats IS 'valid repeats';
COMMENT ON COLUMN cell_dispersion.repeat_values IS 'the repeats'' values, in repeat order [the metric''s unit]';
COMMENT ON COLUMN cell_dispersion.median IS 'the median of the repeats [the metric''s unit]';
COMMENT ON COLUMN cell_dispersion.cv IS 'coefficient of variation: sample stddev / |mean| (NULL: one repeat) [0-1]';
COMMENT ON COLUMN cell_dispersion.min_value IS 'the lowest repeat [the metric''s unit]';
COMMENT ON COLUMN cell_dispersion.max_value IS 'the highest repeat [the metric''s unit]';
COMMENT ON COLUMN cell_dispersion.ci_low IS 'lower end of the bootstrap 95% interval of the median (NULL: not computed from these values) [the metric''s unit]';
COMMENT ON COLUMN cell_dispersion.ci_high IS 'upper end of that interval [the metric''s unit]';
