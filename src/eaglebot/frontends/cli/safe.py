"""Text from a host or a user made safe for a terminal. Its own module because every error
line and `eagle show` need it, and terminal.py (a run's progress) loads the engine."""
from __future__ import annotations

import re

# What a host's output may hold that a terminal would act on instead of showing: C0 controls
# but newline and tab (ESC starts every cursor, colour, title and clipboard sequence; CR
# overwrites a line), DEL, C1 controls (U+009B is a one-character CSI) and the bidirectional
# overrides that make text read other than it is (U+202A..U+202E, U+2066..U+2069).
_TERMINAL_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def terminal_safe(text: str) -> str:
    """`text` (a host's output, a summary, anything a host or a user wrote) with every character
    a terminal would act on shown as an escape (`\x1b`, `\u202e`) instead."""
    if text.isascii() and text.isprintable():
        return text
    return _TERMINAL_CONTROLS.sub(lambda m: (f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100
                                             else f"\\u{ord(m.group()):04x}"), text)
