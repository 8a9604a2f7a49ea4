-- The load generator on a node of its own (campaign `load.client.node`). Which node
-- of a run was the client (it served nothing), and where each cell's generator ran.

ALTER TABLE nodes ADD COLUMN role VARCHAR DEFAULT 'server';   -- server | client
ALTER TABLE cells ADD COLUMN client_node VARCHAR;             -- NULL: the orchestrator's host
