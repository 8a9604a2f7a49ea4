-- servebench warehouse, schema version 1.
-- Every fact row carries run_id; landing is idempotent per (run_id, cell_id).
-- Times: *_at columns are wall-clock timestamps (UTC); *_s columns in `requests` are
-- seconds on the load generator's monotonic clock, relative to the cell's t0.

CREATE TABLE builds (
    build_key        VARCHAR PRIMARY KEY,   -- content hash of what went into the engine venv
    engine           VARCHAR NOT NULL,      -- 'vllm'
    engine_version   VARCHAR,               -- what the engine reports, e.g. '0.32.0+cpu'
    packages         VARCHAR[] NOT NULL,    -- the pinned requirements asked for
    python_version   VARCHAR NOT NULL,
    platform         VARCHAR NOT NULL,
    venv_path        VARCHAR NOT NULL,
    pip_freeze       VARCHAR NOT NULL,
    build_seconds    DOUBLE,                -- NULL when the venv was already cached
    created_at       TIMESTAMPTZ NOT NULL
);

CREATE TABLE runs (
    run_id            VARCHAR PRIMARY KEY,
    campaign          VARCHAR NOT NULL,
    spec_hash         VARCHAR NOT NULL,
    spec_text         VARCHAR NOT NULL,     -- the YAML as given
    spec_normalized   JSON NOT NULL,        -- every default filled in; spec_hash is over this
    campaign_file     VARCHAR,
    started_at        TIMESTAMPTZ NOT NULL,
    ended_at          TIMESTAMPTZ,
    status            VARCHAR NOT NULL,     -- running | completed | partial | failed | interrupted
    error             VARCHAR,
    servebench_commit VARCHAR,
    host              VARCHAR NOT NULL,
    build_key         VARCHAR,
    model_path        VARCHAR,
    run_dir           VARCHAR NOT NULL
);

CREATE TABLE nodes (
    run_id        VARCHAR NOT NULL,
    node          VARCHAR NOT NULL,         -- the campaign's node name
    hostname      VARCHAR NOT NULL,
    address       VARCHAR NOT NULL,
    cpus          INTEGER[] NOT NULL,       -- CPUs this node may use
    cpu_model     VARCHAR,
    arch          VARCHAR,
    logical_cores INTEGER,
    physical_cores INTEGER,
    numa_nodes    INTEGER,
    mem_total_bytes BIGINT,
    kernel        VARCHAR,
    isa_flags     VARCHAR[],                -- SIMD/matrix features relevant to inference
    PRIMARY KEY (run_id, node)
);

CREATE TABLE servers (
    run_id        VARCHAR NOT NULL,
    mode          VARCHAR NOT NULL,
    pid           INTEGER,
    port          INTEGER,
    command       VARCHAR[] NOT NULL,
    env           JSON,                     -- the variables servebench set for the server
    log_path      VARCHAR,
    started_at    TIMESTAMPTZ,
    ready_seconds DOUBLE,                   -- launch to first 200 on /health
    stopped_at    TIMESTAMPTZ,
    status        VARCHAR NOT NULL,         -- ready | failed
    error         VARCHAR,
    correctness   VARCHAR,                  -- reference | passed | failed (greedy tokens vs the TP=1 reference)
    correctness_detail VARCHAR,
    PRIMARY KEY (run_id, mode)
);

CREATE TABLE cells (
    run_id        VARCHAR NOT NULL,
    cell_id       VARCHAR PRIMARY KEY,      -- run_id || '/' || cell_key: unique in the warehouse
    cell_key      VARCHAR NOT NULL,         -- stable across runs: mode.point.repeat
    mode          VARCHAR NOT NULL,
    tp            INTEGER NOT NULL,
    pp            INTEGER NOT NULL,
    executor      VARCHAR NOT NULL,
    load_kind     VARCHAR NOT NULL,         -- closed | open
    rate          DOUBLE,                   -- open loop: offered req/s
    clients       INTEGER,                  -- closed loop: concurrent clients
    "repeat"      INTEGER NOT NULL,
    input_len     INTEGER NOT NULL,
    output_len    INTEGER NOT NULL,
    seed          BIGINT NOT NULL,
    status        VARCHAR NOT NULL,         -- completed | failed | skipped
    error         VARCHAR,
    correctness   VARCHAR,                  -- the mode's server's gate result
    started_at    TIMESTAMPTZ,
    ended_at      TIMESTAMPTZ,
    t0_monotonic  DOUBLE,                   -- the generator's monotonic clock at the cell's t0
    t_end_monotonic DOUBLE,                 -- ... at the cell's last token (telemetry windows)
    duration_s    DOUBLE,                   -- first send to last completion
    completed     INTEGER,
    failed        INTEGER,
    offered_rate  DOUBLE,                   -- open loop: the nominal rate
    achieved_rate DOUBLE,                   -- sends per second actually made
    request_throughput DOUBLE,              -- completed req/s over the steady window
    output_throughput  DOUBLE,              -- output tokens/s over the steady window
    goodput       DOUBLE,                   -- req/s meeting the SLOs (NULL: no SLO given)
    ttft_p50_ms   DOUBLE,
    ttft_p99_ms   DOUBLE,
    tpot_p50_ms   DOUBLE,
    tpot_p99_ms   DOUBLE,
    itl_p50_ms    DOUBLE,
    itl_p99_ms    DOUBLE,
    e2el_p50_ms   DOUBLE,
    e2el_p99_ms   DOUBLE,
    schedule_lag_p99_ms DOUBLE,
    valid         BOOLEAN,                  -- the load generator's verdict on its own measurement
    invalid_reasons VARCHAR[],
    client_output_tokens BIGINT,            -- sum of usage.completion_tokens over the cell's requests
    server_output_tokens BIGINT,            -- delta of the server's generation-token counter (NULL: none)
    result_path   VARCHAR                   -- the load generator's JSON in the run directory
);

CREATE TABLE requests (
    run_id         VARCHAR NOT NULL,
    cell_id        VARCHAR NOT NULL,
    request_index  INTEGER NOT NULL,
    warmup         BOOLEAN NOT NULL,
    client         INTEGER,                 -- closed loop: which client sent it
    scheduled_s    DOUBLE,                  -- when the schedule said to send
    sent_s         DOUBLE,
    first_token_s  DOUBLE,                  -- first chunk carrying >= 1 token
    last_token_s   DOUBLE,
    input_tokens   INTEGER,                 -- from the server's usage
    output_tokens  INTEGER,                 -- from the server's usage
    chunks         INTEGER,                 -- JSON events received (every event's arrival: the cell's JSON)
    token_source   VARCHAR,                 -- usage (server's running count) | chunks (fallback)
    http_status    INTEGER,
    error_kind     VARCHAR,
    error          VARCHAR,
    PRIMARY KEY (cell_id, request_index)
);
