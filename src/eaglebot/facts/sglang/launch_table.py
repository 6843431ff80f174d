"""Would SGLang's own parser accept a launch command? Asked of the host's SGLang first (a read-only
probe builds the parser exactly as `launch_server` does and parses the planned arguments without
launching), else of the captured table of that version (`data/sglang-<version>-server_args.json.gz`,
made from the real wheel by scripts/capture/sglang.sh; tests/fixtures/sglang/<version>/ holds the same).

argparse's own rules decide either way: a unique prefix is accepted, a prefix of two options is
refused (`ambiguous option: --cuda-graph-bs could match --cuda-graph-bs-decode,
--cuda-graph-bs-prefill`), as are unknown options and ill-typed values; all exit 2 in SGLang.
"""
from __future__ import annotations

import argparse
import gzip
import json
import shlex
from dataclasses import dataclass
from importlib import resources
from typing import Callable

PROG = "launch_server.py"   # argparse's prog under `python -m sglang.launch_server`
PROBE_OK = "EAGLE-LAUNCH-CHECK-OK"
PROBE_VERSION = "EAGLE-LAUNCH-CHECK-VERSION"
PROBE_NO_IMPORT = "EAGLE-LAUNCH-CHECK-NO-SGLANG"
PROBE_UNAVAILABLE = "EAGLE-LAUNCH-CHECK-UNAVAILABLE"
PROBE_INSTALLED = "EAGLE-LAUNCH-CHECK-INSTALLED"
# Run with the host's Python: only parsing, nothing loads a model or touches a GPU. `import sglang`
# first: where it fails, `python -m sglang.launch_server` would fail the same way after the old
# server was stopped, so that is a refusal (the release its metadata names is said, without
# importing it). Where sglang imports but its parser cannot be built here (a module that moved in
# another release), the captured table of the release that answered is the check.
PROBE = f"""import argparse, sys
def first_line(e):
    return ("%s: %s" % (type(e).__name__, e)).splitlines()[0][:300]
try:
    import sglang
except Exception as e:
    try:
        import importlib.metadata as m; print("{PROBE_INSTALLED} %s" % m.version("sglang"))
    except Exception:
        pass
    print("{PROBE_NO_IMPORT} %s" % first_line(e)); sys.exit(4)
v = getattr(sglang, "__version__", None)
if not v:
    try:
        import importlib.metadata as m; v = m.version("sglang")
    except Exception:
        v = "?"
print("{PROBE_VERSION} %s" % v, flush=True)
try:
    from sglang.srt.server_args import ServerArgs
    p = argparse.ArgumentParser(prog="{PROG}"); ServerArgs.add_cli_args(p)
except Exception as e:
    print("{PROBE_UNAVAILABLE} %s" % first_line(e)); sys.exit(3)
p.parse_args(sys.argv[1:])
print("{PROBE_OK} %s" % v)
"""
# Where the probe did not finish (an import that takes minutes on a slow shared filesystem): is
# sglang there at all? Its metadata says, without importing it.
INSTALLED_PY = f"""import importlib.metadata as m
try:
    print("{PROBE_INSTALLED} %s" % m.version("sglang"))
except Exception as e:
    print("{PROBE_NO_IMPORT} %s: %s" % (type(e).__name__, e))
"""


def probe_command(python: str, args: list[str]) -> str:
    return shlex.join([python, "-c", PROBE, *args])


def installed_command(python: str) -> str:
    return shlex.join([python, "-c", INSTALLED_PY])


@dataclass
class Verdict:
    """`ok`: the parser accepts the arguments; `refused`: SGLang's error line; `missing`: the host's
    Python cannot import sglang (why); `unavailable`: sglang is there but its parser could not be
    asked (why)."""

    kind: str
    message: str = ""
    version: str | None = None
    source: str = "host"     # "host" (its own parser) or "table <version>" (the captured one)


def _marked(stdout: str, mark: str) -> str | None:
    for line in stdout.splitlines():
        if line.startswith(mark + " ") or line == mark:
            return line[len(mark):].strip()
    return None


def parse_probe(exit_status: int, stdout: str, stderr: str) -> Verdict:
    """The probe's verdict. No mark at all (the Python is not there, or not a Python): `missing`."""
    version = _marked(stdout, PROBE_VERSION) or None
    installed = _marked(stdout, PROBE_INSTALLED) or None
    ok = _marked(stdout, PROBE_OK)
    if ok is not None:
        return Verdict("ok", version=ok or version)
    no_import = _marked(stdout, PROBE_NO_IMPORT)
    if no_import is not None:
        return Verdict("missing", no_import, version=installed)
    unavailable = _marked(stdout, PROBE_UNAVAILABLE)
    if unavailable is not None:
        return Verdict("unavailable", unavailable, version=version or installed)
    errors = [ln for ln in stderr.splitlines() if ln.startswith(f"{PROG}: error:")]
    if exit_status == 2 and errors:
        return Verdict("refused", errors[-1], version=version)
    last = (stderr.strip() or stdout.strip()).splitlines()[-1:] or [f"exit status {exit_status}"]
    if version is not None:   # sglang imported, then the parse itself crashed
        return Verdict("unavailable", last[0][:300], version=version)
    return Verdict("missing", last[0][:300])


