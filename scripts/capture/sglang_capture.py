"""Write tests/fixtures/sglang/<version>/ from the REAL sglang package (run by scripts/capture/sglang.sh,
by hand, never by CI: it needs sglang and torch installed).

    python sglang_capture.py OUT_DIR

- server_args.json.gz: every option of `python -m sglang.launch_server` as ServerArgs.add_cli_args defines it;
- bench_serving_args.json: the same for `python -m sglang.bench_serving`;
- spec_grid.json.gz: what the real `_handle_eagle_family` hook keeps, rewrites (with the warning it logs) or
  refuses (with its error) over algorithm x steps x topk x draft tokens x draft path;
- log_lines.json: the start-up, ready, decode-stats and fatal lines with the file and line they come from;
- meta_info_keys.json: the keys a /generate response's meta_info can carry, with the file and line.
"""
from __future__ import annotations

import argparse
import contextlib
import gzip
import inspect
import io
import itertools
import json
import logging
import re
import sys
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _torchvision_stand_in  # noqa: E402,F401  (see its docstring)

import sglang  # noqa: E402
from sglang.srt.server_args import ServerArgs  # noqa: E402


def _type_name(t: object) -> str | None:
    if t is None:
        return None
    return getattr(t, "__name__", type(t).__name__)


def option_table(parser: argparse.ArgumentParser, made_with: str) -> dict[str, object]:
    rows = []
    for a in parser._actions:
        if not a.option_strings:
            continue
        default = a.default if isinstance(a.default, (str, int, float, bool, type(None), list)) else repr(a.default)
        rows.append({"options": list(a.option_strings), "dest": a.dest, "nargs": a.nargs,
                     "type": _type_name(a.type), "action": type(a).__name__,
                     # a set's order changes with the hash seed: sorted, so two captures compare equal
                     "choices": (sorted(a.choices, key=str) if isinstance(a.choices, (set, frozenset))
                                 else list(a.choices) if a.choices is not None else None),
                     "default": default, "required": a.required})
    return {"sglang": sglang.__version__, "made_with": made_with,
            "allow_abbrev": parser.allow_abbrev, "options": rows}


def launch_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sglang.launch_server")
    ServerArgs.add_cli_args(p)
    return p


def bench_parser() -> argparse.ArgumentParser:
    """bench_serving builds its parser inside `if __name__ == "__main__"`: run that block with
    parse_args stopped, and keep the parser it built."""
    import runpy
    caught: dict[str, argparse.ArgumentParser] = {}

    class _Stop(Exception):
        pass

    orig = argparse.ArgumentParser.parse_args

    def grab(self: argparse.ArgumentParser, *a: object, **k: object) -> None:
        caught["p"] = self
        raise _Stop

    argparse.ArgumentParser.parse_args = grab  # type: ignore[assignment,method-assign]
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            runpy.run_module("sglang.benchmark.serving", run_name="__main__")
    except _Stop:
        pass
    finally:
        argparse.ArgumentParser.parse_args = orig  # type: ignore[method-assign]
    return caught["p"]


# -- the speculative grid ------------------------------------------------------------------

class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


SPEC_WARNINGS = ("speculative_num_draft_tokens", "Max running requests")


def unresolved_server_args(ns: argparse.Namespace) -> ServerArgs:
    """ServerArgs as the parser left them, before any resolution, so the hook alone decides.

    0.5.23 builds the record unresolved (`resolve_once` runs the pipeline later); 0.5.17 resolves
    everything in `__post_init__` (the device, GPU memory, the whole model config) before its
    speculative hook, so there the dataclass is filled without running it, as the GPU host
    (`device cuda`) would reach the hook."""
    if hasattr(ServerArgs, "resolve_once"):
        return ServerArgs.from_cli_args(ns)
    import dataclasses
    sa = object.__new__(ServerArgs)
    sa.__dict__.update({f.name: getattr(ns, f.name) for f in dataclasses.fields(ServerArgs) if hasattr(ns, f.name)})
    sa._resolved_overrides = []
    sa.device = "cuda"
    return sa


