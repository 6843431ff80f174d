"""Write the async face of the audit store from its contract, `StoreProtocol`, so the faces
cannot drift: the methods of `AsyncStore` (bot/store/aio.py, between the markers) and the
whole of `AsyncStoreProtocol` (bot/store/protocol_async.py). tests/test_store_async.py checks
that both are current.

    .venv/bin/python scripts/gen_store_aio.py
"""
from __future__ import annotations

import inspect
import sys
from pathlib import Path

from eaglebot.store.protocol import StoreProtocol

BEGIN, END = "    # -- generated from StoreProtocol: scripts/gen_store_aio.py --\n", "    # -- end of generated methods --\n"
SKIP = {"close"}  # the async face has aclose(): it also stops the writer thread
STORE = Path(__file__).resolve().parents[1] / "bot" / "store"
PROTOCOL_HEAD = '''"""The audit store's async face as a contract: `StoreProtocol`'s methods, awaited.

Written by scripts/gen_store_aio.py from store/protocol.py (do not edit): `AsyncStore` runs
the sync store on a worker thread; a backend with an async driver may implement it directly.
"""
from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Protocol, TypeVar

from eaglebot.store.protocol import StoreProtocol
from eaglebot.store.rows import (
    ApprovalRow, AuditHead, BaselineRow, BaselineSet, ChangeRow, EventRow, FingerprintState, HealthEventRow,
    HealthStateRow, HostStepRow, IncidentRow, LockRow, MetricPoint, NewRun, MetricRow, RegressionRow, RemoteProcRow, RunRow, ScheduleFireRow,
    ScheduleStateRow, StaleApprovalRow, StepRow, SweepPointRow, SweepRow, WarningRow,
)
from eaglebot.store.sealing import AuditKey

if TYPE_CHECKING:
    from eaglebot.sdk import FileChange, Metric, Regression

T = TypeVar("T")


class AsyncStoreProtocol(Protocol):
    """The audit store for the event loop: every `StoreProtocol` method as a coroutine."""

    @property
    def sync(self) -> StoreProtocol:
        """The synchronous store underneath (e.g. its `db_id`, read without a thread hop)."""
        ...

    async def call(self, fn: Callable[[StoreProtocol], T]) -> T:
        """Run `fn(store)` on the store's side: several reads that belong together at once."""
        ...

    async def aclose(self) -> None:
        """Close the store and release what runs it."""
        ...

'''


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
    """The contract's methods, in its order (properties and `close` have no async twin)."""
    return [n for n, f in StoreProtocol.__dict__.items()
            if not n.startswith("_") and inspect.isfunction(f) and n not in SKIP]


def _signature(name: str) -> tuple[str, list[str]]:
    fn = getattr(StoreProtocol, name)
    sig = inspect.signature(fn)
    parts, args, star = ["self"], [], False
    for p in list(sig.parameters.values())[1:]:
        s = p.name + (f": {p.annotation}" if isinstance(p.annotation, str) else "")
        if p.default is not p.empty:
            s += f" = {p.default!r}".replace("'", '"')
        if p.kind == p.KEYWORD_ONLY and not star:
            parts.append("*")
            star = True
        parts.append(s)
        args.append(f"{p.name}={p.name}" if p.kind == p.KEYWORD_ONLY else p.name)
    head = _pack(f"    async def {name}(", parts, f") -> {sig.return_annotation}:")
    doc = (fn.__doc__ or "").strip().splitlines()[0]
    return head + f'\n        """{doc}"""\n', args


def method_source(name: str) -> str:
    """One `AsyncStore` method: the sync call on the worker thread."""
    head, args = _signature(name)
    body = (_pack(f"        return await self._do(self.sync.{name}, ", args, ")") if args
            else f"        return await self._do(self.sync.{name})")
    return head + body + "\n"


def generated() -> str:
    """The generated part of store/aio.py."""
    return BEGIN + "\n".join(method_source(n) for n in public_methods()) + END


def protocol_source() -> str:
    """The whole of store/protocol_async.py."""
    return PROTOCOL_HEAD + "\n".join(_signature(n)[0] + "        ...\n" for n in public_methods())


def main() -> int:
    path = STORE / "aio.py"
    text = path.read_text()
    a, b = text.index(BEGIN), text.index(END) + len(END)
    path.write_text(text[:a] + generated() + text[b:])
    (STORE / "protocol_async.py").write_text(protocol_source())
    return 0


if __name__ == "__main__":
    sys.exit(main())
