-- servebench warehouse, schema version 36: the tables as migrations 001 to 036 leave them.
-- A new warehouse is made from this file (servebench.warehouse.connect records every migration up to 036
-- as applied); an older one is brought here by the migrations themselves (warehouse/migrations/). The views are
-- not here: warehouse/views/, made again on every writable open. Written by `python -m servebench.warehouse.baseline`
-- from a warehouse the migrations made (tests/unit/test_schema_baseline.py checks that the two agree): a change is a
-- new migration, then this file written again.

-- One row per campaign run: the spec as given and normalized, status, commit, host
CREATE TABLE runs (
    run_id               VARCHAR PRIMARY KEY,   -- the run's id
    campaign             VARCHAR NOT NULL,      -- the campaign's name
    spec_hash            VARCHAR NOT NULL,      -- hash of spec_normalized
    spec_text            VARCHAR NOT NULL,      -- the campaign YAML as given
    spec_normalized      JSON NOT NULL,         -- the campaign with every default filled in
    campaign_file        VARCHAR,               -- the campaign file's path
    started_at           TIMESTAMPTZ NOT NULL,  -- when the run started
    ended_at             TIMESTAMPTZ,           -- when it ended
    status               VARCHAR NOT NULL,      -- running | completed | partial | invalid | failed | interrupted
    error                VARCHAR,               -- why the run failed
    servebench_commit    VARCHAR,               -- servebench's git commit
    host                 VARCHAR NOT NULL,      -- the orchestrator's host
    build_key            VARCHAR,               -- the run's build (the first engine's)
    model_path           VARCHAR,               -- the model served
    run_dir              VARCHAR NOT NULL,      -- the run's directory (results, logs, report)
    hardware_fingerprint VARCHAR,               -- hash of the nodes' CPU model, cores, memory, NUMA
    provider_kind        VARCHAR,               -- local | ssh | slurm | ...
    allocation           JSON,                  -- what the provider allocated (slurm: job id, node list)
    resumes              JSON                   -- each resume of the run, in order: {at, kind, status_before, landed_from_run_dir, measured, reclaimed}
);
COMMENT ON TABLE runs IS 'One row per campaign run: the spec as given and normalized, status, commit, host';
COMMENT ON COLUMN runs.run_id IS 'the run''s id';
COMMENT ON COLUMN runs.campaign IS 'the campaign''s name';
COMMENT ON COLUMN runs.spec_hash IS 'hash of spec_normalized';
COMMENT ON COLUMN runs.spec_text IS 'the campaign YAML as given';
COMMENT ON COLUMN runs.spec_normalized IS 'the campaign with every default filled in';
COMMENT ON COLUMN runs.campaign_file IS 'the campaign file''s path';
COMMENT ON COLUMN runs.started_at IS 'when the run started';
COMMENT ON COLUMN runs.ended_at IS 'when it ended';
COMMENT ON COLUMN runs.status IS 'running | completed | partial | invalid | failed | interrupted';
COMMENT ON COLUMN runs.error IS 'why the run failed';
COMMENT ON COLUMN runs.servebench_commit IS 'servebench''s git commit';
COMMENT ON COLUMN runs.host IS 'the orchestrator''s host';
COMMENT ON COLUMN runs.build_key IS 'the run''s build (the first engine''s)';
COMMENT ON COLUMN runs.model_path IS 'the model served';
COMMENT ON COLUMN runs.run_dir IS 'the run''s directory (results, logs, report)';
COMMENT ON COLUMN runs.hardware_fingerprint IS 'hash of the nodes'' CPU model, cores, memory, NUMA';
COMMENT ON COLUMN runs.provider_kind IS 'local | ssh | slurm | ...';
COMMENT ON COLUMN runs.allocation IS 'what the provider allocated (slurm: job id, node list)';
COMMENT ON COLUMN runs.resumes IS 'each resume of the run, in order: {at, kind, status_before, landed_from_run_dir, measured, reclaimed}';

