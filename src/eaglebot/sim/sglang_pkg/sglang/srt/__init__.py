"""SIMULATED sglang.srt (only what a launch check reads)."""
