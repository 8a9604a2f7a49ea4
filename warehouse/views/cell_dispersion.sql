-- Per run, load point and metric: the repeats, their median, CV, range and 95% interval. The CV
-- is computed here, always current; the interval is the landed one (`cell_intervals`, a seeded
-- bootstrap servebench computes: servebench/analysis/dispersion.py), and only while it was
-- computed from exactly these values (NULL: one repeat, or the run's cells changed since).
CREATE OR REPLACE VIEW cell_dispersion AS
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
