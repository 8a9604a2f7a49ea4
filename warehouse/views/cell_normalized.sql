-- Throughput normalized to the best cell of the same mode in the same run (1.0 = best).
CREATE OR REPLACE VIEW cell_normalized AS
SELECT run_id, cell_id, cell_key, mode, clients, offered_rate, output_throughput,
       output_throughput / nullif(max(output_throughput) OVER (PARTITION BY run_id, mode), 0)
           AS normalized_throughput
FROM cells;

COMMENT ON VIEW cell_normalized IS 'Per cell: output throughput over the best cell of the same mode in the same run (1.0 = best)';
COMMENT ON COLUMN cell_normalized.run_id IS 'the run';
COMMENT ON COLUMN cell_normalized.cell_id IS 'the cell';
COMMENT ON COLUMN cell_normalized.cell_key IS 'the cell''s key';
COMMENT ON COLUMN cell_normalized.mode IS 'the cell''s mode';
COMMENT ON COLUMN cell_normalized.clients IS 'closed loop: concurrent clients';
COMMENT ON COLUMN cell_normalized.offered_rate IS 'open loop: the rate offered, as the cell key names it (cells.offered_rate) [req/s]';
COMMENT ON COLUMN cell_normalized.output_throughput IS 'output tokens per second over the steady window [tok/s]';
COMMENT ON COLUMN cell_normalized.normalized_throughput IS 'output_throughput / the mode''s best in the run [0-1]';
