-- Which Python a node ran the engine build with, and why (servebench/distribution/interpreter.py):
-- an aarch64 build's own CPython placed beside the venv, the node's own python3.X, or this host's.
ALTER TABLE nodes ADD COLUMN interpreter VARCHAR;
COMMENT ON COLUMN nodes.interpreter IS 'the Python the node ran the engine build with, and why: placed (the build''s own CPython copied by digest), node (its own python3.X), shared, or the node''s file system has the build''s (docs/arm-partition.md)';
COMMENT ON COLUMN nodes.placements IS 'how the build, model, node tools and interpreter got there: [{what, path, how, digest, seconds, note, bytes (what a copy sent)}]';
