"""The performance model: what a campaign's cells should measure, before they run (docs/performance-model.md).

Pure arithmetic, in four parts that import upward in this order: a node's figures, measured (the cached
roofline) or declared from published data for hardware not at hand (`hardware`); the time of one engine
step (`step`: weights and KV bytes against the bandwidth, FLOPs against the matmul peak, the collectives a
mode adds against its links); a simulation of continuous batching over a cell's arrivals (`simulate`);
efficiency factors fitted on a run's TP=1 cells (`calibrate`) and the causes a cell far below its
prediction can be given (`flags`). `campaign` applies them to every cell of a campaign's plan and
`startup` to each mode's start-up.
"""
