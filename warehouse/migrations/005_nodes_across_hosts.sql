-- Nodes on other hosts. Each node's wall clock against the orchestrator's (its
-- telemetry is landed in the orchestrator's time base with it), how the engine build, the
-- model and the node tools got there (shared file system, already present by digest, or
-- copied and verified), and the provider's allocation (a Slurm job id and node list).

ALTER TABLE nodes ADD COLUMN clock_offset_s DOUBLE;   -- node wall clock minus the orchestrator's; NULL: the same host
ALTER TABLE nodes ADD COLUMN placements JSON;         -- [{what, path, how, digest, seconds}]
ALTER TABLE runs ADD COLUMN provider_kind VARCHAR;
ALTER TABLE runs ADD COLUMN allocation JSON;          -- what the provider allocated (slurm: job id, node list)

-- The network as a sweep axis (campaign `network:`): the link setting a cell ran under; part
-- of its series identity. NULL for campaigns without the axis.
ALTER TABLE cells ADD COLUMN link VARCHAR;            -- plain | d5ms | r100mbit | d1ms-r100mbit
ALTER TABLE cells ADD COLUMN link_delay_ms DOUBLE;    -- one way, on each chosen host's link
ALTER TABLE cells ADD COLUMN link_rate_mbit DOUBLE;   -- each direction; NULL: no cap
