"""Write the audit store's faces from the one place its methods are written: the mixins.

Each aggregate mixin of `Store` (store/runs.py, steps.py, ... and StoreBase) is the only
hand-written signature and docstring of its methods. From them this writes, so no face can
drift from the code:
- store/protocol.py and store/protocol_service.py: one Protocol per mixin (`RunsFace`,
  `StepsFace`, ...: the slices a caller is typed with), the consumers' slices made of them
  (`SLICES` below: `RunLog`, `EngineStore`, `HistoryStore`, ...), and `StoreProtocol`, all of them;
- store/protocol_async.py and protocol_async_service.py: the same, awaited (`AsyncRunsFace`,
  ..., `AsyncRunLog`, ..., `AsyncStoreProtocol`);
- store/aio_methods.py: `AsyncStore`'s methods, each the sync call on the writer thread.
tests/test_store_async.py checks that all five are current.

    .venv/bin/python scripts/gen_store_aio.py
"""
from __future__ import annotations

import inspect
import sys
import textwrap
from pathlib import Path

from eaglebot.store.db import Store

SKIP = {"close"}  # the async face has aclose(): it also stops the writer thread
STORE = Path(__file__).resolve().parents[1] / "bot" / "store"
# The mixins' own aggregate faces live in protocol.py, except these (the service's state and
# the audit administration), in protocol_service.py: one module each stays under 500 lines.
SERVICE = ("ReplicasMixin", "SchedulesMixin", "HealthMixin", "SweepsMixin", "MaintenanceMixin")
# Who uses which faces: each caller is typed with its slice (or, where one face covers it, that
# face), never the whole store; tests/test_architecture.py finds any annotation outside the store
# that names the whole (`StoreProtocol`, `AsyncStoreProtocol`, `Store`, `AsyncStore`) and is not
# one of the places that open it. A slice is made of the faces its consumer's calls reach,
# including what it hands the store to (an async slice's `call` hands its function the same slice).
SLICES = {
    "RunLog": ("What a run writes and reads back as it goes (the engine): the run, its steps and "
               "what they leave, approvals and events, host locks and the processes a step started.",
               ["Base", "Runs", "Steps", "Approvals", "Locks"]),
    "EngineStore": ("What the engine holds (`Engine.store`): the run's log (`RunLog`), the health guard's "
                    "reads, the skills' `AuditView` (trends), and what it hands its store to: the post-run "
                    "hooks (history's judgement and incidents, the fleet's health) and the tuning it runs "
                    "(sweeps).",
                    ["Base", "Runs", "Steps", "Approvals", "Locks", "Trends", "Incidents", "Health", "Sweeps"]),
    "HistoryStore": ("What history reads and records (regressions, incidents, baselines, fingerprints, "
                     "trends, the warnings and events it leaves) and what the views of a run read.",
                     ["Runs", "Steps", "Trends", "Incidents", "Approvals"]),
    "ScheduleReads": ("What the schedules' view reads (`/eagle schedule`, `eagle schedule list`): each "
                      "schedule's last run, its fires and its pause.",
                      ["Runs", "Schedules"]),
    "SchedulerStore": ("What `eagle serve`'s scheduler reads and writes: the fires, their claims among the "
                       "replicas and the pauses, each schedule's runs and what its report reads of them "
                       "(history's reads: the run's view, its trends), and the audit head it posts.",
                       ["Runs", "Steps", "Trends", "Incidents", "Approvals", "Schedules", "Replicas",
                        "Maintenance"]),
    "MetricsReads": ("What `/metrics` reads of the store at each scrape: the open incidents, the "
                     "quarantined GPUs and hosts, and the latest bench results per host.",
                     ["Incidents", "Health", "Trends"]),
    "ServiceState": ("What `eagle serve` keeps (schedules and their fires, the replicas' lease and "
                     "heartbeats, Slack's seen requests, the health watch and the events it writes, sweeps).",
                     ["Schedules", "Replicas", "Health", "Sweeps", "Approvals"]),
    "AuditAdmin": ("The audit trail's administration: verify, head, backup, prune, writability.",
                   ["Base", "Maintenance"]),
}
# No async twin: every caller reaches its slice through the door (store/door.py: `Door[RunLog]`, ...).
SYNC_ONLY = set(SLICES)

