-- The rate of an open-loop cell's schedule as drawn (the load generator's `scheduled_rate`): with few
-- Poisson arrivals it differs from the rate asked (24 arrivals at 8 req/s may span 11 req/s), and the
-- generator judges its own validity against it. `offered_rate` (the rate asked) is in 001; NULL for
-- cells landed before this migration (their result JSON, cells.result_path, holds it).
ALTER TABLE cells ADD COLUMN realized_rate DOUBLE;   -- (n - 1) / (last - first scheduled send) after warm-up, req/s
