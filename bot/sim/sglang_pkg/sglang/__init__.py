"""SIMULATED sglang for the eaglebot sandbox and tests: NOT the real SGLang.

Only `python -m sglang.launch_server` and `python -m sglang.bench_serving` exist; they
accept SGLang 0.5.23's flags, print its log lines and serve its HTTP endpoints, but no
model is loaded and the numbers are made up (deterministically).
"""
__version__ = "0.5.23"
SIMULATED = True
