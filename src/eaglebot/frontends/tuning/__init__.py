"""Rendering of tuning results (text and the sweep's PNG); the algorithms are `eaglebot.tuning`."""
