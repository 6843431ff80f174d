"""Write the async face of the audit store (bot/store/aio.py's methods) from `Store`'s
signatures, so the two faces cannot drift; tests/test_store_async.py checks that they match.

    .venv/bin/python scripts/gen_store_aio.py   # rewrites the methods between the markers
"""
from __future__ import annotations

import inspect
import sys
from pathlib import Path

from eaglebot.store.db import Store

BEGIN, END = "    # -- generated from Store: scripts/gen_store_aio.py --\n", "    # -- end of generated methods --\n"
SKIP = {"close"}


def _pack(prefix: str, items: list[str], suffix: str) -> str:
    lines, cur = [], prefix
    for i, it in enumerate(items):
        piece = it + (", " if i < len(items) - 1 else "")
        if len(cur) + len(piece.rstrip()) > 106 and cur.strip():
            lines.append(cur.rstrip())
            cur = " " * 12 + piece
        else:
            cur += piece
    return "\n".join([*lines, cur + suffix])


def public_methods() -> list[str]:
    return [n for n, f in Store.__dict__.items() if not n.startswith("_") and callable(f) and n not in SKIP]


def method_source(name: str) -> str:
    fn = getattr(Store, name)
    params = list(inspect.signature(fn).parameters.values())[1:]
    parts, args, star = ["self"], [], False
    for p in params:
        s = p.name + (f": {p.annotation}" if isinstance(p.annotation, str) else "")
        if p.default is not p.empty:
            s += f" = {p.default!r}".replace("'", '"')
        if p.kind == p.KEYWORD_ONLY and not star:
            parts.append("*")
            star = True
        parts.append(s)
        args.append(f"{p.name}={p.name}" if p.kind == p.KEYWORD_ONLY else p.name)
    ret = inspect.signature(fn).return_annotation
    head = _pack(f"    async def {name}(", parts, f") -> {ret}:")
    doc = (fn.__doc__ or "").strip().splitlines()
    body = (_pack(f"        return await self._do(self.sync.{name}, ", args, ")") if args
            else f"        return await self._do(self.sync.{name})")
    return head + "\n" + (f'        """{doc[0]}"""\n' if doc and len(doc[0]) < 96 else "") + body + "\n"


def generated() -> str:
    return BEGIN + "\n".join(method_source(n) for n in public_methods()) + END


def main() -> int:
    path = Path(__file__).resolve().parents[1] / "bot" / "store" / "aio.py"
    text = path.read_text()
    a, b = text.index(BEGIN), text.index(END) + len(END)
    path.write_text(text[:a] + generated() + text[b:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