ROW_IMPORTS = '''from eaglebot.store.rows import (
    ApprovalRow, AuditHead, BaselineRow, BaselineSet, ChangeRow, EventRow, FingerprintState, HealthEventRow,
    HealthStateRow, HostStepRow, IncidentRow, LatestMetric, LeaseRow, LifecycleStepRow, LockRow, MetricPoint, NewRun,
    MetricRow,
    RegressionRow, RemoteProcRow, ReplicaRow, RunRow, ScheduleFireRow, ScheduleStateRow, StaleApprovalRow, StepDataRow,
    StepEnd, StepRow, SweepPointRow, SweepRow, WarningRow,
)
from eaglebot.store.sealing import AuditKey'''
TYPES_HEAD = '''from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Protocol, TypeVar

@ROW_IMPORTS@

if TYPE_CHECKING:  # the engine's records (the sdk loads pydantic: `eagle history` does not)
    from eaglebot.sdk import FileChange, Metric, Regression
'''.replace("@ROW_IMPORTS@", ROW_IMPORTS)
NOTE = "Written by scripts/gen_store_aio.py from the store's mixins (do not edit)."


def mixins() -> list[type]:
    """The aggregate mixins of `Store`, in its MRO order, StoreBase last."""
    return [c for c in Store.__mro__[1:] if c.__module__.startswith("eaglebot.store.") and c is not object]


def face_name(mixin: type) -> str:
    return mixin.__name__.removesuffix("Mixin").replace("StoreBase", "Base")


def members(mixin: type) -> list[str]:
    return [n for n, f in mixin.__dict__.items()
            if not n.startswith("_") and (inspect.isfunction(f) or isinstance(f, property))]


def public_methods() -> list[str]:
    """Every method of the contract (properties and `close` have no async twin)."""
    return [n for m in mixins() for n in members(m)
            if n not in SKIP and inspect.isfunction(m.__dict__[n])]


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


def _doc(obj: object, full: bool) -> str:
    doc = inspect.cleandoc(getattr(obj, "__doc__", None) or "")
    if not full:
        return doc.splitlines()[0] if doc else ""
    return "\n        ".join(doc.splitlines()).replace("\n        \n", "\n\n")


def _signature(fn: object, name: str, prefix: str, full: bool) -> tuple[str, list[str]]:
    sig = inspect.signature(fn)  # type: ignore[arg-type]
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
    head = _pack(f"    {prefix}def {name}(", parts, f") -> {sig.return_annotation}:")
    return head + f'\n        """{_doc(fn, full)}"""\n', args


def _stub(mixin: type, name: str, is_async: bool) -> str:
    f = mixin.__dict__[name]
    if isinstance(f, property):
        ret = inspect.signature(f.fget).return_annotation  # type: ignore[arg-type]
        return (f"    @property\n    def {name}(self) -> {ret}:\n"
                f'        """{_doc(f, not is_async)}"""\n        ...\n')
    head, _ = _signature(f, name, "async " if is_async else "", not is_async)
    return head + "        ...\n"


def _face(mixin: type, is_async: bool) -> str:
    pre = "Async" if is_async else ""
    names = [n for n in members(mixin)
             if not (is_async and (n in SKIP or isinstance(mixin.__dict__[n], property)))]
    body = "\n".join(_stub(mixin, n, is_async) for n in names)
    return (f"class {pre}{face_name(mixin)}Face(Protocol):\n"
            f'    """{_doc(mixin, False)} ({mixin.__module__.replace("eaglebot.", "")})"""\n\n{body}')


def _composite(name: str, doc: str, faces: list[str], is_async: bool) -> str:
    pre = "Async" if is_async else ""
    bases = ", ".join(f"{pre}{f}Face" for f in faces)
    text = "\n    ".join(textwrap.wrap(doc, 96))
    return _pack(f"class {pre}{name}(", [*bases.split(", "), "Protocol"], "):") + f'\n    """{text}"""\n'


def _slices(is_async: bool) -> str:
    # An async slice's `call` hands its function the same slice, synchronous: several reads
    # that belong together stay within what the caller may use.
    call = ('\n    @property\n    def sync(self) -> {0}:\n        """The synchronous store underneath, as this '
            'slice."""\n        ...\n\n'
            '    async def call(self, fn: Callable[[{0}], T]) -> T:\n        """Run `fn(store)` on the '
            'store\'s side: several reads that belong together at once."""\n        ...\n')
    return "\n\n".join(_composite(n, d, f, is_async) + (call.format(n) if is_async else "")
                         for n, (d, f) in SLICES.items() if not (is_async and n in SYNC_ONLY))


