-- One row per measured value the regression detector follows: the main figures of completed cells
-- the load generator found valid, and each capacity search's capacity as metric 'capacity' (a
-- capacity is one value a night, its "cell" the mode's search).
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

COMMENT ON VIEW cell_metrics IS 'One row per measured value the regression detector follows: valid completed cells'' main figures, and capacities';
COMMENT ON COLUMN cell_metrics.run_id IS 'the run (the night)';
COMMENT ON COLUMN cell_metrics.series_id IS 'the value''s nightly series';
COMMENT ON COLUMN cell_metrics.cell_id IS 'the cell (a capacity: run_id/mode.capacity)';
COMMENT ON COLUMN cell_metrics.cell_key IS 'the cell''s key (a capacity: mode.capacity)';
COMMENT ON COLUMN cell_metrics."repeat" IS 'which repeat (a capacity: 0)';
COMMENT ON COLUMN cell_metrics.metric IS 'the cells column (output_throughput [tok/s], ttft_p50_ms [ms], ...) or capacity';
COMMENT ON COLUMN cell_metrics.value IS 'the value [the metric''s unit]';
