"""`python -m eaglebot.cli`, kept for scripts written before the front ends moved to
`eaglebot.frontends.cli`; `python -m eaglebot` and the `eagle` command are the same."""
import sys

from eaglebot.frontends.cli.main import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