-- One row per node of a run: its hardware, kernel and what was placed there
CREATE TABLE nodes (
    run_id                  VARCHAR NOT NULL,          -- the run
    node                    VARCHAR NOT NULL,          -- the campaign's node name
    hostname                VARCHAR NOT NULL,          -- the host's name
    address                 VARCHAR NOT NULL,          -- the address servebench reached it at
    cpus                    INTEGER[] NOT NULL,        -- the CPUs this node may use
    cpu_model               VARCHAR,                   -- the CPU model name
    arch                    VARCHAR,                   -- the machine architecture (x86_64, aarch64)
    logical_cores           INTEGER,                   -- logical cores of the host
    physical_cores          INTEGER,                   -- physical cores of the host
    numa_nodes              INTEGER,                   -- NUMA nodes of the host
    mem_total_bytes         BIGINT,                    -- total memory of the host [bytes]
    kernel                  VARCHAR,                   -- the kernel release
    isa_flags               VARCHAR[],                 -- SIMD/matrix features relevant to inference
    clock_offset_s          DOUBLE,                    -- node wall clock minus the orchestrator's; NULL: the same host [s]
    placements              JSON,                      -- how the build, model, node tools and interpreter got there: [{what, path, how, digest, seconds, note, bytes (what a copy sent)}]
    role                    VARCHAR DEFAULT 'server',  -- server | client (the load generator's own node)
    mem_bandwidth_gbps      DOUBLE,                    -- memory bandwidth: a streaming read of a 256 MiB buffer on roofline_cpus, best of a few (docs/roofline.md) [GB/s]
    matmul_peak_gflops_bf16 DOUBLE,                    -- peak bf16 matrix multiply: a 2048x2048 matmul on roofline_cpus, 2 n^3 per product; NULL: not measured (no torch) [GFLOP/s]
    matmul_peak_gflops_fp32 DOUBLE,                    -- peak fp32 matrix multiply: a 2048x2048 matmul on roofline_cpus; NULL: not measured (neither torch nor numpy) [GFLOP/s]
    roofline_cpus           INTEGER[],                 -- the CPUs the roofline was measured on (the node's servers' CPUs), one thread each
    roofline_emulated       BOOLEAN,                   -- the roofline was measured under qemu-user emulation: recorded, not judged
    roofline_method         VARCHAR,                   -- how the roofline was measured: the library (torch, numpy, python), the bandwidth kernel, what was not measured
    interpreter             VARCHAR,                   -- the Python the node ran the engine build with, and why: placed (the build's own CPython copied by digest), node (its own python3.X), shared, or the node's file system has the build's (docs/arm-partition.md)
    roofline_measured_at    TIMESTAMPTZ,               -- when the node's roofline figures were measured (for cached figures: when they were measured then)
    roofline_cached         BOOLEAN,                   -- whether the roofline figures came from the cache of an earlier run rather than measured in this one
    roofline_busy           DOUBLE,                    -- how busy other processes kept the roofline's cores just before it was measured (above roofline.max_busy it is measured again on the next run) [0-1]
    roofline_load_avg       DOUBLE,                    -- the node's 1-minute load average when its roofline was measured
    host_key                VARCHAR,                   -- SSH nodes: the host key fingerprints (type and SHA256) known_hosts holds for the host, which its connection was checked against; NULL for nodes reached otherwise
    PRIMARY KEY (run_id, node)
);
COMMENT ON TABLE nodes IS 'One row per node of a run: its hardware, kernel and what was placed there';
COMMENT ON COLUMN nodes.run_id IS 'the run';
COMMENT ON COLUMN nodes.node IS 'the campaign''s node name';
COMMENT ON COLUMN nodes.hostname IS 'the host''s name';
COMMENT ON COLUMN nodes.address IS 'the address servebench reached it at';
COMMENT ON COLUMN nodes.cpus IS 'the CPUs this node may use';
COMMENT ON COLUMN nodes.cpu_model IS 'the CPU model name';
COMMENT ON COLUMN nodes.arch IS 'the machine architecture (x86_64, aarch64)';
COMMENT ON COLUMN nodes.logical_cores IS 'logical cores of the host';
COMMENT ON COLUMN nodes.physical_cores IS 'physical cores of the host';
COMMENT ON COLUMN nodes.numa_nodes IS 'NUMA nodes of the host';
COMMENT ON COLUMN nodes.mem_total_bytes IS 'total memory of the host [bytes]';
COMMENT ON COLUMN nodes.kernel IS 'the kernel release';
COMMENT ON COLUMN nodes.isa_flags IS 'SIMD/matrix features relevant to inference';
COMMENT ON COLUMN nodes.clock_offset_s IS 'node wall clock minus the orchestrator''s; NULL: the same host [s]';
COMMENT ON COLUMN nodes.placements IS 'how the build, model, node tools and interpreter got there: [{what, path, how, digest, seconds, note, bytes (what a copy sent)}]';
COMMENT ON COLUMN nodes.role IS 'server | client (the load generator''s own node)';
COMMENT ON COLUMN nodes.mem_bandwidth_gbps IS 'memory bandwidth: a streaming read of a 256 MiB buffer on roofline_cpus, best of a few (docs/roofline.md) [GB/s]';
COMMENT ON COLUMN nodes.matmul_peak_gflops_bf16 IS 'peak bf16 matrix multiply: a 2048x2048 matmul on roofline_cpus, 2 n^3 per product; NULL: not measured (no torch) [GFLOP/s]';
COMMENT ON COLUMN nodes.matmul_peak_gflops_fp32 IS 'peak fp32 matrix multiply: a 2048x2048 matmul on roofline_cpus; NULL: not measured (neither torch nor numpy) [GFLOP/s]';
COMMENT ON COLUMN nodes.roofline_cpus IS 'the CPUs the roofline was measured on (the node''s servers'' CPUs), one thread each';
COMMENT ON COLUMN nodes.roofline_emulated IS 'the roofline was measured under qemu-user emulation: recorded, not judged';
COMMENT ON COLUMN nodes.roofline_method IS 'how the roofline was measured: the library (torch, numpy, python), the bandwidth kernel, what was not measured';
COMMENT ON COLUMN nodes.interpreter IS 'the Python the node ran the engine build with, and why: placed (the build''s own CPython copied by digest), node (its own python3.X), shared, or the node''s file system has the build''s (docs/arm-partition.md)';
COMMENT ON COLUMN nodes.roofline_measured_at IS 'when the node''s roofline figures were measured (for cached figures: when they were measured then)';
COMMENT ON COLUMN nodes.roofline_cached IS 'whether the roofline figures came from the cache of an earlier run rather than measured in this one';
COMMENT ON COLUMN nodes.roofline_busy IS 'how busy other processes kept the roofline''s cores just before it was measured (above roofline.max_busy it is measured again on the next run) [0-1]';
COMMENT ON COLUMN nodes.roofline_load_avg IS 'the node''s 1-minute load average when its roofline was measured';
COMMENT ON COLUMN nodes.host_key IS 'SSH nodes: the host key fingerprints (type and SHA256) known_hosts holds for the host, which its connection was checked against; NULL for nodes reached otherwise';

-- One engine build (a venv or a CMake tree), content-addressed: what went in and what it says it is
CREATE TABLE builds (
    build_key       VARCHAR PRIMARY KEY,   -- content hash of what went into the build
    engine          VARCHAR NOT NULL,      -- engine kind: vllm | llamacpp | ...
    engine_version  VARCHAR,               -- what the engine reports, e.g. 0.32.0+cpu
    packages        VARCHAR[] NOT NULL,    -- the pinned requirements asked for
    python_version  VARCHAR NOT NULL,      -- the build's Python
    platform        VARCHAR NOT NULL,      -- the platform it was built on
    venv_path       VARCHAR NOT NULL,      -- where the build lives (a venv, or a CMake build's binaries)
    pip_freeze      VARCHAR NOT NULL,      -- pip freeze of the venv
    build_seconds   DOUBLE,                -- time the build took; NULL: it was already cached [s]
    created_at      TIMESTAMPTZ NOT NULL,  -- when the build was made
    inputs          JSON,                  -- the build key's parts: packages, pip options, CMake flags, CPU flags
    tool_version    VARCHAR,               -- the built tool's version line (llama.cpp: its commit and compiler)
    target          VARCHAR,               -- target CPU profile (graviton2, x86-64-v3, ...); NULL: the host's
    arch            VARCHAR,               -- what the binaries run on (aarch64, x86_64)
    compiler        VARCHAR,               -- the compiler, e.g. aarch64-linux-gnu-g++ GNU 12.2.0
    compiler_flags  VARCHAR[],             -- the target's compiler flags
    source_digest   VARCHAR,               -- sha256 of the source (the sdist)
    artifact_sha256 VARCHAR                -- sha256 over the artifact's files and their sha256
);
COMMENT ON TABLE builds IS 'One engine build (a venv or a CMake tree), content-addressed: what went in and what it says it is';
COMMENT ON COLUMN builds.build_key IS 'content hash of what went into the build';
COMMENT ON COLUMN builds.engine IS 'engine kind: vllm | llamacpp | ...';
COMMENT ON COLUMN builds.engine_version IS 'what the engine reports, e.g. 0.32.0+cpu';
COMMENT ON COLUMN builds.packages IS 'the pinned requirements asked for';
COMMENT ON COLUMN builds.python_version IS 'the build''s Python';
COMMENT ON COLUMN builds.platform IS 'the platform it was built on';
COMMENT ON COLUMN builds.venv_path IS 'where the build lives (a venv, or a CMake build''s binaries)';
COMMENT ON COLUMN builds.pip_freeze IS 'pip freeze of the venv';
COMMENT ON COLUMN builds.build_seconds IS 'time the build took; NULL: it was already cached [s]';
COMMENT ON COLUMN builds.created_at IS 'when the build was made';
COMMENT ON COLUMN builds.inputs IS 'the build key''s parts: packages, pip options, CMake flags, CPU flags';
COMMENT ON COLUMN builds.tool_version IS 'the built tool''s version line (llama.cpp: its commit and compiler)';
COMMENT ON COLUMN builds.target IS 'target CPU profile (graviton2, x86-64-v3, ...); NULL: the host''s';
COMMENT ON COLUMN builds.arch IS 'what the binaries run on (aarch64, x86_64)';
COMMENT ON COLUMN builds.compiler IS 'the compiler, e.g. aarch64-linux-gnu-g++ GNU 12.2.0';
COMMENT ON COLUMN builds.compiler_flags IS 'the target''s compiler flags';
COMMENT ON COLUMN builds.source_digest IS 'sha256 of the source (the sdist)';
COMMENT ON COLUMN builds.artifact_sha256 IS 'sha256 over the artifact''s files and their sha256';

-- One engine server per mode of a run: command, readiness, correctness gate, KV capacity
CREATE TABLE servers (
    run_id                  VARCHAR NOT NULL,    -- the run
    mode                    VARCHAR NOT NULL,    -- the mode it served
    pid                     INTEGER,             -- the server's process id
    port                    INTEGER,             -- its port
    command                 VARCHAR[] NOT NULL,  -- its command line
    env                     JSON,                -- the environment variables servebench set for it
    log_path                VARCHAR,             -- its log file
    started_at              TIMESTAMPTZ,         -- when it was launched
    ready_seconds           DOUBLE,              -- launch to the first 200 on /health [s]
    stopped_at              TIMESTAMPTZ,         -- when it was stopped
    status                  VARCHAR NOT NULL,    -- ready | failed
    error                   VARCHAR,             -- why it failed
    correctness             VARCHAR,             -- reference | passed | failed (greedy tokens against the TP=1 reference)
    correctness_detail      VARCHAR,             -- the gate's result in words
    kv_capacity_tokens      BIGINT,              -- KV-cache capacity the engine reported at start-up [tokens]
    correctness_divergences JSON,                -- where greedy answers first part from the reference, per prompt
    engine                  VARCHAR,             -- engine kind (vllm, llamacpp, ...)
    build_key               VARCHAR,             -- the build this mode's server ran
    served_dtype            VARCHAR,             -- what the model's matrices are stored in as served (bfloat16, float32, q4_0): the peak the prefill is judged against
    rank_weight_bytes       BIGINT,              -- the weights the mode's largest rank holds, from the model's shape (memory.py) [bytes]
    rank_kv_bytes_per_token BIGINT,              -- one token's KV cache in the largest rank (its layers, its share of the KV heads) [bytes]
    rank_parameters         BIGINT,              -- the parameters the mode's largest rank holds (a prompt token costs 2 FLOPs each)
    ranks_per_node          INTEGER,             -- the most ranks holding layers that share one node (they share its bandwidth and peak)
    tp                      INTEGER,             -- tensor-parallel size of the mode served
    pp                      INTEGER,             -- pipeline-parallel size of the mode served
    dp                      INTEGER,             -- data-parallel size of the mode served: its engines, each of tp x pp workers (1: none)
    ep                      BOOLEAN,             -- expert parallel: the routed experts split over the dp x tp ranks
    replicas                INTEGER,             -- independent servers of the mode served, behind its balancer (1: one server); the row's pid, command and log are replica r0's
    balancer                VARCHAR,             -- the balancer's policy in front of the replicas (nginx): least-connections (least_conn) or round-robin; NULL for one server
    PRIMARY KEY (run_id, mode)
);
COMMENT ON TABLE servers IS 'One engine server per mode of a run: command, readiness, correctness gate, KV capacity';
COMMENT ON COLUMN servers.run_id IS 'the run';
COMMENT ON COLUMN servers.mode IS 'the mode it served';
COMMENT ON COLUMN servers.pid IS 'the server''s process id';
COMMENT ON COLUMN servers.port IS 'its port';
COMMENT ON COLUMN servers.command IS 'its command line';
COMMENT ON COLUMN servers.env IS 'the environment variables servebench set for it';
COMMENT ON COLUMN servers.log_path IS 'its log file';
COMMENT ON COLUMN servers.started_at IS 'when it was launched';
COMMENT ON COLUMN servers.ready_seconds IS 'launch to the first 200 on /health [s]';
COMMENT ON COLUMN servers.stopped_at IS 'when it was stopped';
COMMENT ON COLUMN servers.status IS 'ready | failed';
COMMENT ON COLUMN servers.error IS 'why it failed';
COMMENT ON COLUMN servers.correctness IS 'reference | passed | failed (greedy tokens against the TP=1 reference)';
COMMENT ON COLUMN servers.correctness_detail IS 'the gate''s result in words';
COMMENT ON COLUMN servers.kv_capacity_tokens IS 'KV-cache capacity the engine reported at start-up [tokens]';
COMMENT ON COLUMN servers.correctness_divergences IS 'where greedy answers first part from the reference, per prompt';
COMMENT ON COLUMN servers.engine IS 'engine kind (vllm, llamacpp, ...)';
COMMENT ON COLUMN servers.build_key IS 'the build this mode''s server ran';
COMMENT ON COLUMN servers.served_dtype IS 'what the model''s matrices are stored in as served (bfloat16, float32, q4_0): the peak the prefill is judged against';
COMMENT ON COLUMN servers.rank_weight_bytes IS 'the weights the mode''s largest rank holds, from the model''s shape (memory.py) [bytes]';
COMMENT ON COLUMN servers.rank_kv_bytes_per_token IS 'one token''s KV cache in the largest rank (its layers, its share of the KV heads) [bytes]';
COMMENT ON COLUMN servers.rank_parameters IS 'the parameters the mode''s largest rank holds (a prompt token costs 2 FLOPs each)';
COMMENT ON COLUMN servers.ranks_per_node IS 'the most ranks holding layers that share one node (they share its bandwidth and peak)';
COMMENT ON COLUMN servers.tp IS 'tensor-parallel size of the mode served';
COMMENT ON COLUMN servers.pp IS 'pipeline-parallel size of the mode served';
COMMENT ON COLUMN servers.dp IS 'data-parallel size of the mode served: its engines, each of tp x pp workers (1: none)';
COMMENT ON COLUMN servers.ep IS 'expert parallel: the routed experts split over the dp x tp ranks';
COMMENT ON COLUMN servers.replicas IS 'independent servers of the mode served, behind its balancer (1: one server); the row''s pid, command and log are replica r0''s';
COMMENT ON COLUMN servers.balancer IS 'the balancer''s policy in front of the replicas (nginx): least-connections (least_conn) or round-robin; NULL for one server';

-- One row per cell of a run (mode x load point x repeat): the load generator's summary and verdict
CREATE TABLE cells (
    run_id                VARCHAR NOT NULL,       -- the run
    cell_id               VARCHAR PRIMARY KEY,    -- run_id/cell_key: unique in the warehouse
    cell_key              VARCHAR NOT NULL,       -- stable across runs: mode.point.repeat (the point: c4 = 4 clients, rate8 = 8 req/s offered)
    mode                  VARCHAR NOT NULL,       -- the mode (server configuration)
    tp                    INTEGER NOT NULL,       -- tensor-parallel size
    pp                    INTEGER NOT NULL,       -- pipeline-parallel size
    executor              VARCHAR NOT NULL,       -- the engine's distributed executor (mp, ray, ...)
    load_kind             VARCHAR NOT NULL,       -- closed (N clients) | open (scheduled arrivals)
    clients               INTEGER,                -- closed loop: concurrent clients
    repeat                INTEGER NOT NULL,       -- which repeat of the load point (0 first)
    input_len             INTEGER NOT NULL,       -- prompt length asked [tokens]
    output_len            INTEGER NOT NULL,       -- answer length asked [tokens]
    seed                  BIGINT NOT NULL,        -- the cell's seed (schedule and prompts)
    status                VARCHAR NOT NULL,       -- completed | failed | skipped
    error                 VARCHAR,                -- why the cell failed
    correctness           VARCHAR,                -- the mode's server's correctness gate result
    started_at            TIMESTAMPTZ,            -- when the cell's load started
    ended_at              TIMESTAMPTZ,            -- when it ended
    t0_monotonic          DOUBLE,                 -- the generator's monotonic clock at the cell's t0; requests' *_s are relative to it [monotonic s]
    t_end_monotonic       DOUBLE,                 -- the generator's monotonic clock at the cell's last token (telemetry windows) [monotonic s]
    duration_s            DOUBLE,                 -- steady window: first send to last token, warm-up excluded [s]
    completed             INTEGER,                -- requests completed after warm-up
    failed                INTEGER,                -- requests failed after warm-up
    offered_rate          DOUBLE,                 -- open loop: the rate offered, the load point's rate as its cell key names it (rate8 = 8 req/s) and the load generator was asked for (a trace replayed at its own rate: its mean rate); set on a cell without a measurement too; NULL: closed loop [req/s]
    request_throughput    DOUBLE,                 -- the rate achieved: completed requests per second over the steady window [req/s]
    output_throughput     DOUBLE,                 -- output tokens per second over the steady window [tok/s]
    goodput               DOUBLE,                 -- requests per second meeting every SLO (NULL: no SLO given) [req/s]
    ttft_p50_ms           DOUBLE,                 -- time to first token (first token event - send), median of the requests after warm-up [ms]
    ttft_p99_ms           DOUBLE,                 -- time to first token, p99 (linear interpolation) of the requests after warm-up [ms]
    tpot_p50_ms           DOUBLE,                 -- time per output token, (last token - first token) / (output tokens - 1), median [ms]
    tpot_p99_ms           DOUBLE,                 -- time per output token, p99 [ms]
    itl_p50_ms            DOUBLE,                 -- inter-token latency (every gap between token events), median [ms]
    itl_p99_ms            DOUBLE,                 -- inter-token latency, p99 [ms]
    e2el_p50_ms           DOUBLE,                 -- end-to-end latency (last token - send), median [ms]
    e2el_p99_ms           DOUBLE,                 -- end-to-end latency, p99 [ms]
    schedule_lag_p99_ms   DOUBLE,                 -- how late the generator sent against its schedule, p99 [ms]
    valid                 BOOLEAN,                -- the load generator's verdict on its own measurement
    invalid_reasons       VARCHAR[],              -- why it is invalid
    client_output_tokens  BIGINT,                 -- sum of the server's usage.completion_tokens over the cell's requests [tokens]
    server_output_tokens  BIGINT,                 -- change of the server's generation-token counter over the cell (NULL: none) [tokens]
    result_path           VARCHAR,                -- the load generator's result JSON in the run directory
    series_id             VARCHAR,                -- the cell's identity on this hardware (its nightly series)
    client_cpus           VARCHAR,                -- the CPUs the load generator was pinned to
    client_nice           INTEGER,                -- the load generator's nice value (negative: raised priority)
    client_cpu_fraction   DOUBLE,                 -- the load generator's CPU time over wall time (1.0 = one core) [0-1]
    link                  VARCHAR,                -- the network setting: plain | d5ms | r100mbit | d1ms-r100mbit
    link_delay_ms         DOUBLE,                 -- added one-way delay on each chosen host's link [ms]
    link_rate_mbit        DOUBLE,                 -- rate cap on each direction; NULL: no cap [Mbit/s]
    client_node           VARCHAR,                -- the node the load generator ran on; NULL: the orchestrator's host
    slo_met               BOOLEAN,                -- every SLO held and the cell was valid; NULL: the campaign has no SLO
    search_probe          BOOLEAN DEFAULT false,  -- a capacity search's probe, not one of the campaign's load points
    knobs                 JSON,                   -- the mode's engine knobs, e.g. {"max_num_seqs": 8}
    kv_failures           INTEGER,                -- KV-full log lines during the cell (llama.cpp's failed batches)
    ttft_text_p50_ms      DOUBLE,                 -- time to the first visible text (first event with text - send), median [ms]
    ttft_text_p99_ms      DOUBLE,                 -- time to the first visible text, p99 [ms]
    workload              JSON,                   -- the campaign's load.workload block; NULL: fixed input_len/output_len
    workload_name         VARCHAR,                -- the workload's name as in the cell key (prefix, trace, a block's name)
    prefix_cache_hit_rate DOUBLE,                 -- the server's prefix-cache hits over queries (prompt tokens) during the cell [0-1]
    attempts              INTEGER,                -- measurements the cell took (1: no retry; NULL: landed before retries existed)
    warmup_steady         BOOLEAN,                -- the warm-up until steady reached steady state; NULL: a fixed warm-up count, or none
    warmup_s              DOUBLE,                 -- how long the warm-up until steady took [s]
    warmup_phase_requests INTEGER,                -- requests the warm-up until steady sent (not in requests)
    warmup_why            VARCHAR,                -- how the warm-up until steady ended
    realized_rate         DOUBLE,                 -- open loop: the rate of the schedule as drawn, (n - 1) / (last - first scheduled send) after warm-up (a few Poisson arrivals realize a rate of their own); validity is judged against it; NULL before migration 024 [req/s]
    dp                    INTEGER,                -- data-parallel size: engines of tp x pp workers behind the mode's one API server (1: none)
    ep                    BOOLEAN,                -- expert parallel: the MoE layers' routed experts split over the dp x tp ranks (vLLM's --enable-expert-parallel)
    replicas              INTEGER,                -- independent servers of the mode (each of dp x tp x pp workers, on nodes of its own) behind one balancer endpoint (1: one server, no balancer)
    foreign_cpu_share     DOUBLE,                 -- the largest share of a server node's cores' time that processes neither the server's nor servebench's took over the cell's window (above validity.max_foreign_cpu the cell is invalid); NULL: no samples of the window on the orchestrator's host [0-1]
    server_cpu_share      DOUBLE,                 -- the share of that node's cores' time the server's processes got over the cell's window [0-1]
    node_cpu              JSON,                   -- per server node: its cores, the window's seconds, the server's, servebench's and foreign shares of the cores' time and the busiest foreign process (JSON list)
    hang_watch_error      VARCHAR                 -- why the hang watch asked for broke during the cell (the cell was not checked for hangs and is invalid); NULL: it judged, or none was asked for
);
COMMENT ON TABLE cells IS 'One row per cell of a run (mode x load point x repeat): the load generator''s summary and verdict';
COMMENT ON COLUMN cells.run_id IS 'the run';
COMMENT ON COLUMN cells.cell_id IS 'run_id/cell_key: unique in the warehouse';
COMMENT ON COLUMN cells.cell_key IS 'stable across runs: mode.point.repeat (the point: c4 = 4 clients, rate8 = 8 req/s offered)';
COMMENT ON COLUMN cells.mode IS 'the mode (server configuration)';
COMMENT ON COLUMN cells.tp IS 'tensor-parallel size';
COMMENT ON COLUMN cells.pp IS 'pipeline-parallel size';
COMMENT ON COLUMN cells.executor IS 'the engine''s distributed executor (mp, ray, ...)';
COMMENT ON COLUMN cells.load_kind IS 'closed (N clients) | open (scheduled arrivals)';
COMMENT ON COLUMN cells.clients IS 'closed loop: concurrent clients';
COMMENT ON COLUMN cells.repeat IS 'which repeat of the load point (0 first)';
COMMENT ON COLUMN cells.input_len IS 'prompt length asked [tokens]';
COMMENT ON COLUMN cells.output_len IS 'answer length asked [tokens]';
COMMENT ON COLUMN cells.seed IS 'the cell''s seed (schedule and prompts)';
COMMENT ON COLUMN cells.status IS 'completed | failed | skipped';
COMMENT ON COLUMN cells.error IS 'why the cell failed';
COMMENT ON COLUMN cells.correctness IS 'the mode''s server''s correctness gate result';
COMMENT ON COLUMN cells.started_at IS 'when the cell''s load started';
COMMENT ON COLUMN cells.ended_at IS 'when it ended';
COMMENT ON COLUMN cells.t0_monotonic IS 'the generator''s monotonic clock at the cell''s t0; requests'' *_s are relative to it [monotonic s]';
COMMENT ON COLUMN cells.t_end_monotonic IS 'the generator''s monotonic clock at the cell''s last token (telemetry windows) [monotonic s]';
COMMENT ON COLUMN cells.duration_s IS 'steady window: first send to last token, warm-up excluded [s]';
COMMENT ON COLUMN cells.completed IS 'requests completed after warm-up';
COMMENT ON COLUMN cells.failed IS 'requests failed after warm-up';
COMMENT ON COLUMN cells.offered_rate IS 'open loop: the rate offered, the load point''s rate as its cell key names it (rate8 = 8 req/s) and the load generator was asked for (a trace replayed at its own rate: its mean rate); set on a cell without a measurement too; NULL: closed loop [req/s]';
COMMENT ON COLUMN cells.request_throughput IS 'the rate achieved: completed requests per second over the steady window [req/s]';
COMMENT ON COLUMN cells.output_throughput IS 'output tokens per second over the steady window [tok/s]';
COMMENT ON COLUMN cells.goodput IS 'requests per second meeting every SLO (NULL: no SLO given) [req/s]';
COMMENT ON COLUMN cells.ttft_p50_ms IS 'time to first token (first token event - send), median of the requests after warm-up [ms]';
COMMENT ON COLUMN cells.ttft_p99_ms IS 'time to first token, p99 (linear interpolation) of the requests after warm-up [ms]';
COMMENT ON COLUMN cells.tpot_p50_ms IS 'time per output token, (last token - first token) / (output tokens - 1), median [ms]';
COMMENT ON COLUMN cells.tpot_p99_ms IS 'time per output token, p99 [ms]';
COMMENT ON COLUMN cells.itl_p50_ms IS 'inter-token latency (every gap between token events), median [ms]';
COMMENT ON COLUMN cells.itl_p99_ms IS 'inter-token latency, p99 [ms]';
COMMENT ON COLUMN cells.e2el_p50_ms IS 'end-to-end latency (last token - send), median [ms]';
COMMENT ON COLUMN cells.e2el_p99_ms IS 'end-to-end latency, p99 [ms]';
COMMENT ON COLUMN cells.schedule_lag_p99_ms IS 'how late the generator sent against its schedule, p99 [ms]';
COMMENT ON COLUMN cells.valid IS 'the load generator''s verdict on its own measurement';
COMMENT ON COLUMN cells.invalid_reasons IS 'why it is invalid';
COMMENT ON COLUMN cells.client_output_tokens IS 'sum of the server''s usage.completion_tokens over the cell''s requests [tokens]';
COMMENT ON COLUMN cells.server_output_tokens IS 'change of the server''s generation-token counter over the cell (NULL: none) [tokens]';
COMMENT ON COLUMN cells.result_path IS 'the load generator''s result JSON in the run directory';
COMMENT ON COLUMN cells.series_id IS 'the cell''s identity on this hardware (its nightly series)';
COMMENT ON COLUMN cells.client_cpus IS 'the CPUs the load generator was pinned to';
COMMENT ON COLUMN cells.client_nice IS 'the load generator''s nice value (negative: raised priority)';
COMMENT ON COLUMN cells.client_cpu_fraction IS 'the load generator''s CPU time over wall time (1.0 = one core) [0-1]';
COMMENT ON COLUMN cells.link IS 'the network setting: plain | d5ms | r100mbit | d1ms-r100mbit';
COMMENT ON COLUMN cells.link_delay_ms IS 'added one-way delay on each chosen host''s link [ms]';
COMMENT ON COLUMN cells.link_rate_mbit IS 'rate cap on each direction; NULL: no cap [Mbit/s]';
COMMENT ON COLUMN cells.client_node IS 'the node the load generator ran on; NULL: the orchestrator''s host';
COMMENT ON COLUMN cells.slo_met IS 'every SLO held and the cell was valid; NULL: the campaign has no SLO';
COMMENT ON COLUMN cells.search_probe IS 'a capacity search''s probe, not one of the campaign''s load points';
COMMENT ON COLUMN cells.knobs IS 'the mode''s engine knobs, e.g. {"max_num_seqs": 8}';
COMMENT ON COLUMN cells.kv_failures IS 'KV-full log lines during the cell (llama.cpp''s failed batches)';
COMMENT ON COLUMN cells.ttft_text_p50_ms IS 'time to the first visible text (first event with text - send), median [ms]';
COMMENT ON COLUMN cells.ttft_text_p99_ms IS 'time to the first visible text, p99 [ms]';
COMMENT ON COLUMN cells.workload IS 'the campaign''s load.workload block; NULL: fixed input_len/output_len';
COMMENT ON COLUMN cells.workload_name IS 'the workload''s name as in the cell key (prefix, trace, a block''s name)';
COMMENT ON COLUMN cells.prefix_cache_hit_rate IS 'the server''s prefix-cache hits over queries (prompt tokens) during the cell [0-1]';
COMMENT ON COLUMN cells.attempts IS 'measurements the cell took (1: no retry; NULL: landed before retries existed)';
COMMENT ON COLUMN cells.warmup_steady IS 'the warm-up until steady reached steady state; NULL: a fixed warm-up count, or none';
COMMENT ON COLUMN cells.warmup_s IS 'how long the warm-up until steady took [s]';
COMMENT ON COLUMN cells.warmup_phase_requests IS 'requests the warm-up until steady sent (not in requests)';
COMMENT ON COLUMN cells.warmup_why IS 'how the warm-up until steady ended';
COMMENT ON COLUMN cells.realized_rate IS 'open loop: the rate of the schedule as drawn, (n - 1) / (last - first scheduled send) after warm-up (a few Poisson arrivals realize a rate of their own); validity is judged against it; NULL before migration 024 [req/s]';
COMMENT ON COLUMN cells.dp IS 'data-parallel size: engines of tp x pp workers behind the mode''s one API server (1: none)';
COMMENT ON COLUMN cells.ep IS 'expert parallel: the MoE layers'' routed experts split over the dp x tp ranks (vLLM''s --enable-expert-parallel)';
COMMENT ON COLUMN cells.replicas IS 'independent servers of the mode (each of dp x tp x pp workers, on nodes of its own) behind one balancer endpoint (1: one server, no balancer)';
COMMENT ON COLUMN cells.foreign_cpu_share IS 'the largest share of a server node''s cores'' time that processes neither the server''s nor servebench''s took over the cell''s window (above validity.max_foreign_cpu the cell is invalid); NULL: no samples of the window on the orchestrator''s host [0-1]';
COMMENT ON COLUMN cells.server_cpu_share IS 'the share of that node''s cores'' time the server''s processes got over the cell''s window [0-1]';
COMMENT ON COLUMN cells.node_cpu IS 'per server node: its cores, the window''s seconds, the server''s, servebench''s and foreign shares of the cores'' time and the busiest foreign process (JSON list)';
COMMENT ON COLUMN cells.hang_watch_error IS 'why the hang watch asked for broke during the cell (the cell was not checked for hangs and is invalid); NULL: it judged, or none was asked for';

-- One row per request of a cell, warm-up included (warmup = true): see the view measured_requests
CREATE TABLE requests (
    run_id                  VARCHAR NOT NULL,  -- the run
    cell_id                 VARCHAR NOT NULL,  -- the cell (join to cells)
    request_index           INTEGER NOT NULL,  -- the request's index in the cell's schedule
    warmup                  BOOLEAN NOT NULL,  -- a warm-up request: not in the cell's figures (measured_requests leaves them out)
    client                  INTEGER,           -- closed loop: which client sent it
    scheduled_s             DOUBLE,            -- when the schedule said to send, from the cell's t0 [s]
    sent_s                  DOUBLE,            -- when it was sent, from the cell's t0 [s]
    first_token_s           DOUBLE,            -- the first event carrying a token, from the cell's t0 [s]
    last_token_s            DOUBLE,            -- the last event carrying a token, from the cell's t0 [s]
    input_tokens            INTEGER,           -- prompt tokens, from the server's usage [tokens]
    output_tokens           INTEGER,           -- output tokens, from the server's usage [tokens]
    chunks                  INTEGER,           -- JSON events received
    token_source            VARCHAR,           -- usage (the server's running count) | chunks (fallback: counted from events)
    http_status             INTEGER,           -- the HTTP status
    error_kind              VARCHAR,           -- what went wrong; NULL: the request completed
    error                   VARCHAR,           -- the error's text
    first_text_s            DOUBLE,            -- the first event with non-empty text, from the cell's t0 [s]
    expected_input_tokens   INTEGER,           -- the prompt's tokens as sent (token ids: exact) [tokens]
    requested_output_tokens INTEGER,           -- the answer length asked for (max_tokens) [tokens]
    prefix_group            INTEGER,           -- shared-prefix workload: the request's group
    session                 INTEGER,           -- sessions workload: the conversation
    turn                    INTEGER,           -- sessions workload: the turn in it (0 first)
    cached_input_tokens     INTEGER,           -- prompt tokens the server reused from its prefix cache (llama.cpp's timings.cache_n) [tokens]
    processed_input_tokens  INTEGER,           -- prompt tokens the server processed (llama.cpp's timings.prompt_n) [tokens]
    PRIMARY KEY (cell_id, request_index)
);
COMMENT ON TABLE requests IS 'One row per request of a cell, warm-up included (warmup = true): see the view measured_requests';
COMMENT ON COLUMN requests.run_id IS 'the run';
COMMENT ON COLUMN requests.cell_id IS 'the cell (join to cells)';
COMMENT ON COLUMN requests.request_index IS 'the request''s index in the cell''s schedule';
COMMENT ON COLUMN requests.warmup IS 'a warm-up request: not in the cell''s figures (measured_requests leaves them out)';
COMMENT ON COLUMN requests.client IS 'closed loop: which client sent it';
COMMENT ON COLUMN requests.scheduled_s IS 'when the schedule said to send, from the cell''s t0 [s]';
COMMENT ON COLUMN requests.sent_s IS 'when it was sent, from the cell''s t0 [s]';
COMMENT ON COLUMN requests.first_token_s IS 'the first event carrying a token, from the cell''s t0 [s]';
COMMENT ON COLUMN requests.last_token_s IS 'the last event carrying a token, from the cell''s t0 [s]';
COMMENT ON COLUMN requests.input_tokens IS 'prompt tokens, from the server''s usage [tokens]';
COMMENT ON COLUMN requests.output_tokens IS 'output tokens, from the server''s usage [tokens]';
COMMENT ON COLUMN requests.chunks IS 'JSON events received';
COMMENT ON COLUMN requests.token_source IS 'usage (the server''s running count) | chunks (fallback: counted from events)';
COMMENT ON COLUMN requests.http_status IS 'the HTTP status';
COMMENT ON COLUMN requests.error_kind IS 'what went wrong; NULL: the request completed';
COMMENT ON COLUMN requests.error IS 'the error''s text';
COMMENT ON COLUMN requests.first_text_s IS 'the first event with non-empty text, from the cell''s t0 [s]';
COMMENT ON COLUMN requests.expected_input_tokens IS 'the prompt''s tokens as sent (token ids: exact) [tokens]';
COMMENT ON COLUMN requests.requested_output_tokens IS 'the answer length asked for (max_tokens) [tokens]';
COMMENT ON COLUMN requests.prefix_group IS 'shared-prefix workload: the request''s group';
COMMENT ON COLUMN requests.session IS 'sessions workload: the conversation';
COMMENT ON COLUMN requests.turn IS 'sessions workload: the turn in it (0 first)';
COMMENT ON COLUMN requests.cached_input_tokens IS 'prompt tokens the server reused from its prefix cache (llama.cpp''s timings.cache_n) [tokens]';
COMMENT ON COLUMN requests.processed_input_tokens IS 'prompt tokens the server processed (llama.cpp''s timings.prompt_n) [tokens]';

-- Every measurement of a cell, the superseded ones too (validity.retries); cells holds the last
CREATE TABLE cell_attempts (
    run_id              VARCHAR NOT NULL,  -- the run
    cell_key            VARCHAR NOT NULL,  -- the cell
    attempt             INTEGER NOT NULL,  -- 0: the first measurement
    superseded          BOOLEAN NOT NULL,  -- measured again after it: not the cell's figures
    valid               BOOLEAN,           -- the load generator's verdict on this attempt
    invalid_reasons     VARCHAR[],         -- why it was invalid
    completed           INTEGER,           -- requests completed after warm-up
    failed              INTEGER,           -- requests failed after warm-up
    output_throughput   DOUBLE,            -- output tokens per second over the steady window [tok/s]
    ttft_p50_ms         DOUBLE,            -- time to first token, median [ms]
    tpot_p50_ms         DOUBLE,            -- time per output token, median [ms]
    schedule_lag_p99_ms DOUBLE,            -- how late the generator sent, p99 [ms]
    client_cpu_fraction DOUBLE,            -- the load generator's CPU time over wall time (1.0 = one core) [0-1]
    result_path         VARCHAR,           -- the attempt's result JSON (superseded: <key>.attempt<N>.json)
    PRIMARY KEY (run_id, cell_key, attempt)
);
COMMENT ON TABLE cell_attempts IS 'Every measurement of a cell, the superseded ones too (validity.retries); cells holds the last';
COMMENT ON COLUMN cell_attempts.run_id IS 'the run';
COMMENT ON COLUMN cell_attempts.cell_key IS 'the cell';
COMMENT ON COLUMN cell_attempts.attempt IS '0: the first measurement';
COMMENT ON COLUMN cell_attempts.superseded IS 'measured again after it: not the cell''s figures';
COMMENT ON COLUMN cell_attempts.valid IS 'the load generator''s verdict on this attempt';
COMMENT ON COLUMN cell_attempts.invalid_reasons IS 'why it was invalid';
COMMENT ON COLUMN cell_attempts.completed IS 'requests completed after warm-up';
COMMENT ON COLUMN cell_attempts.failed IS 'requests failed after warm-up';
COMMENT ON COLUMN cell_attempts.output_throughput IS 'output tokens per second over the steady window [tok/s]';
COMMENT ON COLUMN cell_attempts.ttft_p50_ms IS 'time to first token, median [ms]';
COMMENT ON COLUMN cell_attempts.tpot_p50_ms IS 'time per output token, median [ms]';
COMMENT ON COLUMN cell_attempts.schedule_lag_p99_ms IS 'how late the generator sent, p99 [ms]';
COMMENT ON COLUMN cell_attempts.client_cpu_fraction IS 'the load generator''s CPU time over wall time (1.0 = one core) [0-1]';
COMMENT ON COLUMN cell_attempts.result_path IS 'the attempt''s result JSON (superseded: <key>.attempt<N>.json)';

-- Node telemetry (default 5 Hz): CPU, memory, engine RSS, network, on the load generator's monotonic clock
CREATE TABLE node_samples (
    run_id              VARCHAR NOT NULL,  -- the run
    mode                VARCHAR NOT NULL,  -- whose server was up while this was sampled
    node                VARCHAR NOT NULL,  -- the node sampled
    t_mono              DOUBLE NOT NULL,   -- when, on the load generator's monotonic clock (compare cells.t0_monotonic) [monotonic s]
    t_wall              DOUBLE NOT NULL,   -- when, as unix time [unix s]
    cpu_pct             DOUBLE,            -- CPU use, mean over the node's CPUs, 0-100 [%]
    cpu_pct_per_core    JSON,              -- CPU use per core, e.g. {"0": 93.1, "1": 12.0} [%]
    mem_used_bytes      BIGINT,            -- memory in use on the node [bytes]
    mem_available_bytes BIGINT,            -- memory available on the node [bytes]
    engine_rss_bytes    BIGINT,            -- resident memory of the engine's processes on this node, descendants included [bytes]
    engine_processes    INTEGER,           -- the engine's processes on this node
    net                 JSON               -- cumulative counters per interface: {"eth0": [bytes_sent, bytes_recv, packets_sent, packets_recv]}
);
COMMENT ON TABLE node_samples IS 'Node telemetry (default 5 Hz): CPU, memory, engine RSS, network, on the load generator''s monotonic clock';
COMMENT ON COLUMN node_samples.run_id IS 'the run';
COMMENT ON COLUMN node_samples.mode IS 'whose server was up while this was sampled';
COMMENT ON COLUMN node_samples.node IS 'the node sampled';
COMMENT ON COLUMN node_samples.t_mono IS 'when, on the load generator''s monotonic clock (compare cells.t0_monotonic) [monotonic s]';
COMMENT ON COLUMN node_samples.t_wall IS 'when, as unix time [unix s]';
COMMENT ON COLUMN node_samples.cpu_pct IS 'CPU use, mean over the node''s CPUs, 0-100 [%]';
COMMENT ON COLUMN node_samples.cpu_pct_per_core IS 'CPU use per core, e.g. {"0": 93.1, "1": 12.0} [%]';
COMMENT ON COLUMN node_samples.mem_used_bytes IS 'memory in use on the node [bytes]';
COMMENT ON COLUMN node_samples.mem_available_bytes IS 'memory available on the node [bytes]';
COMMENT ON COLUMN node_samples.engine_rss_bytes IS 'resident memory of the engine''s processes on this node, descendants included [bytes]';
COMMENT ON COLUMN node_samples.engine_processes IS 'the engine''s processes on this node';
COMMENT ON COLUMN node_samples.net IS 'cumulative counters per interface: {"eth0": [bytes_sent, bytes_recv, packets_sent, packets_recv]}';

-- The engine's /metrics, scraped (default 1 Hz) on the load generator's monotonic clock
CREATE TABLE server_samples (
    run_id                  VARCHAR NOT NULL,  -- the run
    mode                    VARCHAR NOT NULL,  -- the mode whose server was scraped
    t_mono                  DOUBLE NOT NULL,   -- when, on the load generator's monotonic clock (compare cells.t0_monotonic) [monotonic s]
    t_wall                  DOUBLE NOT NULL,   -- when, as unix time [unix s]
    kv_usage                DOUBLE,            -- KV-cache usage (vllm:kv_cache_usage_perc); a server of several engines or replicas: the mean of theirs (rows before migration 029: a DP server's sum) [0-1]
    running                 DOUBLE,            -- sequences running
    waiting                 DOUBLE,            -- sequences waiting
    preemptions_total       DOUBLE,            -- counter: preemptions since the server started
    prompt_tokens_total     DOUBLE,            -- counter: prompt tokens since the server started [tokens]
    generation_tokens_total DOUBLE,            -- counter: generated tokens since the server started [tokens]
    kv_tokens               DOUBLE,            -- KV tokens held by the sequences in flight [tokens]
    decode_steps_total      DOUBLE,            -- counter: decode calls (llama.cpp) / engine steps (vLLM)
    requests_total          DOUBLE,            -- counter: requests the server finished since it started (vllm:request_success_total, every finish reason; NULL: the engine counts none)
    instances               JSON               -- per instance, with two or more: vLLM's data-parallel engines (dp0, dp1 by the engine label) or the replicas behind a balancer (r0, r1; r0.dp1 for a replica's own engines), each with its columns, e.g. {"dp0": {"requests_total": 5, "running": 1, "waiting": 0, "kv_usage": 0.1, "generation_tokens_total": 80}}; NULL: one instance
);
COMMENT ON TABLE server_samples IS 'The engine''s /metrics, scraped (default 1 Hz) on the load generator''s monotonic clock';
COMMENT ON COLUMN server_samples.run_id IS 'the run';
COMMENT ON COLUMN server_samples.mode IS 'the mode whose server was scraped';
COMMENT ON COLUMN server_samples.t_mono IS 'when, on the load generator''s monotonic clock (compare cells.t0_monotonic) [monotonic s]';
COMMENT ON COLUMN server_samples.t_wall IS 'when, as unix time [unix s]';
COMMENT ON COLUMN server_samples.kv_usage IS 'KV-cache usage (vllm:kv_cache_usage_perc); a server of several engines or replicas: the mean of theirs (rows before migration 029: a DP server''s sum) [0-1]';
COMMENT ON COLUMN server_samples.running IS 'sequences running';
COMMENT ON COLUMN server_samples.waiting IS 'sequences waiting';
COMMENT ON COLUMN server_samples.preemptions_total IS 'counter: preemptions since the server started';
COMMENT ON COLUMN server_samples.prompt_tokens_total IS 'counter: prompt tokens since the server started [tokens]';
COMMENT ON COLUMN server_samples.generation_tokens_total IS 'counter: generated tokens since the server started [tokens]';
COMMENT ON COLUMN server_samples.kv_tokens IS 'KV tokens held by the sequences in flight [tokens]';
COMMENT ON COLUMN server_samples.decode_steps_total IS 'counter: decode calls (llama.cpp) / engine steps (vLLM)';
COMMENT ON COLUMN server_samples.requests_total IS 'counter: requests the server finished since it started (vllm:request_success_total, every finish reason; NULL: the engine counts none)';
COMMENT ON COLUMN server_samples.instances IS 'per instance, with two or more: vLLM''s data-parallel engines (dp0, dp1 by the engine label) or the replicas behind a balancer (r0, r1; r0.dp1 for a replica''s own engines), each with its columns, e.g. {"dp0": {"requests_total": 5, "running": 1, "waiting": 0, "kv_usage": 0.1, "generation_tokens_total": 80}}; NULL: one instance';

-- Each server's placement: which rank (and its dp/pp/tp/ep coordinate, its replica) ran on which node, as
-- `servebench plan` lays it out
CREATE TABLE server_ranks (
    run_id  VARCHAR NOT NULL,  -- the run
    mode    VARCHAR NOT NULL,  -- the server's mode (servers.mode)
    replica INTEGER NOT NULL,  -- the replica the process belongs to: r0, r1, ... of a `replicas` mode (0: one server)
    process INTEGER NOT NULL,  -- the process's place in its replica's layout (0, 1, ...), ranks in rank order
    label   VARCHAR NOT NULL,  -- the process as `servebench plan` names it: rank0, dp1.rank0 (DP engine 1's rank 0), rpc1, server
    node    VARCHAR NOT NULL,  -- the node it ran on (named as allocated: nodes.node, node_samples.node)
    rank    INTEGER,           -- its rank in its replica's server, 0 .. dp x pp x tp - 1 (NULL: a process holding no layers, such as a server in front of RPC workers)
    dp_rank INTEGER,           -- its data-parallel engine, 0 .. dp - 1 (NULL: not a rank, or a layout other than dp x pp x tp)
    pp_rank INTEGER,           -- its pipeline stage, 0 .. pp - 1 (an RPC worker's: its share of the layers, in order)
    tp_rank INTEGER,           -- its tensor-parallel rank in its stage, 0 .. tp - 1
    ep_rank INTEGER,           -- its expert-parallel rank over the dp x tp ranks, dp_rank x tp + tp_rank (NULL: the mode has no ep)
    PRIMARY KEY (run_id, mode, replica, process)
);
COMMENT ON TABLE server_ranks IS 'Each server''s placement: which rank (and its dp/pp/tp/ep coordinate, its replica) ran on which node, as `servebench plan` lays it out';
COMMENT ON COLUMN server_ranks.run_id IS 'the run';
COMMENT ON COLUMN server_ranks.mode IS 'the server''s mode (servers.mode)';
COMMENT ON COLUMN server_ranks.replica IS 'the replica the process belongs to: r0, r1, ... of a `replicas` mode (0: one server)';
COMMENT ON COLUMN server_ranks.process IS 'the process''s place in its replica''s layout (0, 1, ...), ranks in rank order';
COMMENT ON COLUMN server_ranks.label IS 'the process as `servebench plan` names it: rank0, dp1.rank0 (DP engine 1''s rank 0), rpc1, server';
COMMENT ON COLUMN server_ranks.node IS 'the node it ran on (named as allocated: nodes.node, node_samples.node)';
COMMENT ON COLUMN server_ranks.rank IS 'its rank in its replica''s server, 0 .. dp x pp x tp - 1 (NULL: a process holding no layers, such as a server in front of RPC workers)';
COMMENT ON COLUMN server_ranks.dp_rank IS 'its data-parallel engine, 0 .. dp - 1 (NULL: not a rank, or a layout other than dp x pp x tp)';
COMMENT ON COLUMN server_ranks.pp_rank IS 'its pipeline stage, 0 .. pp - 1 (an RPC worker''s: its share of the layers, in order)';
COMMENT ON COLUMN server_ranks.tp_rank IS 'its tensor-parallel rank in its stage, 0 .. tp - 1';
COMMENT ON COLUMN server_ranks.ep_rank IS 'its expert-parallel rank over the dp x tp ranks, dp_rank x tp + tp_rank (NULL: the mode has no ep)';

-- Faults a campaign's faults: block injected, one row each: where, when, what was hit
CREATE TABLE faults (
    run_id      VARCHAR NOT NULL,  -- the run
    cell_key    VARCHAR NOT NULL,  -- the cell it was injected into
    mode        VARCHAR NOT NULL,  -- the cell's mode
    action      VARCHAR NOT NULL,  -- kill | stop | cancel-allocation | cut-host | fill-shm
    node        VARCHAR NOT NULL,  -- the node it was aimed at
    match       VARCHAR NOT NULL,  -- the regex over the run's command lines on the node
    at_s        DOUBLE NOT NULL,   -- when it fired, else when it was planned: seconds into the cell's load [s]
    injected_at TIMESTAMPTZ,       -- when it was sent (NULL: not injected)
    t_mono      DOUBLE,            -- when it was sent, on the orchestrator's monotonic clock [monotonic s]
    hit         JSON,              -- the processes hit: [[pid, command], ...]
    error       VARCHAR            -- why it was not injected
);
COMMENT ON TABLE faults IS 'Faults a campaign''s faults: block injected, one row each: where, when, what was hit';
COMMENT ON COLUMN faults.run_id IS 'the run';
COMMENT ON COLUMN faults.cell_key IS 'the cell it was injected into';
COMMENT ON COLUMN faults.mode IS 'the cell''s mode';
COMMENT ON COLUMN faults.action IS 'kill | stop | cancel-allocation | cut-host | fill-shm';
COMMENT ON COLUMN faults.node IS 'the node it was aimed at';
COMMENT ON COLUMN faults.match IS 'the regex over the run''s command lines on the node';
COMMENT ON COLUMN faults.at_s IS 'when it fired, else when it was planned: seconds into the cell''s load [s]';
COMMENT ON COLUMN faults.injected_at IS 'when it was sent (NULL: not injected)';
COMMENT ON COLUMN faults.t_mono IS 'when it was sent, on the orchestrator''s monotonic clock [monotonic s]';
COMMENT ON COLUMN faults.hit IS 'the processes hit: [[pid, command], ...]';
COMMENT ON COLUMN faults.error IS 'why it was not injected';

-- One capacity search per mode of a run: the highest load point that met the SLO
CREATE TABLE capacity (
    run_id      VARCHAR NOT NULL,  -- the run
    mode        VARCHAR NOT NULL,  -- the mode (configuration) searched
    search_over VARCHAR NOT NULL,  -- what was searched: rate (req/s) | clients
    slo         JSON NOT NULL,     -- the SLO, e.g. {"ttft_p99_ms": 500}
    capacity    DOUBLE,            -- the highest point that met the SLO, in req/s or clients (search_over); NULL: none did
    upper       DOUBLE,            -- the lowest point that missed it, in req/s or clients; NULL: none did
    probes      INTEGER NOT NULL,  -- probe cells measured
    converged   BOOLEAN NOT NULL,  -- the bracket narrowed to the precision asked
    why         VARCHAR,           -- how the search ended
    probe_cells JSON,              -- the probe cells' keys, in probe order (join to cells.cell_key)
    knobs       JSON,              -- the mode's engine knobs
    tpot_p50_ms DOUBLE,            -- TPOT p50 at the capacity: median over the repeats of that probe [ms]
    series_id   VARCHAR,           -- the capacity's nightly series
    PRIMARY KEY (run_id, mode)
);
COMMENT ON TABLE capacity IS 'One capacity search per mode of a run: the highest load point that met the SLO';
COMMENT ON COLUMN capacity.run_id IS 'the run';
COMMENT ON COLUMN capacity.mode IS 'the mode (configuration) searched';
COMMENT ON COLUMN capacity.search_over IS 'what was searched: rate (req/s) | clients';
COMMENT ON COLUMN capacity.slo IS 'the SLO, e.g. {"ttft_p99_ms": 500}';
COMMENT ON COLUMN capacity.capacity IS 'the highest point that met the SLO, in req/s or clients (search_over); NULL: none did';
COMMENT ON COLUMN capacity.upper IS 'the lowest point that missed it, in req/s or clients; NULL: none did';
COMMENT ON COLUMN capacity.probes IS 'probe cells measured';
COMMENT ON COLUMN capacity.converged IS 'the bracket narrowed to the precision asked';
COMMENT ON COLUMN capacity.why IS 'how the search ended';
COMMENT ON COLUMN capacity.probe_cells IS 'the probe cells'' keys, in probe order (join to cells.cell_key)';
COMMENT ON COLUMN capacity.knobs IS 'the mode''s engine knobs';
COMMENT ON COLUMN capacity.tpot_p50_ms IS 'TPOT p50 at the capacity: median over the repeats of that probe [ms]';
COMMENT ON COLUMN capacity.series_id IS 'the capacity''s nightly series';

-- The tuner's verdict of a tuning run: the best configuration against the default
CREATE TABLE tuning (
    run_id           VARCHAR PRIMARY KEY,  -- the tuning run
    search_over      VARCHAR NOT NULL,     -- rate | clients
    slo              JSON NOT NULL,        -- the SLO searched under
    configurations   INTEGER NOT NULL,     -- configurations searched
    launches         INTEGER NOT NULL,     -- configurations whose server was launched (restarts not counted)
    probes           INTEGER NOT NULL,     -- probe cells over all configurations
    default_mode     VARCHAR NOT NULL,     -- the default configuration: every knob axis at its first value
    best_mode        VARCHAR,              -- the highest capacity (ties: the lower TPOT p50)
    default_capacity DOUBLE,               -- the default's capacity (the higher of its two measurements), in req/s or clients
    best_capacity    DOUBLE,               -- the best configuration's capacity, in req/s or clients
    ratio            DOUBLE,               -- best / default capacity
    ratio_low        DOUBLE,               -- the ratio the probes' brackets allow at worst
    ratio_high       DOUBLE,               -- the ratio the probes' brackets allow at best (NULL: unbounded)
    pareto           JSON,                 -- modes on the capacity / TPOT p50 front
    why              VARCHAR,              -- the verdict in words
    default_first    DOUBLE,               -- the default's capacity, measured first
    default_again    DOUBLE,               -- the default's capacity, measured again last
    drift            DOUBLE                -- default_again / default_first - 1 (relative)
);
COMMENT ON TABLE tuning IS 'The tuner''s verdict of a tuning run: the best configuration against the default';
COMMENT ON COLUMN tuning.run_id IS 'the tuning run';
COMMENT ON COLUMN tuning.search_over IS 'rate | clients';
COMMENT ON COLUMN tuning.slo IS 'the SLO searched under';
COMMENT ON COLUMN tuning.configurations IS 'configurations searched';
COMMENT ON COLUMN tuning.launches IS 'configurations whose server was launched (restarts not counted)';
COMMENT ON COLUMN tuning.probes IS 'probe cells over all configurations';
COMMENT ON COLUMN tuning.default_mode IS 'the default configuration: every knob axis at its first value';
COMMENT ON COLUMN tuning.best_mode IS 'the highest capacity (ties: the lower TPOT p50)';
COMMENT ON COLUMN tuning.default_capacity IS 'the default''s capacity (the higher of its two measurements), in req/s or clients';
COMMENT ON COLUMN tuning.best_capacity IS 'the best configuration''s capacity, in req/s or clients';
COMMENT ON COLUMN tuning.ratio IS 'best / default capacity';
COMMENT ON COLUMN tuning.ratio_low IS 'the ratio the probes'' brackets allow at worst';
COMMENT ON COLUMN tuning.ratio_high IS 'the ratio the probes'' brackets allow at best (NULL: unbounded)';
COMMENT ON COLUMN tuning.pareto IS 'modes on the capacity / TPOT p50 front';
COMMENT ON COLUMN tuning.why IS 'the verdict in words';
COMMENT ON COLUMN tuning.default_first IS 'the default''s capacity, measured first';
COMMENT ON COLUMN tuning.default_again IS 'the default''s capacity, measured again last';
COMMENT ON COLUMN tuning.drift IS 'default_again / default_first - 1 (relative)';

-- Bootstrap 95% interval of the median of a load point's repeats, per metric (landed at the end of a run)
CREATE TABLE cell_intervals (
    run_id        VARCHAR NOT NULL,      -- the run
    cell_point    VARCHAR NOT NULL,      -- the load point: the cell key without its repeat, e.g. tp2.c4
    metric        VARCHAR NOT NULL,      -- the cells column, e.g. output_throughput
    repeat_values DOUBLE[] NOT NULL,     -- the repeats it was computed from, in repeat order [the metric's unit]
    ci_low        DOUBLE NOT NULL,       -- lower end of the percentile bootstrap interval of the median [the metric's unit]
    ci_high       DOUBLE NOT NULL,       -- upper end of that interval [the metric's unit]
    level         DOUBLE NOT NULL,       -- the interval's confidence level (0.95) [0-1]
    resamples     INTEGER NOT NULL,      -- bootstrap resamples
    seed          BIGINT NOT NULL,       -- the bootstrap's seed
    computed_at   TIMESTAMPTZ NOT NULL,  -- when it was computed
    PRIMARY KEY (run_id, cell_point, metric)
);
COMMENT ON TABLE cell_intervals IS 'Bootstrap 95% interval of the median of a load point''s repeats, per metric (landed at the end of a run)';
COMMENT ON COLUMN cell_intervals.run_id IS 'the run';
COMMENT ON COLUMN cell_intervals.cell_point IS 'the load point: the cell key without its repeat, e.g. tp2.c4';
COMMENT ON COLUMN cell_intervals.metric IS 'the cells column, e.g. output_throughput';
COMMENT ON COLUMN cell_intervals.repeat_values IS 'the repeats it was computed from, in repeat order [the metric''s unit]';
COMMENT ON COLUMN cell_intervals.ci_low IS 'lower end of the percentile bootstrap interval of the median [the metric''s unit]';
COMMENT ON COLUMN cell_intervals.ci_high IS 'upper end of that interval [the metric''s unit]';
COMMENT ON COLUMN cell_intervals.level IS 'the interval''s confidence level (0.95) [0-1]';
COMMENT ON COLUMN cell_intervals.resamples IS 'bootstrap resamples';
COMMENT ON COLUMN cell_intervals.seed IS 'the bootstrap''s seed';
COMMENT ON COLUMN cell_intervals.computed_at IS 'when it was computed';

-- Each cell's prediction by the performance model, beside its measurement (cells.run_id, cells.cell_key)
CREATE TABLE cell_predictions (
    run_id               VARCHAR NOT NULL,  -- the run
    cell_key             VARCHAR NOT NULL,  -- the cell (cells.cell_key)
    mode                 VARCHAR NOT NULL,  -- the cell's mode (cells.mode)
    ttft_p50_ms          DOUBLE,            -- predicted median time to first token [ms]
    ttft_p99_ms          DOUBLE,            -- predicted 99th percentile time to first token [ms]
    tpot_p50_ms          DOUBLE,            -- predicted median time per output token after the first [ms]
    tpot_p99_ms          DOUBLE,            -- predicted 99th percentile time per output token after the first [ms]
    output_throughput    DOUBLE,            -- predicted output tokens a second of the whole mode [tok/s]
    bound                VARCHAR,           -- what most of the cell's engine steps wait on: bandwidth, compute, network or engine (its fixed cost a step)
    figures_source       VARCHAR,           -- where the node figures came from: the roofline the run landed, a cached one, or a declared chip's published figures
    efficiency_source    VARCHAR,           -- the efficiency factors' origin: defaults, or fitted on the run's TP=1 cells
    bandwidth_efficiency DOUBLE,            -- the share of the node's measured bandwidth the model lets a rank reach [0-1]
    compute_efficiency   DOUBLE,            -- the share of the node's matmul peak for the dtype the model lets a rank reach [0-1]
    step_overhead_ms     DOUBLE,            -- the engine's fixed cost a step the model adds [ms]
    request_overhead_ms  DOUBLE,            -- the API process's cost a request before it is scheduled [ms]
    throughput_ratio     DOUBLE,            -- measured output throughput / predicted (NULL: no measurement)
    tpot_ratio           DOUBLE,            -- predicted TPOT p50 / measured: below 1 the cell decoded slower than predicted (NULL: no measurement)
    flags                VARCHAR[],         -- for a cell far below its prediction, the causes the model names (a rank across NUMA nodes, fewer cores than threads, oversubscription, other processes, the network); empty: none needed
    PRIMARY KEY (run_id, cell_key)
);
COMMENT ON TABLE cell_predictions IS 'Each cell''s prediction by the performance model, beside its measurement (cells.run_id, cells.cell_key)';
COMMENT ON COLUMN cell_predictions.run_id IS 'the run';
COMMENT ON COLUMN cell_predictions.cell_key IS 'the cell (cells.cell_key)';
COMMENT ON COLUMN cell_predictions.mode IS 'the cell''s mode (cells.mode)';
COMMENT ON COLUMN cell_predictions.ttft_p50_ms IS 'predicted median time to first token [ms]';
COMMENT ON COLUMN cell_predictions.ttft_p99_ms IS 'predicted 99th percentile time to first token [ms]';
COMMENT ON COLUMN cell_predictions.tpot_p50_ms IS 'predicted median time per output token after the first [ms]';
COMMENT ON COLUMN cell_predictions.tpot_p99_ms IS 'predicted 99th percentile time per output token after the first [ms]';
COMMENT ON COLUMN cell_predictions.output_throughput IS 'predicted output tokens a second of the whole mode [tok/s]';
COMMENT ON COLUMN cell_predictions.bound IS 'what most of the cell''s engine steps wait on: bandwidth, compute, network or engine (its fixed cost a step)';
COMMENT ON COLUMN cell_predictions.figures_source IS 'where the node figures came from: the roofline the run landed, a cached one, or a declared chip''s published figures';
COMMENT ON COLUMN cell_predictions.efficiency_source IS 'the efficiency factors'' origin: defaults, or fitted on the run''s TP=1 cells';
COMMENT ON COLUMN cell_predictions.bandwidth_efficiency IS 'the share of the node''s measured bandwidth the model lets a rank reach [0-1]';
COMMENT ON COLUMN cell_predictions.compute_efficiency IS 'the share of the node''s matmul peak for the dtype the model lets a rank reach [0-1]';
COMMENT ON COLUMN cell_predictions.step_overhead_ms IS 'the engine''s fixed cost a step the model adds [ms]';
COMMENT ON COLUMN cell_predictions.request_overhead_ms IS 'the API process''s cost a request before it is scheduled [ms]';
COMMENT ON COLUMN cell_predictions.throughput_ratio IS 'measured output throughput / predicted (NULL: no measurement)';
COMMENT ON COLUMN cell_predictions.tpot_ratio IS 'predicted TPOT p50 / measured: below 1 the cell decoded slower than predicted (NULL: no measurement)';
COMMENT ON COLUMN cell_predictions.flags IS 'for a cell far below its prediction, the causes the model names (a rank across NUMA nodes, fewer cores than threads, oversubscription, other processes, the network); empty: none needed';

-- Each stage of a run as it ran: its wall time, the hosts it covered and the orchestrator's own CPU time,
-- threads and connections over it
CREATE TABLE stage_timings (
    run_id               VARCHAR NOT NULL,      -- the run
    seq                  INTEGER NOT NULL,      -- the stage's place in the run's order (0, 1, ...): a stage that ran more than once (a mode's server start) has a row each time
    stage                VARCHAR NOT NULL,      -- what ran: provision, placement, server-start, sampler-start, fetch-results, release, ...
    subject              VARCHAR,               -- what the stage was for: an engine, a mode, a cell (NULL: the run as a whole)
    hosts                INTEGER NOT NULL,      -- how many hosts the stage covered
    started_at           TIMESTAMPTZ NOT NULL,  -- when the stage began, on the orchestrator's clock
    seconds              DOUBLE NOT NULL,       -- the stage's wall time [s]
    orchestrator_cpu_s   DOUBLE,                -- CPU time the orchestrator process and the children it waited for (ssh, srun, tar) spent during the stage [s]
    orchestrator_threads INTEGER,               -- the orchestrator process's threads at the stage's end (the most of start and end)
    open_connections     INTEGER,               -- TCP connections the orchestrator process and its children held at the stage's end (ssh masters and their channels, srun, HTTP clients)
    ok                   BOOLEAN NOT NULL,      -- whether the stage ended without an error
    error                VARCHAR,               -- the error the stage ended with (NULL: it ended well)
    PRIMARY KEY (run_id, seq)
);
COMMENT ON TABLE stage_timings IS 'Each stage of a run as it ran: its wall time, the hosts it covered and the orchestrator''s own CPU time, threads and connections over it';
COMMENT ON COLUMN stage_timings.run_id IS 'the run';
COMMENT ON COLUMN stage_timings.seq IS 'the stage''s place in the run''s order (0, 1, ...): a stage that ran more than once (a mode''s server start) has a row each time';
COMMENT ON COLUMN stage_timings.stage IS 'what ran: provision, placement, server-start, sampler-start, fetch-results, release, ...';
COMMENT ON COLUMN stage_timings.subject IS 'what the stage was for: an engine, a mode, a cell (NULL: the run as a whole)';
COMMENT ON COLUMN stage_timings.hosts IS 'how many hosts the stage covered';
COMMENT ON COLUMN stage_timings.started_at IS 'when the stage began, on the orchestrator''s clock';
COMMENT ON COLUMN stage_timings.seconds IS 'the stage''s wall time [s]';
COMMENT ON COLUMN stage_timings.orchestrator_cpu_s IS 'CPU time the orchestrator process and the children it waited for (ssh, srun, tar) spent during the stage [s]';
COMMENT ON COLUMN stage_timings.orchestrator_threads IS 'the orchestrator process''s threads at the stage''s end (the most of start and end)';
COMMENT ON COLUMN stage_timings.open_connections IS 'TCP connections the orchestrator process and its children held at the stage''s end (ssh masters and their channels, srun, HTTP clients)';
COMMENT ON COLUMN stage_timings.ok IS 'whether the stage ended without an error';
COMMENT ON COLUMN stage_timings.error IS 'the error the stage ended with (NULL: it ended well)';

-- What each night's regression analysis found, per series and metric
CREATE TABLE regressions (
    run_id               VARCHAR NOT NULL,      -- the night analyzed
    series_id            VARCHAR NOT NULL,      -- the series
    metric               VARCHAR NOT NULL,      -- the cells column, or capacity
    detected_at          TIMESTAMPTZ NOT NULL,  -- when the analysis ran
    night_at             TIMESTAMPTZ NOT NULL,  -- when the night's run started
    series_label         VARCHAR NOT NULL,      -- campaign/mode load lengths
    campaign             VARCHAR NOT NULL,      -- the series' campaign
    mode                 VARCHAR NOT NULL,      -- the series' mode
    cell_point           VARCHAR NOT NULL,      -- the cell key without its repeat, e.g. tp2.c4
    hardware_fingerprint VARCHAR,               -- the series' hardware
    kind                 VARCHAR NOT NULL,      -- regression | improvement | noisy
    status               VARCHAR NOT NULL,      -- suspected (gate only) | confirmed (change point) | noisy
    direction            VARCHAR NOT NULL,      -- which way is better: higher | lower
    last_good_run        VARCHAR,               -- the last night before the change
    first_bad_run        VARCHAR,               -- the first night after it
    last_good_at         TIMESTAMPTZ,           -- when the last good night ran
    first_bad_at         TIMESTAMPTZ,           -- when the first bad night ran
    baseline_value       DOUBLE,                -- the baseline's value [the metric's unit]
    value                DOUBLE,                -- the night's value [the metric's unit]
    change               DOUBLE,                -- value / baseline - 1 (relative)
    p_value              DOUBLE,                -- one-sided Mann-Whitney U
    change_point         BOOLEAN,               -- a change point sits at first_bad_run
    nights_since_change  INTEGER,               -- nights since the change
    engine_last_good     VARCHAR,               -- engine version of the last good night
    engine_first_bad     VARCHAR,               -- engine version of the first bad night
    engine_versions      VARCHAR[],             -- every engine version from the last good to the first bad night
    detail               VARCHAR,               -- the finding in words
    PRIMARY KEY (run_id, series_id, metric)
);
COMMENT ON TABLE regressions IS 'What each night''s regression analysis found, per series and metric';
COMMENT ON COLUMN regressions.run_id IS 'the night analyzed';
COMMENT ON COLUMN regressions.series_id IS 'the series';
COMMENT ON COLUMN regressions.metric IS 'the cells column, or capacity';
COMMENT ON COLUMN regressions.detected_at IS 'when the analysis ran';
COMMENT ON COLUMN regressions.night_at IS 'when the night''s run started';
COMMENT ON COLUMN regressions.series_label IS 'campaign/mode load lengths';
COMMENT ON COLUMN regressions.campaign IS 'the series'' campaign';
COMMENT ON COLUMN regressions.mode IS 'the series'' mode';
COMMENT ON COLUMN regressions.cell_point IS 'the cell key without its repeat, e.g. tp2.c4';
COMMENT ON COLUMN regressions.hardware_fingerprint IS 'the series'' hardware';
COMMENT ON COLUMN regressions.kind IS 'regression | improvement | noisy';
COMMENT ON COLUMN regressions.status IS 'suspected (gate only) | confirmed (change point) | noisy';
COMMENT ON COLUMN regressions.direction IS 'which way is better: higher | lower';
COMMENT ON COLUMN regressions.last_good_run IS 'the last night before the change';
COMMENT ON COLUMN regressions.first_bad_run IS 'the first night after it';
COMMENT ON COLUMN regressions.last_good_at IS 'when the last good night ran';
COMMENT ON COLUMN regressions.first_bad_at IS 'when the first bad night ran';
COMMENT ON COLUMN regressions.baseline_value IS 'the baseline''s value [the metric''s unit]';
COMMENT ON COLUMN regressions.value IS 'the night''s value [the metric''s unit]';
COMMENT ON COLUMN regressions.change IS 'value / baseline - 1 (relative)';
COMMENT ON COLUMN regressions.p_value IS 'one-sided Mann-Whitney U';
COMMENT ON COLUMN regressions.change_point IS 'a change point sits at first_bad_run';
COMMENT ON COLUMN regressions.nights_since_change IS 'nights since the change';
COMMENT ON COLUMN regressions.engine_last_good IS 'engine version of the last good night';
COMMENT ON COLUMN regressions.engine_first_bad IS 'engine version of the first bad night';
COMMENT ON COLUMN regressions.engine_versions IS 'every engine version from the last good to the first bad night';
COMMENT ON COLUMN regressions.detail IS 'the finding in words';

-- A user's word on a night of the history: accept (a new baseline) or exclude, for every series of a run or
-- one series/metric
CREATE TABLE annotations (
    annotation_id VARCHAR PRIMARY KEY,                                         -- the annotation's id
    created_at    TIMESTAMPTZ NOT NULL,                                        -- when it was made
    action        VARCHAR NOT NULL CHECK ("action" IN ('accept', 'exclude')),  -- accept (the night starts a new baseline) | exclude (the night is left out)
    run_id        VARCHAR NOT NULL,                                            -- the night (run) it is about
    series_id     VARCHAR,                                                     -- the series it is about; NULL: every series of that run
    metric        VARCHAR,                                                     -- the metric it is about; NULL: every metric
    note          VARCHAR NOT NULL,                                            -- the user's reason
    author        VARCHAR                                                      -- who made it
);
COMMENT ON TABLE annotations IS 'A user''s word on a night of the history: accept (a new baseline) or exclude, for every series of a run or one series/metric';
COMMENT ON COLUMN annotations.annotation_id IS 'the annotation''s id';
COMMENT ON COLUMN annotations.created_at IS 'when it was made';
COMMENT ON COLUMN annotations.action IS 'accept (the night starts a new baseline) | exclude (the night is left out)';
COMMENT ON COLUMN annotations.run_id IS 'the night (run) it is about';
COMMENT ON COLUMN annotations.series_id IS 'the series it is about; NULL: every series of that run';
COMMENT ON COLUMN annotations.metric IS 'the metric it is about; NULL: every metric';
COMMENT ON COLUMN annotations.note IS 'the user''s reason';
COMMENT ON COLUMN annotations.author IS 'who made it';

-- servebench bisect: one row per measured commit, with its repeats and its verdict against the baseline
CREATE TABLE bisect_steps (
    bisect_id     VARCHAR NOT NULL,      -- the bisect this step belongs to
    step          INTEGER NOT NULL,      -- 0: the good commit (the baseline), then the midpoints in order
    campaign      VARCHAR NOT NULL,      -- the campaign measured at each commit
    mode          VARCHAR NOT NULL,      -- the campaign's mode measured
    metric        VARCHAR NOT NULL,      -- the cells column bisected on (tpot_p50_ms, output_throughput, ...)
    direction     VARCHAR NOT NULL,      -- which way is better: higher | lower
    good          VARCHAR NOT NULL,      -- the good commit the bisect was given (full hash)
    bad           VARCHAR NOT NULL,      -- the bad commit the bisect was given (full hash)
    commit_hash   VARCHAR NOT NULL,      -- the commit this step measured
    subject       VARCHAR,               -- the commit's first line
    run_id        VARCHAR NOT NULL,      -- the run that measured it
    build_key     VARCHAR,               -- the build made of the commit
    repeat_values DOUBLE[] NOT NULL,     -- the metric of each repeat [the metric's unit]
    value         DOUBLE NOT NULL,       -- the median of the repeats [the metric's unit]
    change        DOUBLE,                -- how much worse than the baseline, relative (0.1 = 10 %); NULL for the baseline
    separation    DOUBLE,                -- the least any repeat is worse than any baseline repeat, relative
    verdict       VARCHAR NOT NULL,      -- baseline | good | bad
    measured_at   TIMESTAMPTZ NOT NULL,  -- when the step was landed
    PRIMARY KEY (bisect_id, step)
);
COMMENT ON TABLE bisect_steps IS 'servebench bisect: one row per measured commit, with its repeats and its verdict against the baseline';
COMMENT ON COLUMN bisect_steps.bisect_id IS 'the bisect this step belongs to';
COMMENT ON COLUMN bisect_steps.step IS '0: the good commit (the baseline), then the midpoints in order';
COMMENT ON COLUMN bisect_steps.campaign IS 'the campaign measured at each commit';
COMMENT ON COLUMN bisect_steps.mode IS 'the campaign''s mode measured';
COMMENT ON COLUMN bisect_steps.metric IS 'the cells column bisected on (tpot_p50_ms, output_throughput, ...)';
COMMENT ON COLUMN bisect_steps.direction IS 'which way is better: higher | lower';
COMMENT ON COLUMN bisect_steps.good IS 'the good commit the bisect was given (full hash)';
COMMENT ON COLUMN bisect_steps.bad IS 'the bad commit the bisect was given (full hash)';
COMMENT ON COLUMN bisect_steps.commit_hash IS 'the commit this step measured';
COMMENT ON COLUMN bisect_steps.subject IS 'the commit''s first line';
COMMENT ON COLUMN bisect_steps.run_id IS 'the run that measured it';
COMMENT ON COLUMN bisect_steps.build_key IS 'the build made of the commit';
COMMENT ON COLUMN bisect_steps.repeat_values IS 'the metric of each repeat [the metric''s unit]';
COMMENT ON COLUMN bisect_steps.value IS 'the median of the repeats [the metric''s unit]';
COMMENT ON COLUMN bisect_steps.change IS 'how much worse than the baseline, relative (0.1 = 10 %); NULL for the baseline';
COMMENT ON COLUMN bisect_steps.separation IS 'the least any repeat is worse than any baseline repeat, relative';
COMMENT ON COLUMN bisect_steps.verdict IS 'baseline | good | bad';
COMMENT ON COLUMN bisect_steps.measured_at IS 'when the step was landed';

-- The warehouse migrations applied, in order (the schema version is the highest)
CREATE TABLE schema_migrations (
    version    INTEGER PRIMARY KEY,  -- the migration's number
    name       VARCHAR NOT NULL,     -- its file
    applied_at TIMESTAMPTZ NOT NULL  -- when it was applied
);
COMMENT ON TABLE schema_migrations IS 'The warehouse migrations applied, in order (the schema version is the highest)';
COMMENT ON COLUMN schema_migrations.version IS 'the migration''s number';
COMMENT ON COLUMN schema_migrations.name IS 'its file';
COMMENT ON COLUMN schema_migrations.applied_at IS 'when it was applied';
