-- What the performance model predicted for each cell (docs/performance-model.md), landed beside the cell's
-- measurement: the predicted TTFT, TPOT and throughput, what bounds the cell, the figures and efficiency
-- factors the prediction was made from (fitted on the run's TP=1 cells, or the defaults), the measurement's
-- ratio to it and, for a cell far below it, the causes the model names. Cells landed before this migration,
-- or without figures for their nodes, have no row here.

CREATE TABLE IF NOT EXISTS cell_predictions (
    run_id                      VARCHAR NOT NULL,
    cell_key                    VARCHAR NOT NULL,
    mode                        VARCHAR NOT NULL,
    ttft_p50_ms                 DOUBLE,
    ttft_p99_ms                 DOUBLE,
    tpot_p50_ms                 DOUBLE,
    tpot_p99_ms                 DOUBLE,
    output_throughput           DOUBLE,
    bound                       VARCHAR,
    figures_source              VARCHAR,
    efficiency_source           VARCHAR,
    bandwidth_efficiency        DOUBLE,
    compute_efficiency          DOUBLE,
    step_overhead_ms            DOUBLE,
    request_overhead_ms         DOUBLE,
    throughput_ratio            DOUBLE,
    tpot_ratio                  DOUBLE,
    flags                       VARCHAR[],
    PRIMARY KEY (run_id, cell_key)
);

COMMENT ON TABLE cell_predictions IS 'Each cell''s prediction by the performance model, beside its measurement (cells.run_id, cells.cell_key)';
COMMENT ON COLUMN cell_predictions.run_id IS 'the run';
COMMENT ON COLUMN cell_predictions.cell_key IS 'the cell (cells.cell_key)';
COMMENT ON COLUMN cell_predictions.mode IS 'the cell''s mode (cells.mode)';
COMMENT ON COLUMN cell_predictions.ttft_p50_ms IS 'predicted median time to first token [ms]';
COMMENT ON COLUMN cell_predictions.ttft_p99_ms IS 'predicted 99th percentile time to first token [ms]';
COMMENT ON COLUMN cell_predictions.tpot_p50_ms IS 'predicted median time per output token after the first [ms]';
COMMENT ON COLUMN cell_predictions.tpot_p99_ms IS 'predicted 99th percentile time per output token after the first [ms]';
COMMENT ON COLUMN cell_predictions.output_throughput IS 'predicted output tokens a second of the whole mode [tok/s]';
COMMENT ON COLUMN cell_predictions.bound IS 'what most of the cell''s engine steps wait on: bandwidth, compute, network or engine (its fixed cost a step)';
COMMENT ON COLUMN cell_predictions.figures_source IS 'where the node figures came from: the roofline the run landed, a cached one, or a declared chip''s published figures';
COMMENT ON COLUMN cell_predictions.efficiency_source IS 'the efficiency factors'' origin: defaults, or fitted on the run''s TP=1 cells';
COMMENT ON COLUMN cell_predictions.bandwidth_efficiency IS 'the share of the node''s measured bandwidth the model lets a rank reach [0-1]';
COMMENT ON COLUMN cell_predictions.compute_efficiency IS 'the share of the node''s matmul peak for the dtype the model lets a rank reach [0-1]';
COMMENT ON COLUMN cell_predictions.step_overhead_ms IS 'the engine''s fixed cost a step the model adds [ms]';
COMMENT ON COLUMN cell_predictions.request_overhead_ms IS 'the API process''s cost a request before it is scheduled [ms]';
COMMENT ON COLUMN cell_predictions.throughput_ratio IS 'measured output throughput / predicted (NULL: no measurement)';
COMMENT ON COLUMN cell_predictions.tpot_ratio IS 'predicted TPOT p50 / measured: below 1 the cell decoded slower than predicted (NULL: no measurement)';
COMMENT ON COLUMN cell_predictions.flags IS 'for a cell far below its prediction, the causes the model names (a rank across NUMA nodes, fewer cores than threads, oversubscription, other processes, the network); empty: none needed';
