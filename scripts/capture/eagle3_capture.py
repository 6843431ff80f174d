"""Write src/eaglebot/facts/data/eagle3-capture-<version>.json from the REAL SGLang source (run by
scripts/capture/eagle3.sh, by hand; CI checks the shipped tables against the real wheel instead).

    .venv/bin/python scripts/capture/eagle3_capture.py SGLANG_ROOT OUT.json

SGLANG_ROOT is the `sglang` folder of an unpacked wheel (no install, no torch: the probe reads the
source). For every architecture some model file names in its EntryClass, eaglebot's own host
program (`eagle3.probe_program()`, the one `draft.check` sends to a host) runs the real
`set_eagle3_layers_to_capture` on a grid of id lists and layer counts; each architecture is then
fitted to one of the rules in `eagle3.GIVEN` (given ids), a default of `eagle3.eval_term` terms and
a flag mode, and a fit is kept only if it reproduces EVERY run of the grid. An architecture no rule
fits is recorded with `given: null` (draft.check then says it cannot resolve it without the host).
"""
from __future__ import annotations

import json
import sys
import time
from typing import Any

from eaglebot.facts.spec import eagle3

GRID_N = (36, 61, 62, 80)
GRID_IDS: list[list[int]] = [[2, 30, 58], [-1, 2, 30], [1, 30, 58], [1, 29, 57], [0, 5, 9], [3, 10, 20],
                             [2, 30, 61], [2, 30, 62], [5, 5, 9], [-2, 3, 4], [1], [], [60, 61], [35, 36],
                             [79, 80], [2, 18, 33], [1, 17, 32]]


def fit_default(runs: dict[int, list[int] | None]) -> list[str] | None:
    """Per element: a constant, `N//2+c` or `N+c` that gives every layer count's value."""
    lists = list(runs.values())
    if any(v is None for v in lists) or len({len(v or []) for v in lists}) != 1:
        return None
    terms: list[str] = []
    for pos in range(len(lists[0] or [])):
        vals = {n: (runs[n] or [])[pos] for n in runs}
        found = None
        for make in (lambda c: str(c), lambda c: f"N//2{c:+d}" if c else "N//2", lambda c: f"N{c:+d}" if c else "N"):
            for c in range(-8, 9):
                term = make(c)
                if term.lstrip("-").isdigit() and int(term) < 0:
                    continue
                if all(eagle3.eval_term(term, n) == v for n, v in vals.items()):
                    found = term
                    break
            if found:
                break
        if found is None:
            return None
        terms.append(found)
    return terms


def fit_arch(probe: Any, root: Any, arch: str) -> dict[str, Any]:
    cases: list[list[int] | None] = [None, *GRID_IDS]
    per_n = {n: probe([arch], n, cases, root) for n in GRID_N}
    first = per_n[GRID_N[0]]
    row: dict[str, Any] = {"module": first.get("module"), "method": first.get("method"), "error": first.get("error"),
                           "forward": first.get("forward") or {}}
    if first.get("error"):
        return {"module": row["module"], "error": row["error"]}
    holders = {c.get("holder_class") for doc in per_n.values() for c in doc["cases"]}
    row["holder_class"] = sorted(h for h in holders if h)[0] if any(holders) else None
    row["default"] = fit_default({n: doc["cases"][0]["raw"] for n, doc in per_n.items()})
    observed = [(n, c) for n, doc in per_n.items() for c in doc["cases"][1:]]
    row["given"] = next((name for name, rule in eagle3.GIVEN.items()
                         if all(c["raw"] == rule(list(c["ids"]), n) for n, c in observed)), None)
    row["flags"] = None
    for mode in ("none", "index", "guarded"):
        ok = True
        for n, doc in per_n.items():
            for c in doc["cases"]:
                if c["raw"] is None:
                    ok = ok and c["error"] is not None
                    continue
                flags, err = eagle3.flag_layers(c["raw"], n, mode)
                ok = ok and flags == c["flags"] and (err is None) == (c["error"] is None)
        if ok:
            row["flags"] = mode
            break
    if row["flags"] is None or row["default"] is None:
        row["given"] = None
    return row


def main(root: str, out_path: str) -> int:
    ns: dict[str, Any] = {"__name__": "eagle3_probe_capture"}
    exec(compile(eagle3.probe_program(), "eagle3_probe", "exec"), ns)
    src = ns["Source"](root)
    t0 = time.monotonic()
    archs = sorted(ns["entry_modules"](src))
    version = ns["version"](src)
    table: dict[str, Any] = {"sglang": version, "made_with": "scripts/capture/eagle3_capture.py (eagle3.probe_program "
                             f"over the sglang-{version} wheel, grid N={list(GRID_N)}, {len(GRID_IDS) + 1} id lists)",
                             "reader": ns["find_reader"](src), "archs": {}}
    unfitted = []
    for arch in archs:
        probe = ns["probe"]([arch], 61, [None], src)
        if probe.get("arch") != arch:
            continue  # an EntryClass name that is no class of that name
        row = fit_arch(ns["probe"], src, arch)
        table["archs"][arch] = row
        if not row.get("error") and row.get("given") is None:
            unfitted.append(arch)
    with open(out_path, "w") as f:
        json.dump(table, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"{len(table['archs'])} architectures of SGLang {version} in {time.monotonic() - t0:.1f}s; "
          f"unfitted: {', '.join(unfitted) or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
