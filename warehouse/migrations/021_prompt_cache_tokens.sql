-- A request's prompt tokens the server reused from its prefix cache and those it
-- processed, where its responses say so (llama.cpp's timings.cache_n and timings.prompt_n); NULL
-- where they do not (vLLM: its cell's hit rate comes from /metrics counters instead).
ALTER TABLE requests ADD COLUMN cached_input_tokens INTEGER;
ALTER TABLE requests ADD COLUMN processed_input_tokens INTEGER;
