"""Benchmark facts: is a result worth recording, are greedy outputs what the reference gave."""
