"""SIMULATED sglang for the eaglebot sandbox and tests: NOT the real SGLang.

Only `python -m sglang.launch_server` and `python -m sglang.bench_serving` exist; they
accept the flags of the SGLang release they simulate, print its log lines and serve its HTTP
endpoints, but no model is loaded and the numbers are made up (deterministically).

Which release: `EAGLE_SIM_SGLANG_VERSION` (one with a captured table, `srt/server_args-<v>.json.gz`:
0.5.17 or 0.5.23; default 0.5.23). `install_sim_bin(..., version=)` puts it in the `python` wrapper.
"""
from ._simulated import VERSION as __version__

SIMULATED = True
