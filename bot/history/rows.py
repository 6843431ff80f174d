"""The store's rows as the audit tables' TypedDicts (`eaglebot.store.rows`), in one place.

The store's methods say what they return; these casts say which table's row a query gives
back, so the code after them is typed. Light on purpose: `eagle history` and `show` load
it (no pydantic, numpy or jsonpatch behind it).
"""
from __future__ import annotations

from typing import Iterable, Mapping, cast

from eaglebot.store.rows import ChangeRow, IncidentRow, MetricRow, RunRow


def run_row(row: Mapping[str, object] | None) -> RunRow | None:
    return cast("RunRow | None", row)


def incident_rows(rows: Iterable[Mapping[str, object]]) -> list[IncidentRow]:
    return [cast(IncidentRow, r) for r in rows]


def metric_rows(rows: Iterable[Mapping[str, object]]) -> list[MetricRow]:
    return [cast(MetricRow, r) for r in rows]


def change_rows(rows: Iterable[Mapping[str, object]]) -> list[ChangeRow]:
    return [cast(ChangeRow, r) for r in rows]
