-- One row per valid measured value of a main metric, with its load point: the cell key without its
-- repeat (tp2.c4.r1 -> tp2.c4), the same in every repeat of one run. Only completed cells the load
-- generator found valid count, as in the regression detector's metrics.
CREATE OR REPLACE VIEW cell_repeat_values AS
UNPIVOT (
    SELECT run_id, regexp_replace(cell_key, '\.r[0-9]+$', '') AS cell_point, cell_id, "repeat", series_id,
           mode, load_kind, clients, offered_rate, link, workload_name,
           output_throughput, request_throughput, ttft_p50_ms, ttft_p99_ms, tpot_p50_ms, e2el_p50_ms, goodput
    FROM cells
    WHERE status = 'completed' AND coalesce(valid, false)
)
ON output_throughput, request_throughput, ttft_p50_ms, ttft_p99_ms, tpot_p50_ms, e2el_p50_ms, goodput
INTO NAME metric VALUE value;

COMMENT ON VIEW cell_repeat_values IS 'One row per valid measured value of a main metric, with its load point (the cell key without its repeat)';
COMMENT ON COLUMN cell_repeat_values.run_id IS 'the run';
COMMENT ON COLUMN cell_repeat_values.cell_point IS 'the load point: the cell key without its repeat, e.g. tp2.c4';
COMMENT ON COLUMN cell_repeat_values.cell_id IS 'the cell';
COMMENT ON COLUMN cell_repeat_values."repeat" IS 'which repeat (0 first)';
COMMENT ON COLUMN cell_repeat_values.series_id IS 'the cell''s nightly series';
COMMENT ON COLUMN cell_repeat_values.mode IS 'the cell''s mode';
COMMENT ON COLUMN cell_repeat_values.load_kind IS 'closed | open';
COMMENT ON COLUMN cell_repeat_values.clients IS 'closed loop: concurrent clients';
COMMENT ON COLUMN cell_repeat_values.offered_rate IS 'open loop: the rate offered, as the cell key names it (cells.offered_rate) [req/s]';
COMMENT ON COLUMN cell_repeat_values.link IS 'the network setting';
COMMENT ON COLUMN cell_repeat_values.workload_name IS 'the workload''s name';
COMMENT ON COLUMN cell_repeat_values.metric IS 'the cells column (output_throughput [tok/s], ttft_p50_ms [ms], ...)';
COMMENT ON COLUMN cell_repeat_values.value IS 'the value [the metric''s unit]';
