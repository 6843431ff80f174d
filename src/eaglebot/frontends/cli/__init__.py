"""The `eagle` command line: a thin layer over the engine and the store."""
from eaglebot.frontends.cli.main import main

__all__ = ["main"]
