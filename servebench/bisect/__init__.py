"""Bisecting an engine's commits for a regression: the search and its verdicts (`search`, pure), the campaign
each step measures (`steps`), and the run that builds, measures and lands each step (`run`)."""