def _module(doc: str, is_async: bool, service: bool) -> str:
    """One generated faces module: the faces of the service's mixins (`service`), or the others
    with the consumers' slices and the whole-store protocol, which import the service's faces."""
    pre = "Async" if is_async else ""
    every = [face_name(m) for m in mixins()]
    typing = "TYPE_CHECKING, Any, Callable, Protocol, TypeVar" if is_async and not service else "TYPE_CHECKING, Any, Protocol"
    imports = TYPES_HEAD.replace("TYPE_CHECKING, Any, Callable, Protocol, TypeVar", typing)
    if not service:
        names = [pre + face_name(m) + "Face" for m in mixins() if m.__name__ in SERVICE]
        mod = "protocol_async_service" if is_async else "protocol_service"
        extra = _pack(f"from eaglebot.store.{mod} import (", names, ")")
        if is_async:
            synced = sorted(n for n in SLICES if n not in SYNC_ONLY)
            extra += "\n" + _pack("from eaglebot.store.protocol import (", [*synced, "StoreProtocol"], ")")
        imports = imports.replace("\nif TYPE_CHECKING:", extra + "\n\nif TYPE_CHECKING:")
        if is_async:
            imports += '\nT = TypeVar("T")\n'
    faces = "\n\n".join(_face(m, is_async) for m in mixins() if (m.__name__ in SERVICE) == service)
    out = f'"""{doc}\n\n{NOTE}\n"""\n{imports}\n\n{faces}'
    if service:
        return out
    store = _composite("StoreProtocol", "The audit store for the event loop: every `StoreProtocol` method as a "
                       "coroutine." if is_async else "The audit store, synchronous: each call is one transaction "
                       "(writes) or one read.", every, is_async)
    if is_async:
        store += ('\n    @property\n    def sync(self) -> StoreProtocol:\n        """The synchronous store '
                  'underneath (e.g. its `db_id`, read without a thread hop)."""\n        ...\n\n'
                  '    async def call(self, fn: Callable[[StoreProtocol], T]) -> T:\n        """Run `fn(store)` '
                  'on the store\'s side: several reads that belong together at once."""\n        ...\n\n'
                  '    async def aclose(self) -> None:\n        """Close the store and release what runs it."""\n'
                  '        ...\n')
    return f"{out}\n\n{_slices(is_async)}\n\n{store}"


def protocol_source() -> str:
    """The whole of store/protocol.py."""
    return _module("The audit store's contract, synchronous (the CLI; SQLite's and PostgreSQL's `Store`):\n"
                   "one Protocol per aggregate mixin (the service's in store/protocol_service.py), the\n"
                   "consumers' slices made of them, and `StoreProtocol`, all of them. Rows come back as the\n"
                   "TypedDicts of store/rows.py, whatever the backend. mypy checks that `Store` and\n"
                   "`AsyncStore` satisfy them (store/aio.py); tests/store_contract.py checks the behaviour\n"
                   "any backend must have.", False, False)


def service_source() -> str:
    """The whole of store/protocol_service.py."""
    return _module("The audit store's contract, synchronous: the faces of the service's state and the audit\n"
                   "administration (store/protocol.py has the rest and `StoreProtocol`).", False, True)


def async_protocol_source() -> str:
    """The whole of store/protocol_async.py."""
    return _module("The audit store's async faces: each face of store/protocol.py, awaited (the bot;\n"
                   "`AsyncStore` runs the sync store on a worker thread; a backend with an async driver may\n"
                   "implement them directly). The service's faces are in store/protocol_async_service.py.",
                   True, False)


def async_service_source() -> str:
    """The whole of store/protocol_async_service.py."""
    return _module("The audit store's async faces of the service's state and the audit administration\n"
                   "(store/protocol_async.py has the rest and `AsyncStoreProtocol`).", True, True)


METHODS_HEAD = f'''"""The methods of `AsyncStore` (store/aio.py): every store method run on the store's
writer thread, written out (no `__getattr__` forwarding) so a reader and mypy can follow a
call from a front end to the SQL.

{NOTE}
"""
from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ParamSpec, TypeVar

{ROW_IMPORTS}

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

'''


def method_source(name: str) -> str:
    """One `AsyncStore` method: the sync call on the worker thread."""
    owner = next(m for m in mixins() if name in m.__dict__)
    head, args = _signature(owner.__dict__[name], name, "async ", False)
    body = (_pack(f"        return await self._do(self.sync.{name}, ", args, ")") if args
            else f"        return await self._do(self.sync.{name})")
    return head + body + "\n"


def generated() -> str:
    """The whole of store/aio_methods.py."""
    return METHODS_HEAD + "\n".join(method_source(n) for n in public_methods())


FILES = {"protocol.py": protocol_source, "protocol_service.py": service_source,
         "protocol_async.py": async_protocol_source, "protocol_async_service.py": async_service_source,
         "aio_methods.py": generated}


def main() -> int:
    for name, make in FILES.items():
        (STORE / name).write_text(make())
    return 0


if __name__ == "__main__":
    sys.exit(main())
