"""The campaign's plain data models (what a campaign file says, its cells, its nodes) and their
hashing: the bottom of the house, importing nothing of servebench above the small utilities."""
