"""What every `eagle` command module needs: the config its `--config` names, and who runs it.
Nothing heavy at import time (`eagle --help` loads argparse only)."""
from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from eaglebot.config import Settings


def settings(args: argparse.Namespace) -> Settings:
    from eaglebot.config import load_settings

    return load_settings(getattr(args, "config", None))


def whoami() -> str:
    import getpass

    try:
        return getpass.getuser()
    except Exception:
        return str(os.getuid())
