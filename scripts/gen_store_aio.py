"""Write the async face of the audit store from its contract, `StoreProtocol`, so the faces
cannot drift: the methods of `AsyncStore` (the whole of bot/store/aio_methods.py, the base
class of `AsyncStore` in bot/store/aio.py) and the whole of `AsyncStoreProtocol`
(bot/store/protocol_async.py). tests/test_store_async.py checks that both are current.

    .venv/bin/python scripts/gen_store_aio.py
"""
from __future__ import annotations

import inspect
import sys
from pathlib import Path

from eaglebot.store.protocol import StoreProtocol

SKIP = {"close"}  # the async face has aclose(): it also stops the writer thread
STORE = Path(__file__).resolve().parents[1] / "bot" / "store"
# The row types and the key, imported by both generated files.
ROW_IMPORTS = '''from eaglebot.store.rows import (
    ApprovalRow, AuditHead, BaselineRow, BaselineSet, ChangeRow, EventRow, FingerprintState, HealthEventRow,
    HealthStateRow, HostStepRow, IncidentRow, LeaseRow, LifecycleStepRow, LockRow, MetricPoint, NewRun, MetricRow,
    RegressionRow, RemoteProcRow, ReplicaRow, RunRow, ScheduleFireRow, ScheduleStateRow, StaleApprovalRow, StepDataRow,
    StepRow, SweepPointRow, SweepRow, WarningRow,
)
from eaglebot.store.sealing import AuditKey'''

PROTOCOL_HEAD = '''"""The audit store's async face as a contract: `StoreProtocol`'s methods, awaited.

Written by scripts/gen_store_aio.py from store/protocol.py (do not edit): `AsyncStore` runs
the sync store on a worker thread; a backend with an async driver may implement it directly.
"""
from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Protocol, TypeVar

from eaglebot.store.protocol import StoreProtocol
@ROW_IMPORTS@

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

'''.replace("@ROW_IMPORTS@", ROW_IMPORTS)


METHODS_HEAD = '''"""The methods of `AsyncStore` (store/aio.py): every `StoreProtocol` method run on the
store's writer thread, written out (no `__getattr__` forwarding) so a reader and mypy can
follow a call from a front end to the SQL.

Written by scripts/gen_store_aio.py from store/protocol.py (do not edit).
"""
from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ParamSpec, TypeVar

@ROW_IMPORTS@

if TYPE_CHECKING:
    from eaglebot.sdk import FileChange, Metric, Regression
    from eaglebot.store.db import Store

P = ParamSpec("P")
T = TypeVar("T")


class AsyncMethods:
    """Each store call awaited; `AsyncStore` gives the store (`sync`) and the thread (`_do`)."""

    sync: Store

    async def _do(self, fn: Callable[P, T], *args: P.args, **kw: P.kwargs) -> T:
        raise NotImplementedError

'''.replace("@ROW_IMPORTS@", ROW_IMPORTS)


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
    """The contract's methods, in its order, then its parts' (store/protocol_*.py) in MRO order
    (properties and `close` have no async twin)."""
    parts = [c for c in StoreProtocol.__mro__ if c.__module__.startswith("eaglebot.store.protocol")]
    return list(dict.fromkeys(n for c in parts for n, f in c.__dict__.items()
                              if not n.startswith("_") and inspect.isfunction(f) and n not in SKIP))


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
    """The whole of store/aio_methods.py."""
    return METHODS_HEAD + "\n".join(method_source(n) for n in public_methods())


def protocol_source() -> str:
    """The whole of store/protocol_async.py."""
    return PROTOCOL_HEAD + "\n".join(_signature(n)[0] + "        ...\n" for n in public_methods())


def main() -> int:
    (STORE / "aio_methods.py").write_text(generated())
    (STORE / "protocol_async.py").write_text(protocol_source())
    return 0


if __name__ == "__main__":
    sys.exit(main())
