-- Each cell against the roofline (docs/roofline.md): every server node's memory bandwidth and peak
-- matmul rate, measured on its servers' CPUs by a micro-benchmark when the engine build is placed
-- there (servebench/roofline/nodes.py), and each mode's bytes and parameters per rank from the
-- model's shape (servebench/planning/memory.py), landed with its server's row. The view cell_roofline
-- puts them together.

ALTER TABLE nodes ADD COLUMN mem_bandwidth_gbps DOUBLE;
ALTER TABLE nodes ADD COLUMN matmul_peak_gflops_bf16 DOUBLE;
ALTER TABLE nodes ADD COLUMN matmul_peak_gflops_fp32 DOUBLE;
ALTER TABLE nodes ADD COLUMN roofline_cpus INTEGER[];
ALTER TABLE nodes ADD COLUMN roofline_emulated BOOLEAN;
ALTER TABLE nodes ADD COLUMN roofline_method VARCHAR;

ALTER TABLE servers ADD COLUMN served_dtype VARCHAR;
ALTER TABLE servers ADD COLUMN rank_weight_bytes BIGINT;
ALTER TABLE servers ADD COLUMN rank_kv_bytes_per_token BIGINT;
ALTER TABLE servers ADD COLUMN rank_parameters BIGINT;
ALTER TABLE servers ADD COLUMN ranks_per_node INTEGER;

COMMENT ON COLUMN nodes.mem_bandwidth_gbps IS 'memory bandwidth: a streaming read of a 256 MiB buffer on roofline_cpus, best of a few (docs/roofline.md) [GB/s]';
COMMENT ON COLUMN nodes.matmul_peak_gflops_bf16 IS 'peak bf16 matrix multiply: a 2048x2048 matmul on roofline_cpus, 2 n^3 per product; NULL: not measured (no torch) [GFLOP/s]';
COMMENT ON COLUMN nodes.matmul_peak_gflops_fp32 IS 'peak fp32 matrix multiply: a 2048x2048 matmul on roofline_cpus; NULL: not measured (neither torch nor numpy) [GFLOP/s]';
COMMENT ON COLUMN nodes.roofline_cpus IS 'the CPUs the roofline was measured on (the node''s servers'' CPUs), one thread each';
COMMENT ON COLUMN nodes.roofline_emulated IS 'the roofline was measured under qemu-user emulation: recorded, not judged';
COMMENT ON COLUMN nodes.roofline_method IS 'how the roofline was measured: the library (torch, numpy, python), the bandwidth kernel, what was not measured';
COMMENT ON COLUMN servers.served_dtype IS 'what the model''s matrices are stored in as served (bfloat16, float32, q4_0): the peak the prefill is judged against';
COMMENT ON COLUMN servers.rank_weight_bytes IS 'the weights the mode''s largest rank holds, from the model''s shape (memory.py) [bytes]';
COMMENT ON COLUMN servers.rank_kv_bytes_per_token IS 'one token''s KV cache in the largest rank (its layers, its share of the KV heads) [bytes]';
COMMENT ON COLUMN servers.rank_parameters IS 'the parameters the mode''s largest rank holds (a prompt token costs 2 FLOPs each)';
COMMENT ON COLUMN servers.ranks_per_node IS 'the most ranks holding layers that share one node (they share its bandwidth and peak)';
