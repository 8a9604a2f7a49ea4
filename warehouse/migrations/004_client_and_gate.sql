-- Where the load generator ran and how busy it was, and the gate's divergences.
-- A generator that shares cores with the server, or is itself near a full core, measures
-- itself: each cell records its CPUs, nice value and CPU time over wall time (1.0 = one core).

ALTER TABLE cells ADD COLUMN client_cpus VARCHAR;           -- CPU list the generator was pinned to
ALTER TABLE cells ADD COLUMN client_nice INTEGER;           -- its nice value (negative: raised priority)
ALTER TABLE cells ADD COLUMN client_cpu_fraction DOUBLE;    -- generator CPU seconds / wall seconds of the cell

-- Where greedy answers first part from the TP=1 reference, per prompt: position, tokens and
-- the logprob gap there (status 'close'), as JSON; 'unchecked' when no reference could be made.
ALTER TABLE servers ADD COLUMN correctness_divergences JSON;
