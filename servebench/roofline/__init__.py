"""The roofline, in one place: the micro-benchmark a node runs and its figures (`benchmark`), its measurement on
every server node once an engine build is placed there (`nodes`), and the bounds a rank's share of a model puts
on a cell (`figures`). The warehouse's `cell_roofline` view joins them to each cell."""
