"""The campaign's orchestration as plain Python: the run, its deployment and release, each mode,
cell, capacity search, tuning and bisect loop, and the decisions they take in order (which modes
first, which cells, when to stop, the verdicts' calls).

It sits between the Prefect tasks (`servebench.tasks`, one call of the library each, which it calls
so Prefect tracks them) and the flows (`servebench.flows`, which only call it). What must also run
while a Ctrl-C unwinds (landing a cell, stopping a server) it calls from the library directly,
never through a task.
"""
