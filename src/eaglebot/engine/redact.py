"""Secrets never reach the audit store, the terminal or Slack."""
from __future__ import annotations

import os
import re
from typing import Any

MASK = "***"
# Values of these environment variables are secrets wherever they appear.
_SECRET_ENV = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|PRIVATE_KEY|CREDENTIAL)", re.I)
_BUILTIN = [
    r"xox[abprs]-[A-Za-z0-9-]{10,}",     # Slack bot/user tokens
    r"xapp-[A-Za-z0-9-]{10,}",           # Slack app-level tokens
    r"hf_[A-Za-z0-9]{20,}",              # Hugging Face tokens
    # The same tokens cut short (a skill that shortens a line before the engine redacts it
    # must not leak the first 19 characters): a run of 8+ with a digit and a capital.
    r"(?:xox[abprs]-|xapp-|hf_)(?=[A-Za-z0-9-]*[0-9])(?=[A-Za-z0-9-]*[A-Z])[A-Za-z0-9-]{8,}",
]
_PREFIX = 8  # a secret's first characters that already count as the secret


class Redactor:
    def __init__(self, patterns: list[str] | None = None, environ: dict[str, str] | None = None):
        env = os.environ if environ is None else environ
        self.patterns = [re.compile(p) for p in [*_BUILTIN, *(patterns or [])]]
        self.literals = sorted(
            {v for k, v in env.items() if _SECRET_ENV.search(k) and len(v) >= 8}, key=len, reverse=True)

    def text(self, s: str) -> str:
        if not s:
            return s
        for lit in self.literals:
            s = _mask_literal(s, lit)
        for p in self.patterns:
            s = p.sub(MASK, s)
        return s

    def obj(self, v: Any) -> Any:
        if isinstance(v, str):
            return self.text(v)
        if isinstance(v, dict):
            return {k: (MASK if isinstance(k, str) and _SECRET_ENV.search(k) and isinstance(val, str) and val
                        else self.obj(val)) for k, val in v.items()}
        if isinstance(v, (list, tuple)):
            return [self.obj(x) for x in v]
        return v


def _mask_literal(s: str, lit: str) -> str:
    """Mask every occurrence of `lit`, and of any prefix of it at least _PREFIX long (the
    secret cut short by a truncation)."""
    head = lit[:_PREFIX]
    i = s.find(head)
    while i != -1:
        n = len(head)
        while n < len(lit) and i + n < len(s) and s[i + n] == lit[n]:
            n += 1
        s = s[:i] + MASK + s[i + n:]
        i = s.find(head, i + len(MASK))
    return s
