-- What a cell's warm-up until steady took (servebench/load/steady.py). NULL: the
-- cell had no such warm-up (a fixed `warmup` count, or none).
ALTER TABLE cells ADD COLUMN warmup_steady BOOLEAN;
ALTER TABLE cells ADD COLUMN warmup_s DOUBLE;
ALTER TABLE cells ADD COLUMN warmup_phase_requests INTEGER;
ALTER TABLE cells ADD COLUMN warmup_why VARCHAR;
