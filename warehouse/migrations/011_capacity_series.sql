-- Capacity as a nightly series. Each capacity gets a series id (campaign, mode and
-- knobs, what was searched, the SLO, the workload's lengths, the hardware fingerprint) and its
-- value joins the metrics the regression detector follows, as metric 'capacity'
-- (warehouse/views/cell_metrics.sql).

ALTER TABLE capacity ADD COLUMN series_id VARCHAR;
