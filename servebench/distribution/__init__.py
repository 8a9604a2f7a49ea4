"""Distribution to nodes: the engine build, the model, the node tools and the load generator's tree
placed at the same path on every node, checked there."""
