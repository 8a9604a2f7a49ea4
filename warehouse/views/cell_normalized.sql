-- Throughput normalized to the best cell of the same mode in the same run (1.0 = best).
CREATE OR REPLACE VIEW cell_normalized AS
SELECT run_id, cell_id, cell_key, mode, clients, rate, output_throughput,
       output_throughput / nullif(max(output_throughput) OVER (PARTITION BY run_id, mode), 0)
           AS normalized_throughput
FROM cells;
