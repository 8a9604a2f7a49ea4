-- One row per valid measured value of a main metric, with its load point: the cell key without its
-- repeat (tp2.c4.r1 -> tp2.c4), the same in every repeat of one run. Only completed cells the load
-- generator found valid count, as in the regression detector's metrics.
CREATE OR REPLACE VIEW cell_repeat_values AS
UNPIVOT (
    SELECT run_id, regexp_replace(cell_key, '\.r[0-9]+$', '') AS cell_point, cell_id, "repeat", series_id,
           mode, load_kind, clients, rate, link, workload_name,
           output_throughput, request_throughput, ttft_p50_ms, ttft_p99_ms, tpot_p50_ms, e2el_p50_ms, goodput
    FROM cells
    WHERE status = 'completed' AND coalesce(valid, false)
)
ON output_throughput, request_throughput, ttft_p50_ms, ttft_p99_ms, tpot_p50_ms, e2el_p50_ms, goodput
INTO NAME metric VALUE value;
