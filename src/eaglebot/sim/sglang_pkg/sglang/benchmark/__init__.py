"""SIMULATED sglang.benchmark (eaglebot sandbox)."""
