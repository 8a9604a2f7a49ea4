-- Capacity under an SLO. Whether each cell met the campaign's SLO (every limit held and
-- the cell was valid; NULL: the campaign has no SLO), whether it was a capacity search's probe
-- (not one of the campaign's load points), and each mode's capacity as the search found it.

ALTER TABLE cells ADD COLUMN slo_met BOOLEAN;
ALTER TABLE cells ADD COLUMN search_probe BOOLEAN DEFAULT false;

CREATE TABLE capacity (
    run_id      VARCHAR NOT NULL,
    mode        VARCHAR NOT NULL,
    search_over VARCHAR NOT NULL,      -- rate (req/s) | clients
    slo         JSON NOT NULL,         -- {"ttft_p99_ms": 500, ...}
    capacity    DOUBLE,                -- the highest point that met the SLO (NULL: none did)
    upper       DOUBLE,                -- the lowest point that missed it (NULL: none did)
    probes      INTEGER NOT NULL,
    converged   BOOLEAN NOT NULL,      -- the bracket narrowed to the precision asked
    why         VARCHAR,
    probe_cells JSON,                  -- [cell keys, in probe order]: join to cells
    PRIMARY KEY (run_id, mode)
);