def parse_installed(stdout: str) -> str | None:
    """The release INSTALLED_PY found, or None when sglang is not installed for that Python."""
    return _marked(stdout, PROBE_INSTALLED) or None


# -- the captured table ----------------------------------------------------------------------

class Refused(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise Refused(f"{self.prog}: error: {message}")


def _human_readable_int(value: str) -> int:
    v = value.strip()
    for suffix, mult in (("Ki", 2**10), ("Mi", 2**20), ("Gi", 2**30), ("Ti", 2**40)):
        if v.endswith(suffix):
            return int(v[:-2]) * mult
    for suffix, mult in (("k", 10**3), ("M", 10**6), ("G", 10**9), ("T", 10**12)):
        if v.endswith(suffix):
            return int(float(v[:-1]) * mult)
    return int(v)


def _json(value: str) -> object:
    try:
        return json.loads(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"Invalid JSON: {value}") from None


# SGLang's own converters by name (sglang/srt/utils/common.py); the two cuda-graph spec parsers take a string.
TYPES: dict[str, Callable[[str], object]] = {
    "str": str, "int": int, "float": float, "loads": _json, "json_list_type": _json,
    "human_readable_int": _human_readable_int, "nullable_str": str,
    "parse_cuda_graph_backend_arg": str, "parse_cuda_graph_config_arg": str}


def table_file(version: str) -> str:
    return f"sglang-{version}-server_args.json.gz"


def has_table(version: str) -> bool:
    return resources.files("eaglebot.facts").joinpath("data", table_file(version)).is_file()


def launch_parser(version: str) -> argparse.ArgumentParser:
    """SGLang `version`'s launch parser rebuilt from its captured table (every option, alias, nargs,
    type and choice; actions mapped to argparse's own)."""
    raw = resources.files("eaglebot.facts").joinpath("data", table_file(version)).read_bytes()
    rows = json.loads(gzip.decompress(raw))["options"]
    p = _Parser(prog=PROG)
    for row in rows:
        action = row["action"]
        if action == "_HelpAction":
            continue
        kw: dict[str, object] = {"dest": row["dest"], "default": row["default"]}
        if action in ("_StoreTrueAction", "DeprecatedStoreTrueAction"):
            kw["action"] = "store_true"
        elif action == "DeprecatedStoreConstAction":
            kw.update(action="store_const", const=True)
        elif action == "DeprecatedAction":   # 0.5.17: a retired flag that takes no value and sets nothing
            kw.update(action="store_const", const=row["default"])
        elif action == "BooleanOptionalAction":
            kw["action"] = argparse.BooleanOptionalAction
        else:
            if row["nargs"] is not None:
                kw["nargs"] = row["nargs"]
            if row["type"] in TYPES:
                kw["type"] = TYPES[row["type"]]
            if row["choices"] is not None:
                kw["choices"] = row["choices"]
        p.add_argument(*row["options"], **kw)  # type: ignore[arg-type]
    return p


def check_with_table(args: list[str], version: str) -> Verdict:
    try:
        launch_parser(version).parse_args(args)
    except Refused as e:
        return Verdict("refused", str(e), version, f"table {version}")
    return Verdict("ok", version=version, source=f"table {version}")


# -- `eagle doctor`'s question: which Python, and does it import sglang ---------------------

IMPORT_PY = """import sys
print("PYTHON %s" % sys.version.split()[0], flush=True)
try:
    import sglang
    print("SGLANG %s" % (getattr(sglang, "__version__", None) or "?"))
except Exception as e:
    print("NO-SGLANG %s" % ("%s: %s" % (type(e).__name__, e)).splitlines()[0][:300])
"""


@dataclass(frozen=True)
class Imported:
    """What IMPORT_PY printed: the Python's version, and sglang's (or why it does not import)."""

    python: str | None
    sglang: str | None
    error: str | None


def parse_import(stdout: str) -> Imported:
    return Imported(_marked(stdout, "PYTHON") or None, _marked(stdout, "SGLANG") or None,
                    _marked(stdout, "NO-SGLANG") or None)
