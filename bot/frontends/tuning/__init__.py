"""Tuning above the engine: parameter sweeps and config bisection, each a series of audited
runs (one run per point), recorded in the store's `sweeps`/`sweep_points` so an
interrupted sweep resumes without redoing finished points."""
