-- Which ranks of a mode ran on which node (docs/parallel-modes.md): each server's placement
-- as `servebench plan` lays it out (the engine's rank layout on each replica's nodes), landed with its
-- servers row, so cell_rank_network can say whose bytes a node's are. One row per process the layout names:
-- every worker (a rank: numbered in vLLM's order, DP engine, then pipeline stage, then TP rank) and a process
-- holding no layers (llama.cpp's server in front of its RPC workers, which are ranks). Servers landed before
-- this migration have no rows here (`servebench plan` on their campaign file prints their placement).

CREATE TABLE IF NOT EXISTS server_ranks (
    run_id    VARCHAR NOT NULL,
    mode      VARCHAR NOT NULL,
    replica   INTEGER NOT NULL,
    process   INTEGER NOT NULL,
    label     VARCHAR NOT NULL,
    node      VARCHAR NOT NULL,
    rank      INTEGER,
    dp_rank   INTEGER,
    pp_rank   INTEGER,
    tp_rank   INTEGER,
    ep_rank   INTEGER,
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
