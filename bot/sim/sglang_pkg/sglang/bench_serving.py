"""SIMULATED `python -m sglang.bench_serving`: the deprecated alias of sglang.benchmark.serving."""
import sys

from sglang.benchmark.serving import main

if __name__ == "__main__":
    print("`python -m sglang.bench_serving` is deprecated; use `python -m sglang.benchmark.serving` (SIMULATED)",
          file=sys.stderr)
    sys.exit(main())
