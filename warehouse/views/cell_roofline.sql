-- Per cell: how near its node's roofline the engine ran (docs/roofline.md). Decode moves, per step,
-- the weights each rank on the busiest node reads (servers.rank_weight_bytes: all but an untied
-- embedding, a lookup) and the KV cache of every sequence in flight at the cell's mean context (mean
-- prompt tokens + half the mean output tokens): bytes per step / TPOT (p50) against the node's
-- measured memory bandwidth. Prefill costs 2 FLOPs per parameter a prompt token goes through in those
-- ranks (servers.rank_parameters: the layers' matrices, not the embedding nor the head, computed for a
-- sequence's last token only): FLOPs per token / (TTFT p50 / mean prompt tokens) against the node's
-- peak matmul rate in the served dtype (bf16 for bfloat16 and float16, else fp32). Sequences in
-- flight: closed loop, the clients; open loop, Little's law (the requests' summed latency / the cell's
-- duration). The node is the run's slowest measured server node. TTFT includes queueing, so the
-- prefill fraction is a lower bound. A rate above its roof is never reported as a fraction above 1:
-- the fraction is clipped to 1, `above_roofline` is true and `note` gives the unclipped ratio (the
-- roof was measured low, or the cell's bytes or FLOPs are counted high: both are to be fixed, not
-- read as an engine beating the hardware). NULL where a figure is unknown (a node not measured, a
-- shape not known, a cell without latencies); on an emulated node the fractions are NULL and `judged`
-- false: qemu-user's figures are recorded, not judged.
CREATE OR REPLACE VIEW cell_roofline AS
WITH node_roof AS (
    SELECT run_id, min(mem_bandwidth_gbps) AS mem_bandwidth_gbps,
           min(matmul_peak_gflops_bf16) AS peak_bf16, min(matmul_peak_gflops_fp32) AS peak_fp32,
           bool_or(roofline_emulated) AS emulated
    FROM nodes
    WHERE coalesce(role, 'server') = 'server' AND roofline_emulated IS NOT NULL
    GROUP BY run_id
), rank_figures AS (
    SELECT run_id, mode, any_value(served_dtype) AS served_dtype, max(rank_weight_bytes) AS rank_weight_bytes,
           max(rank_kv_bytes_per_token) AS rank_kv_bytes_per_token, max(rank_parameters) AS rank_parameters,
           max(ranks_per_node) AS ranks_per_node
    FROM servers GROUP BY run_id, mode
), lengths AS (
    SELECT cell_id, avg(input_tokens) AS mean_input_tokens, avg(output_tokens) AS mean_output_tokens,
           sum(e2el_ms) / 1000 AS busy_s
    FROM measured_requests WHERE completed GROUP BY cell_id
), per_cell AS (
    SELECT c.run_id, c.cell_id, c.cell_key, c.mode, c.load_kind, c.clients, c.offered_rate, c.status,
           f.served_dtype, f.rank_weight_bytes, f.rank_kv_bytes_per_token, f.rank_parameters, f.ranks_per_node,
           n.mem_bandwidth_gbps,
           CASE WHEN f.served_dtype IN ('bfloat16', 'float16') THEN n.peak_bf16 ELSE n.peak_fp32 END
               AS matmul_peak_gflops,
           n.emulated,
           coalesce(l.mean_input_tokens, c.input_len) AS mean_input_tokens,
           coalesce(l.mean_input_tokens, c.input_len) + coalesce(l.mean_output_tokens, c.output_len) / 2
               AS mean_context_tokens,
           CASE WHEN c.load_kind = 'closed' THEN c.clients::DOUBLE
                ELSE l.busy_s / nullif(c.duration_s, 0) END AS in_flight,
           c.tpot_p50_ms, c.ttft_p50_ms
    FROM cells c
    LEFT JOIN rank_figures f ON f.run_id = c.run_id AND f.mode = c.mode
    LEFT JOIN node_roof n ON n.run_id = c.run_id
    LEFT JOIN lengths l ON l.cell_id = c.cell_id
), moved AS (
    SELECT *,
           ranks_per_node * (rank_weight_bytes + in_flight * mean_context_tokens * rank_kv_bytes_per_token)
               AS decode_bytes_per_step,
           ranks_per_node * 2.0 * rank_parameters AS prefill_flops_per_token
    FROM per_cell
), rates AS (
    SELECT *,
           decode_bytes_per_step / (tpot_p50_ms / 1000) / 1e9 AS decode_gbps,
           prefill_flops_per_token / (ttft_p50_ms / 1000 / nullif(mean_input_tokens, 0)) / 1e9 AS prefill_gflops
    FROM moved
), ratios AS (
    SELECT *,
           CASE WHEN NOT emulated THEN decode_gbps / nullif(mem_bandwidth_gbps, 0) END AS decode_ratio,
           CASE WHEN NOT emulated THEN prefill_gflops / nullif(matmul_peak_gflops, 0) END AS prefill_ratio
    FROM rates
)
SELECT run_id, cell_id, cell_key, mode, load_kind, clients, offered_rate, status, served_dtype,
       rank_weight_bytes, rank_kv_bytes_per_token, rank_parameters, ranks_per_node,
       in_flight, mean_context_tokens, decode_bytes_per_step, tpot_p50_ms, decode_gbps, mem_bandwidth_gbps,
       CASE WHEN decode_ratio > 1 THEN 1.0 ELSE decode_ratio END AS decode_fraction,
       prefill_flops_per_token, ttft_p50_ms, mean_input_tokens, prefill_gflops, matmul_peak_gflops,
       CASE WHEN prefill_ratio > 1 THEN 1.0 ELSE prefill_ratio END AS prefill_fraction,
       coalesce(emulated, false) AS emulated,
       emulated IS NOT NULL AND NOT emulated AS judged,
       CASE WHEN emulated THEN 'emulated (qemu-user): not judged'
            WHEN emulated IS NULL THEN 'node not measured'
            WHEN rank_weight_bytes IS NULL THEN 'bytes per rank unknown (model shape)'
            WHEN tpot_p50_ms IS NULL OR ttft_p50_ms IS NULL THEN 'no latencies'
            WHEN decode_ratio > 1 OR prefill_ratio > 1 THEN
                concat_ws(', ', CASE WHEN decode_ratio > 1 THEN printf('decode at %.2f', decode_ratio) END,
                          CASE WHEN prefill_ratio > 1 THEN printf('prefill at %.2f', prefill_ratio) END)
                || ' of the measured roof: clipped to 1 (the roof measured low or the work counted high)' END AS note,
       coalesce(decode_ratio > 1 OR prefill_ratio > 1, false) AS above_roofline
