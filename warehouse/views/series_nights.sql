-- A night is a run; its value is the median over its repeats.
CREATE OR REPLACE VIEW series_nights AS
SELECT m.series_id, m.metric, m.run_id, r.started_at AS night_at, r.campaign, r.hardware_fingerprint,
       b.engine_version, r.build_key,
       list(m.value ORDER BY m."repeat") AS repeat_values,
       median(m.value) AS value,
       count(*) AS repeats,
       CASE WHEN count(*) > 1 AND avg(m.value) <> 0 THEN stddev_samp(m.value) / abs(avg(m.value)) END AS cv
FROM cell_metrics m
JOIN runs r USING (run_id)
LEFT JOIN builds b ON b.build_key = r.build_key
GROUP BY ALL;

COMMENT ON VIEW series_nights IS 'Per series, metric and night (run): the repeats, their median and CV, the engine version';
COMMENT ON COLUMN series_nights.series_id IS 'the series';
COMMENT ON COLUMN series_nights.metric IS 'the cells column, or capacity';
COMMENT ON COLUMN series_nights.run_id IS 'the night''s run';
COMMENT ON COLUMN series_nights.night_at IS 'when the run started';
COMMENT ON COLUMN series_nights.campaign IS 'the run''s campaign';
COMMENT ON COLUMN series_nights.hardware_fingerprint IS 'the run''s hardware';
COMMENT ON COLUMN series_nights.engine_version IS 'the engine version of the run''s build';
COMMENT ON COLUMN series_nights.build_key IS 'the run''s build';
COMMENT ON COLUMN series_nights.repeat_values IS 'the repeats'' values [the metric''s unit]';
COMMENT ON COLUMN series_nights.value IS 'the night''s value: the median of its repeats [the metric''s unit]';
COMMENT ON COLUMN series_nights.repeats IS 'valid repeats';
COMMENT ON COLUMN series_nights.cv IS 'coefficient of variation: sample stddev / |mean| (NULL: one repeat) [0-1]';
