-- Builds for a target CPU (cross-compiled for aarch64 and run under emulation, or for an
-- x86-64 level), and which build each server ran. The build key's parts as columns, so a result
-- row traces to the compiler, the flags and the source it was built from (`inputs` keeps them all).

ALTER TABLE builds ADD COLUMN target VARCHAR;           -- profile name (graviton2, x86-64-v3, ...); NULL: the host's
ALTER TABLE builds ADD COLUMN arch VARCHAR;             -- what the binaries run on (aarch64, x86_64)
ALTER TABLE builds ADD COLUMN compiler VARCHAR;         -- 'aarch64-linux-gnu-g++ GNU 12.2.0'
ALTER TABLE builds ADD COLUMN compiler_flags VARCHAR[]; -- the target's flags ('-march=armv8.2-a+dotprod+fp16+rcpc')
ALTER TABLE builds ADD COLUMN source_digest VARCHAR;    -- sha256 of the source (the sdist)
ALTER TABLE builds ADD COLUMN artifact_sha256 VARCHAR;  -- sha256 over the artifact's files and their sha256
ALTER TABLE servers ADD COLUMN build_key VARCHAR;       -- the build this mode's server ran (modes may differ)
