-- Workloads users actually run (docs/workloads.md).
-- A cell's workload (its campaign's `load.workload` block, every field: part of its series
-- identity; NULL: the fixed input_len/output_len) and its name as in the cell key; per request
-- what the workload asked for, beside what the server says it served (input_tokens, output_tokens).

ALTER TABLE cells ADD COLUMN workload JSON;               -- {"kind": "shared-prefix", "groups": 2, ...}
ALTER TABLE cells ADD COLUMN workload_name VARCHAR;       -- 'prefix', 'trace', a block's `name`
ALTER TABLE cells ADD COLUMN prefix_cache_hit_rate DOUBLE;  -- the server's prefix-cache hits / queries (prompt tokens) over the cell
ALTER TABLE requests ADD COLUMN expected_input_tokens INTEGER;     -- the prompt's tokens as sent (token ids: exact)
ALTER TABLE requests ADD COLUMN requested_output_tokens INTEGER;   -- the answer length asked for (max_tokens)
ALTER TABLE requests ADD COLUMN prefix_group INTEGER;              -- shared-prefix: the request's group
ALTER TABLE requests ADD COLUMN session INTEGER;                   -- sessions: the conversation ...
ALTER TABLE requests ADD COLUMN turn INTEGER;                      -- ... and the turn in it (0 first)
