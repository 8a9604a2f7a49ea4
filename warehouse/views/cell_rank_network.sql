-- Per cell and node: the bytes each node of the mode sent and received while the cell ran,
-- every interface but lo (traffic between two ranks of one node stays on it, over shared memory or lo),
-- from node_samples.net's cumulative counters. Each interface's change over the cell's window (the node's
-- last sample at or before the cell's t0 to its first at or after its last token: node samples come at
-- 5 Hz, so the edges lie within 0.2 s of the cell), then summed over its interfaces: an interface that
-- appears mid-run adds its own change, not its whole count. Which ranks the node held comes from
-- server_ranks (the placement `servebench plan` prints, landed with the server's row): `ranks` names them
-- (`r1.dp0.rank1`: replica r1's, in a `replicas` mode), `replica` says whose; the row has the mode's layout
-- (tp, pp, dp, ep from its server) and the engine's processes on the node, and a node holding several
-- ranks has their bytes together (the counters are the node's).
CREATE OR REPLACE VIEW cell_rank_network AS
WITH points AS (
    SELECT n.run_id, n.mode, n.node, n.t_mono, n.engine_processes, i.key AS interface,
           try_cast(i.value->>0 AS DOUBLE) AS sent, try_cast(i.value->>1 AS DOUBLE) AS received
    FROM node_samples n
    LEFT JOIN json_each(n.net) i ON i.key <> 'lo'
), windows AS (
    SELECT c.run_id, c.cell_id, c.cell_key, c.mode, c.clients, c.offered_rate, c.completed, c.t0_monotonic,
           c.t_end_monotonic, sampled.node,
           coalesce((SELECT max(p.t_mono) FROM points p WHERE p.run_id = c.run_id AND p.mode = c.mode
                       AND p.node = sampled.node AND p.t_mono <= c.t0_monotonic), c.t0_monotonic) AS t_from,
           coalesce((SELECT min(p.t_mono) FROM points p WHERE p.run_id = c.run_id AND p.mode = c.mode
                       AND p.node = sampled.node AND p.t_mono >= c.t_end_monotonic), c.t_end_monotonic) AS t_to
    FROM cells c
    JOIN (SELECT DISTINCT run_id, mode, node FROM node_samples) sampled ON sampled.run_id = c.run_id AND sampled.mode = c.mode
    WHERE c.t0_monotonic IS NOT NULL AND c.t_end_monotonic IS NOT NULL
), per_interface AS (
    SELECT w.run_id, w.cell_id, w.cell_key, w.mode, w.clients, w.offered_rate, w.completed, w.node, p.interface,
           max(p.sent) - min(p.sent) AS sent, max(p.received) - min(p.received) AS received,
           max(p.engine_processes) AS engine_processes, count(DISTINCT p.t_mono) AS samples,
           w.t_to - w.t_from AS window_s
    FROM windows w
    JOIN points p ON p.run_id = w.run_id AND p.mode = w.mode AND p.node = w.node AND p.t_mono BETWEEN w.t_from AND w.t_to
    GROUP BY ALL
)
, per_node AS (
    SELECT run_id, cell_id, cell_key, mode, clients, offered_rate, completed, node,
           max(engine_processes) AS engine_processes,
           CASE WHEN max(samples) >= 2 THEN coalesce(sum(sent), 0) END AS bytes_sent,
           CASE WHEN max(samples) >= 2 THEN coalesce(sum(received), 0) END AS bytes_received,
           max(window_s) AS window_s, max(samples) AS samples
    FROM per_interface
    GROUP BY run_id, cell_id, cell_key, mode, clients, offered_rate, completed, node
), node_ranks AS (
    SELECT r.run_id, r.mode, r.node, min(r.replica) AS replica,
           list(CASE WHEN coalesce(s.replicas, 1) > 1 THEN 'r' || r.replica || '.' || r.label ELSE r.label END
                ORDER BY r.replica, r.process) AS ranks
    FROM server_ranks r
    LEFT JOIN servers s ON s.run_id = r.run_id AND s.mode = r.mode
    GROUP BY r.run_id, r.mode, r.node
)
SELECT f.run_id, f.cell_id, f.cell_key, f.mode, f.clients, f.offered_rate, f.node, d.role, s.tp, s.pp, s.dp, s.ep,
       f.engine_processes, f.bytes_sent, f.bytes_received,
       (f.bytes_sent + f.bytes_received) / nullif(f.completed, 0) AS bytes_per_request,
       f.window_s, f.samples, k.replica, k.ranks
FROM per_node f
LEFT JOIN nodes d ON d.run_id = f.run_id AND d.node = f.node
LEFT JOIN servers s ON s.run_id = f.run_id AND s.mode = f.mode
LEFT JOIN node_ranks k ON k.run_id = f.run_id AND k.mode = f.mode AND k.node = f.node;

COMMENT ON VIEW cell_rank_network IS 'Per cell and node: bytes sent and received on every interface but lo while the cell ran, with the mode''s layout: the all-reduce of TP, the activations of PP, the requests of DP';
COMMENT ON COLUMN cell_rank_network.run_id IS 'the run';
COMMENT ON COLUMN cell_rank_network.cell_id IS 'the cell';
COMMENT ON COLUMN cell_rank_network.cell_key IS 'the cell''s key';
COMMENT ON COLUMN cell_rank_network.mode IS 'the cell''s mode';
COMMENT ON COLUMN cell_rank_network.clients IS 'closed loop: concurrent clients';
COMMENT ON COLUMN cell_rank_network.offered_rate IS 'open loop: the rate offered, as the cell key names it (cells.offered_rate) [req/s]';
COMMENT ON COLUMN cell_rank_network.node IS 'the node sampled (the ranks it held: `ranks`)';
COMMENT ON COLUMN cell_rank_network.role IS 'server | client (the load generator''s own node)';
COMMENT ON COLUMN cell_rank_network.tp IS 'tensor-parallel size of the mode served';
COMMENT ON COLUMN cell_rank_network.pp IS 'pipeline-parallel size of the mode served';
COMMENT ON COLUMN cell_rank_network.dp IS 'data-parallel size of the mode served';
COMMENT ON COLUMN cell_rank_network.ep IS 'expert parallel: the routed experts split over the dp x tp ranks';
COMMENT ON COLUMN cell_rank_network.engine_processes IS 'the engine''s processes on the node, most in one sample of the window';
COMMENT ON COLUMN cell_rank_network.bytes_sent IS 'bytes the node sent during the cell, every interface but lo (NULL: under two samples) [bytes]';
COMMENT ON COLUMN cell_rank_network.bytes_received IS 'bytes the node received during the cell, every interface but lo (NULL: under two samples) [bytes]';
COMMENT ON COLUMN cell_rank_network.bytes_per_request IS '(bytes sent + received) / requests completed after warm-up [bytes]';
COMMENT ON COLUMN cell_rank_network.window_s IS 'the window: the node''s last sample at or before the cell''s t0 to its first at or after its last token [s]';
COMMENT ON COLUMN cell_rank_network.samples IS 'node samples in the window';
COMMENT ON COLUMN cell_rank_network.replica IS 'the replica whose ranks the node held (0: a mode of one server; NULL: none of the mode''s, or a server landed before server_ranks)';
COMMENT ON COLUMN cell_rank_network.ranks IS 'the mode''s processes on the node, as `servebench plan` names them (server_ranks.label; r1.rank0: replica r1''s rank0), in rank order; NULL: none';
