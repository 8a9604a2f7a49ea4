-- KV-cache saturation measured the same way on every engine.
-- vLLM reports its KV usage as a fraction and its cache misses as preemptions; llama.cpp has no KV
-- gauge (its /slots says how many tokens each busy slot holds) and no miss counter (a batch that
-- finds no room logs "failed to find a memory slot" and is retried smaller).

ALTER TABLE server_samples ADD COLUMN kv_tokens DOUBLE;           -- KV tokens held by the sequences in flight
ALTER TABLE server_samples ADD COLUMN decode_steps_total DOUBLE;  -- counter: decode calls (llama.cpp) / engine steps (vLLM)
ALTER TABLE cells ADD COLUMN kv_failures INTEGER;                 -- KV-full log lines during the cell (llama.cpp)

-- What went into a build and what it says it is: the key's parts (packages, pip options, CMake
-- flags, CPU flags) and the built tool's version line (llama.cpp: its commit and compiler).
ALTER TABLE builds ADD COLUMN inputs JSON;
ALTER TABLE builds ADD COLUMN tool_version VARCHAR;

-- Side by side (a campaign's `engines:`): which engine served each mode (NULL before: the run's one engine).
ALTER TABLE servers ADD COLUMN engine VARCHAR;