def spec_grid(target: str, draft: str, arch: str) -> dict[str, object]:
    import sglang.srt.arg_groups.speculative_hook as hook
    # The hook reads the target's architecture through the whole ModelConfig (weights metadata, a GPU
    # platform); the capture answers that one question itself, in each release's shape: 0.5.23 asks
    # the module function `model_config_of(server_args)`, 0.5.17 the method `server_args.get_model_config()`.
    answer = types.SimpleNamespace(hf_config=types.SimpleNamespace(architectures=[arch]))
    if hasattr(hook, "model_config_of"):
        hook.model_config_of = lambda sa: answer
    ServerArgs.get_model_config = lambda self: answer  # type: ignore[method-assign]
    parser = launch_parser()
    cap = _Capture()
    logging.getLogger("sglang").addHandler(cap)
    logging.getLogger("sglang").setLevel(logging.WARNING)
    rows: list[list[object]] = []
    warnings: dict[str, int] = {}
    # None: the flag is not given (SGLang then chooses, or refuses a partial set)
    for algo, steps, topk, tokens, with_draft in itertools.product(
            ("EAGLE", "EAGLE3"), (None, *range(1, 9)), (None, 1, 2, 4, 8), (None, *range(1, 65)), (True, False)):
        # page_size is resolved by an earlier pipeline stage; the hook compares it with 1
        argv = ["--model-path", target, "--speculative-algorithm", algo, "--page-size", "1"]
        for flag, value in (("--speculative-num-steps", steps), ("--speculative-eagle-topk", topk),
                            ("--speculative-num-draft-tokens", tokens)):
            if value is not None:
                argv += [flag, str(value)]
        if with_draft:
            argv += ["--speculative-draft-model-path", draft]
        sa = unresolved_server_args(parser.parse_args(argv))
        cap.lines.clear()
        effective: list[object] | None = None
        error = None
        try:
            hook._handle_eagle_family(sa)
        except Exception as e:  # what the real hook refuses, in its own words
            error = f"{type(e).__name__}: {e}".rstrip(": ")
        else:
            d = sa.resolved_dict() if hasattr(sa, "resolved_dict") else vars(sa)
            effective = [d["speculative_num_steps"], d["speculative_eagle_topk"], d["speculative_num_draft_tokens"]]
        warned = []
        for w in cap.lines:
            if w.startswith(SPEC_WARNINGS):
                warned.append(warnings.setdefault(w, len(warnings)))
        rows.append([algo, steps, topk, tokens, with_draft, effective, error, warned])
    src = inspect.getsourcefile(hook._handle_eagle_family) or ""
    return {"sglang": sglang.__version__, "hook": "sglang/srt/arg_groups/speculative_hook.py:_handle_eagle_family",
            "hook_line": inspect.getsourcelines(hook._handle_eagle_family)[1], "target_architecture": arch,
            "source_file": src.split("site-packages/")[-1],
            "columns": ["algorithm", "steps", "topk", "draft_tokens", "draft_path",
                        "effective [steps, topk, draft_tokens] or null", "error or null", "warnings (indexes)"],
            "warnings": sorted(warnings, key=warnings.__getitem__), "rows": rows}


# -- log lines ---------------------------------------------------------------------------

LOG_LINES = {
    "ready": r"The server is fired up and ready to roll!",
    "decode_stats": r"msg = f\"Decode batch",
    "load_weight_begin": r"Load weight begin",
    "load_weight_end": r"Load weight end",
    "capture_cuda_graph_begin": r"CUDA graph begin|graph_backend\[model_runner\.device\]\} begin",
    "capture_cuda_graph_end": r"CUDA graph end|graph_backend\[model_runner\.device\]\} end",
    "draft_tokens_adjusted": r"speculative_num_draft_tokens is adjusted",
    "max_running_reset": r"Max running requests is reset to 48",
    "fatal_scheduler_exception": r"Scheduler hit an exception",
    "fatal_sigquit": r"Received sigquit from a child process",
    "fatal_rank_died": r"scheduler died during initialization",
    "fatal_not_enough_memory": r"Not enough memory\. Please try to increase --mem-fraction-static",
    "fatal_cuda_graph": r"Capture cuda graph failed",
    "fatal_kv_budget": r"Loaded weights leave no GPU memory for the KV cache",
}


def log_lines(root: Path) -> dict[str, object]:
    found: dict[str, list[dict[str, object]]] = {k: [] for k in LOG_LINES}
    for path in sorted(root.rglob("*.py")):
        rel = str(path.relative_to(root.parent.parent))
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError):
            continue
        for i, line in enumerate(text.splitlines(), 1):
            for key, pat in LOG_LINES.items():
                if re.search(pat, line) and len(found[key]) < 6:
                    found[key].append({"file": rel, "line": i, "text": line.strip()})
    return {"sglang": sglang.__version__, "lines": found}


def meta_info_keys(root: Path) -> dict[str, object]:
    """The keys the tokenizer manager writes into a /generate response's meta_info (from source: each
    `meta_info["key"] = ...` of sglang/srt/managers/, with its file and line). 0.5.17 still writes the
    speculative aliases its source marks for removal (spec_accepted_drafts, ...)."""
    keys: dict[str, dict[str, object]] = {}
    for path in sorted((root / "managers").rglob("*.py")):
        rel = str(path.relative_to(root.parent.parent))
        for i, line in enumerate(path.read_text().splitlines(), 1):
            for key in re.findall(r'meta_info\["([a-z_]+)"\]\s*=', line):
                keys.setdefault(key, {"file": rel, "line": i})
    return {"sglang": sglang.__version__, "keys": dict(sorted(keys.items()))}


def main() -> int:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    models = Path(sys.argv[2])
    table = json.dumps(option_table(
        launch_parser(), "argparse.ArgumentParser(prog='sglang.launch_server'); ServerArgs.add_cli_args(p); "
                         "p._actions"), indent=1) + "\n"
    (out / "server_args.json").unlink(missing_ok=True)
    (out / "server_args.json.gz").write_bytes(gzip.compress(table.encode(), mtime=0))
    (out / "bench_serving_args.json").write_text(json.dumps(option_table(
        bench_parser(), "runpy.run_module('sglang.benchmark.serving', run_name='__main__') up to parse_args; "
                        "p._actions"), indent=1) + "\n")
    # The big ones gzipped (mtime 0: the same capture gives the same bytes; the grid's 635 KB of JSON
    # is 40 KB): every device call carries the tree next to the staged SGLang under a 64 MiB limit.
    grid = json.dumps(spec_grid(str(models / "target"), str(models / "draft"), "LlamaForCausalLM"),
                      separators=(",", ":")) + "\n"
    (out / "spec_grid.json").unlink(missing_ok=True)
    (out / "spec_grid.json.gz").write_bytes(gzip.compress(grid.encode(), mtime=0))
    (out / "log_lines.json").write_text(json.dumps(log_lines(Path(sglang.__file__).parent / "srt"), indent=1) + "\n")
    (out / "meta_info_keys.json").write_text(json.dumps(meta_info_keys(Path(sglang.__file__).parent / "srt"),
                                                        indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
