-- The tuner measures the default configuration first and again after every other one
-- (`<default>-again`): the first server may pay what later ones find ready (compiled graphs
-- cached on disk, a warm page cache), and a machine drifts. The ratio is against the higher.

ALTER TABLE tuning ADD COLUMN default_first DOUBLE;   -- the default's capacity, measured first
ALTER TABLE tuning ADD COLUMN default_again DOUBLE;   -- ... and again, last
ALTER TABLE tuning ADD COLUMN drift DOUBLE;           -- default_again / default_first - 1
