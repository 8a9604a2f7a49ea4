-- Issue 18: capacity as a nightly series. Each capacity gets a series id (campaign, mode and
-- knobs, what was searched, the SLO, the workload's lengths, the hardware fingerprint) and its
-- value joins the metrics the regression detector follows, as metric 'capacity'.

ALTER TABLE capacity ADD COLUMN series_id VARCHAR;

CREATE OR REPLACE VIEW cell_metrics AS
SELECT * FROM (
    UNPIVOT (
        SELECT run_id, series_id, cell_id, cell_key, "repeat",
               output_throughput, request_throughput, ttft_p50_ms, ttft_p99_ms, tpot_p50_ms, goodput
        FROM cells
        WHERE status = 'completed' AND coalesce(valid, false) AND series_id IS NOT NULL
    )
    ON output_throughput, request_throughput, ttft_p50_ms, ttft_p99_ms, tpot_p50_ms, goodput
    INTO NAME metric VALUE value
)
UNION ALL
SELECT run_id, series_id, run_id || '/' || mode || '.capacity' AS cell_id, mode || '.capacity' AS cell_key,
       0 AS "repeat", 'capacity' AS metric, capacity AS value
FROM capacity
WHERE capacity IS NOT NULL AND series_id IS NOT NULL;
