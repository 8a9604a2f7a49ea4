-- One rate column per meaning on `cells`: offered_rate (the rate asked: the load point its cell key names,
-- rate8 = 8 req/s), realized_rate (the rate of the schedule as drawn) and request_throughput (the requests
-- completed per second: the rate achieved). `rate` held the offered rate a second time, as the campaign gives
-- it, and was the only one of the two set on a cell without a measurement (failed, skipped): its value moves
-- to offered_rate where that is NULL before it goes. `achieved_rate` (sends per second) parts from
-- realized_rate only where the generator fell behind its schedule, which the cell's verdict says (valid,
-- invalid_reasons: the achieved rate's own reason quotes it); the result JSON (cells.result_path) keeps it.
-- Views are made again after the migrations (warehouse/views/), so none still reads the columns dropped.

UPDATE cells SET offered_rate = rate WHERE offered_rate IS NULL AND rate IS NOT NULL;

ALTER TABLE cells DROP COLUMN rate;
ALTER TABLE cells DROP COLUMN achieved_rate;

COMMENT ON COLUMN cells.offered_rate IS 'open loop: the rate offered, the load point''s rate as its cell key names it (rate8 = 8 req/s) and the load generator was asked for (a trace replayed at its own rate: its mean rate); set on a cell without a measurement too; NULL: closed loop [req/s]';
COMMENT ON COLUMN cells.realized_rate IS 'open loop: the rate of the schedule as drawn, (n - 1) / (last - first scheduled send) after warm-up (a few Poisson arrivals realize a rate of their own); validity is judged against it; NULL before migration 024 [req/s]';
COMMENT ON COLUMN cells.request_throughput IS 'the rate achieved: completed requests per second over the steady window [req/s]';
