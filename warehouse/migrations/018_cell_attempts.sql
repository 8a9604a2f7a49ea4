-- An invalid cell is measured again right away, on the same server (`validity.retries`).
-- Every attempt of a cell lands here with its verdict and main figures; `cells` holds the last
-- attempt (the one the run's verdict is taken from), so every view over `cells` stays one row a cell.

CREATE TABLE IF NOT EXISTS cell_attempts (
    run_id          VARCHAR NOT NULL,
    cell_key        VARCHAR NOT NULL,
    attempt         INTEGER NOT NULL,      -- 0: the first measurement
    superseded      BOOLEAN NOT NULL,      -- measured again after it: not the cell's figures
    valid           BOOLEAN,
    invalid_reasons VARCHAR[],
    completed       INTEGER,
    failed          INTEGER,
    output_throughput DOUBLE,
    ttft_p50_ms     DOUBLE,
    tpot_p50_ms     DOUBLE,
    schedule_lag_p99_ms DOUBLE,
    client_cpu_fraction DOUBLE,
    result_path     VARCHAR,               -- the attempt's complete result (superseded: <key>.attempt<N>.json)
    PRIMARY KEY (run_id, cell_key, attempt)
);

ALTER TABLE cells ADD COLUMN attempts INTEGER;   -- measurements the cell took (1: no retry; NULL: landed before this migration)