FROM ratios;

COMMENT ON VIEW cell_roofline IS 'Per cell: decode bandwidth and prefill FLOP rate against the node''s measured roofline (docs/roofline.md)';
COMMENT ON COLUMN cell_roofline.run_id IS 'the run';
COMMENT ON COLUMN cell_roofline.cell_id IS 'the cell';
COMMENT ON COLUMN cell_roofline.cell_key IS 'the cell''s key';
COMMENT ON COLUMN cell_roofline.mode IS 'the cell''s mode';
COMMENT ON COLUMN cell_roofline.load_kind IS 'closed | open';
COMMENT ON COLUMN cell_roofline.clients IS 'closed loop: concurrent clients';
COMMENT ON COLUMN cell_roofline.offered_rate IS 'open loop: the rate offered, as the cell key names it (cells.offered_rate) [req/s]';
COMMENT ON COLUMN cell_roofline.status IS 'the cell''s status: completed | failed | skipped';
COMMENT ON COLUMN cell_roofline.served_dtype IS 'what the matrices are served in: bfloat16 and float16 are judged against the bf16 peak, the rest fp32';
COMMENT ON COLUMN cell_roofline.rank_weight_bytes IS 'the weights a decode step of the mode''s largest rank reads (an untied embedding left out: a lookup) [bytes]';
COMMENT ON COLUMN cell_roofline.rank_kv_bytes_per_token IS 'a token''s KV cache in that rank [bytes]';
COMMENT ON COLUMN cell_roofline.rank_parameters IS 'the parameters a prompt token goes through in that rank (its layers; not the embedding nor the head)';
COMMENT ON COLUMN cell_roofline.ranks_per_node IS 'ranks sharing the busiest node';
COMMENT ON COLUMN cell_roofline.in_flight IS 'sequences in flight: the clients (closed loop), else summed request latency / the cell''s duration';
COMMENT ON COLUMN cell_roofline.mean_context_tokens IS 'mean context a decode step reads: mean prompt + half the mean output [tokens]';
COMMENT ON COLUMN cell_roofline.decode_bytes_per_step IS 'ranks_per_node x (rank weights + in_flight x mean context x KV per token) [bytes]';
COMMENT ON COLUMN cell_roofline.tpot_p50_ms IS 'time per output token, median: one decode step [ms]';
COMMENT ON COLUMN cell_roofline.decode_gbps IS 'decode_bytes_per_step / TPOT [GB/s]';
COMMENT ON COLUMN cell_roofline.mem_bandwidth_gbps IS 'the node''s measured memory bandwidth [GB/s]';
COMMENT ON COLUMN cell_roofline.decode_fraction IS 'decode_gbps / mem_bandwidth_gbps, clipped to 1 (above_roofline says when); NULL: unknown or emulated [0-1]';
COMMENT ON COLUMN cell_roofline.prefill_flops_per_token IS 'ranks_per_node x 2 x rank parameters: a prompt token''s FLOPs';
COMMENT ON COLUMN cell_roofline.ttft_p50_ms IS 'time to first token, median (queueing included) [ms]';
COMMENT ON COLUMN cell_roofline.mean_input_tokens IS 'mean prompt length of the measured requests [tokens]';
COMMENT ON COLUMN cell_roofline.prefill_gflops IS 'prefill_flops_per_token / (TTFT / mean prompt tokens) [GFLOP/s]';
COMMENT ON COLUMN cell_roofline.matmul_peak_gflops IS 'the node''s measured peak matmul rate in the served dtype [GFLOP/s]';
COMMENT ON COLUMN cell_roofline.prefill_fraction IS 'prefill_gflops / matmul_peak_gflops, clipped to 1 (above_roofline says when; a lower bound: TTFT includes queueing); NULL: unknown or emulated [0-1]';
COMMENT ON COLUMN cell_roofline.emulated IS 'the node was emulated (qemu-user): figures recorded, not judged';
COMMENT ON COLUMN cell_roofline.judged IS 'the fractions are meaningful: a native node was measured';
COMMENT ON COLUMN cell_roofline.note IS 'why a fraction is missing (emulated | node not measured | bytes per rank unknown | no latencies) or clipped (decode/prefill at R of the measured roof)';
COMMENT ON COLUMN cell_roofline.above_roofline IS 'a rate came out above its measured roof: its fraction is clipped to 1 and note gives the ratio';
