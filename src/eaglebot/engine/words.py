"""The `/eagle` words' names, low enough for the engine to refuse them as playbook names.

The words themselves (access, help, parser, handler) are declared once, in the chat front
end's table (`frontends/chat/words.py`), which the engine may not import; that table checks
at import that its names are these.
"""
from __future__ import annotations

NAMES = ("help", "playbooks", "hosts", "history", "show", "status", "fleet", "cancel", "rerun", "logs", "schedule",
         "baseline", "trend", "reload", "diff", "bisect", "sweep", "tune", "ack")
