"""Tuning: parameter sweeps and config bisection, each a series of audited runs (one run
per point) through the engine, recorded in the store's `sweeps`/`sweep_points` so an
interrupted sweep resumes without redoing finished points.

It sits above the engine and history in the layers (front ends > tuning > engine |
history > store | skills): DESIGN lists "front ends → engine, tuning and history", and
tuning is the one of those that runs points through the engine and reads fingerprints
from history, so it is the layer between them. Front ends only render its results
(`eaglebot.frontends.tuning`). Every entry point takes the `Engine`, which carries the
store, the settings and the skill registry a point needs.
"""
