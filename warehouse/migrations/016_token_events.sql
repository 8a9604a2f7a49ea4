-- TTFT and E2EL are timed on token events (an event carrying a token, whatever its
-- text: vLLM sends `text: ""` for a token that ends inside a UTF-8 sequence). The first event
-- with visible text is kept apart, for those who want the time to the first visible character.

ALTER TABLE requests ADD COLUMN first_text_s DOUBLE;   -- first event with non-empty text, from the cell's t0
ALTER TABLE cells ADD COLUMN ttft_text_p50_ms DOUBLE;   -- first visible text - send
ALTER TABLE cells ADD COLUMN ttft_text_p99_ms DOUBLE;
