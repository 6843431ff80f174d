"""SIMULATED `python -m sglang.bench_serving`: the deprecated alias of sglang.benchmark.serving."""
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # mypy checks this package as eaglebot.sim.sglang_pkg.sglang; it runs as `sglang`
    from .benchmark.serving import main
else:
    from sglang.benchmark.serving import main

if __name__ == "__main__":
    print("`python -m sglang.bench_serving` is deprecated; use `python -m sglang.benchmark.serving` (SIMULATED)",
          file=sys.stderr)
    sys.exit(main())
