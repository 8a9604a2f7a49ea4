"""Planning, pure arithmetic before anything starts: where each rank and client goes (`placement`), how much
memory each mode needs and has (`memory`), whether a campaign can run on its nodes (`feasibility`), and the
plan's cells (`plan`)."""
