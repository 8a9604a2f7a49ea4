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
