"""SIMULATED `sglang.srt.server_args`: `ServerArgs.add_cli_args(parser)` builds the REAL launch parser
of the simulated release from its captured table (`server_args-<version>.json.gz` beside this file, a
copy of tests/fixtures/sglang/<version>/server_args.json.gz made by scripts/capture/sglang.sh from the
real wheel; a test keeps them identical). So every option, alias, nargs, choice and default is SGLang's, and
argparse's own abbreviation rules apply: `--cuda-graph-bs` is ambiguous here exactly as it is there.

Stand-alone (standard library only): it runs on the GPU host with whatever Python is there.
"""
from __future__ import annotations

import argparse
import gzip
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:  # mypy checks this package as eaglebot.sim.sglang_pkg.sglang; it runs as `sglang`
    from .._simulated import VERSION as __version__
else:
    from sglang._simulated import VERSION as __version__

TABLE = Path(__file__).with_name(f"server_args-{__version__}.json.gz")

_SI = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
_IEC = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def human_readable_int(value: str) -> int:
    """sglang.srt.utils.common.human_readable_int: 1k, 25.6k, 1Mi ... (suffixes case-sensitive)."""
    v = value.strip()
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)?", v)
    if not m:
        raise argparse.ArgumentTypeError(f"Invalid integer value: {value!r}")
    num, suffix = m.group(1), m.group(2)
    if suffix in _IEC:
        if "." in num:
            raise argparse.ArgumentTypeError(f"Decimals are not allowed with IEC suffixes: {value!r}")
        return int(num) * _IEC[suffix]
    if suffix in _SI:
        return int(float(num) * _SI[suffix])
    if "." in num:
        raise argparse.ArgumentTypeError(f"Invalid integer value: {value!r}")
    return int(num)


def nullable_str(value: str) -> str | None:
    return None if not value or value == "None" else value


def json_list_type(value: str) -> Any:
    try:
        return json.loads(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"Invalid JSON list: {value}. Please provide a valid JSON list.")


def loads(value: str) -> Any:
    return json.loads(value)


TYPES: dict[str | None, Callable[[str], Any] | None] = {
    None: None, "str": str, "int": int, "float": float, "loads": loads, "human_readable_int": human_readable_int,
    "json_list_type": json_list_type, "nullable_str": nullable_str,
    # SGLang's own parsers of these two accept a spec string; the launch reads them no further here.
    "parse_cuda_graph_backend_arg": str, "parse_cuda_graph_config_arg": str,
}


def _add(parser: argparse.ArgumentParser, row: dict[str, Any]) -> None:
    action = row["action"]
    if action == "_HelpAction":
        return  # argparse adds -h/--help itself
    kw: dict[str, Any] = {"dest": row["dest"], "default": row["default"]}
    if row["required"]:
        kw["required"] = True
    if action in ("_StoreTrueAction", "DeprecatedStoreTrueAction"):
        kw["action"] = "store_true"
    elif action == "DeprecatedStoreConstAction":
        kw.update(action="store_const", const=True)
    elif action == "DeprecatedAction":   # 0.5.17: a retired flag that takes no value and sets nothing
        kw.update(action="store_const", const=row["default"])
    elif action == "BooleanOptionalAction":
        kw["action"] = argparse.BooleanOptionalAction
    else:  # _StoreAction, LoRAPathAction, DeprecatedAliasStoreAction (0.5.17: an old name, warned about)
        if row["nargs"] is not None:
            kw["nargs"] = row["nargs"]
        if TYPES.get(row["type"]) is not None:
            kw["type"] = TYPES[row["type"]]
        if row["choices"] is not None:
            kw["choices"] = row["choices"]
    parser.add_argument(*row["options"], **kw)


class ServerArgs:
    """Only the class method `launch_server` and a launch check call."""

    @staticmethod
    def add_cli_args(parser: argparse.ArgumentParser) -> None:
        for row in json.loads(gzip.decompress(TABLE.read_bytes()))["options"]:
            _add(parser, row)
