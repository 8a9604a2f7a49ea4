-- Replicas behind a balancer (docs/parallel-modes.md): a mode's `replicas` (independent servers of
-- its engine and layout, each on nodes of its own, behind one nginx endpoint) on its cells and its server's
-- row, and the balancer's policy on the server's row. Rows landed before this migration were one server
-- each: replicas = 1, no balancer.

ALTER TABLE cells ADD COLUMN replicas INTEGER;
UPDATE cells SET replicas = 1;

ALTER TABLE servers ADD COLUMN replicas INTEGER;
ALTER TABLE servers ADD COLUMN balancer VARCHAR;
UPDATE servers SET replicas = 1;

COMMENT ON COLUMN cells.replicas IS 'independent servers of the mode (each of dp x tp x pp workers, on nodes of its own) behind one balancer endpoint (1: one server, no balancer)';
COMMENT ON COLUMN servers.replicas IS 'independent servers of the mode served, behind its balancer (1: one server); the row''s pid, command and log are replica r0''s';
COMMENT ON COLUMN servers.balancer IS 'the balancer''s policy in front of the replicas (nginx): least-connections (least_conn) or round-robin; NULL for one server';
