-- The host key an SSH node was reached by: the fingerprints the known_hosts file holds for it, which
-- the connection was checked against (`host_keys: check`, or what `accept-new` recorded on first use).
ALTER TABLE nodes ADD COLUMN host_key VARCHAR;
COMMENT ON COLUMN nodes.host_key IS 'SSH nodes: the host key fingerprints (type and SHA256) known_hosts holds for the host, which its connection was checked against; NULL for nodes reached otherwise';
