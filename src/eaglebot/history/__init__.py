"""History: regressions, fingerprints and attribution, trends, and the one view of a run (pure over store rows)."""
