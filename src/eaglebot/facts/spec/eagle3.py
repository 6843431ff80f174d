"""What an EAGLE-3 draft will be fed: the capture points SGLang's model file for the target makes
of the draft's config, resolved statically (no GPU, no model loaded, well under a second).

Asked of the host's own SGLang first (`probe_program`: `eagle3_source` + `eagle3_probe`, run with
the host's Python; it reads the installed source and runs the real `set_eagle3_layers_to_capture`
on a stand-in `self`, importing neither sglang nor torch); where that cannot run, the table
captured from the real wheel of the host's version (`data/eagle3-capture-<version>.json`, made by
scripts/capture/eagle3.sh with the same program and `fit_table`; never typed by hand).

Convention: a capture point is named by the decoder layer whose OUTPUT it is (0-based), -1 being
the embedding (what enters layer 0) and N-1 the stream after the last layer (before the final
norm). `draft_train_layers` uses it ("the outputs of layers 2, 30 and 58"). SGLang's own list
(`layers_to_capture`, "raw" here) holds boundaries: b captures what enters layer b, point b - 1.
"""
from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Callable

from eaglebot.facts.fact import program_answer
from eaglebot.facts.host_programs import eagle3_probe

KEY = "eagle_aux_hidden_state_layer_ids"
NESTED_KEY = f"eagle_config.{KEY}"
PROBE_TIMEOUT_S = 60.0


# -- the two config.json files -------------------------------------------------------------------

@dataclass(frozen=True)
class Target:
    archs: list[str]
    num_layers: int
    hidden_size: int | None = None
    vocab_size: int | None = None


def _text_part(doc: dict[str, Any], key: str) -> Any:
    """A key of the config, or of its `text_config` (multimodal targets nest the language model)."""
    if key in doc:
        return doc[key]
    text = doc.get("text_config")
    return text.get(key) if isinstance(text, dict) else None


def parse_target(text: str) -> Target:
    """The target's config.json; ValueError (one sentence) when it cannot say what is needed."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"the target's config.json is not valid JSON ({e.msg} at line {e.lineno})") from None
    if not isinstance(doc, dict):
        raise ValueError("the target's config.json is not a JSON object")
    archs = doc.get("architectures")
    n = _text_part(doc, "num_hidden_layers")
    if not isinstance(archs, list) or not archs or not all(isinstance(a, str) for a in archs):
        raise ValueError("the target's config.json has no `architectures` list")
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError("the target's config.json has no positive `num_hidden_layers`")
    hs, vocab = _text_part(doc, "hidden_size"), _text_part(doc, "vocab_size")
    return Target(list(archs), n, hs if isinstance(hs, int) else None, vocab if isinstance(vocab, int) else None)


@dataclass(frozen=True)
class Draft:
    """The parts of an EAGLE-3 draft's config.json that decide what the target captures for it."""

    eagle_config: Any = None           # the `eagle_config` value as written (None: absent)
    nested_ids: Any = None             # eagle_config.eagle_aux_hidden_state_layer_ids as written
    has_nested_key: bool = False
    top_level_ids: Any = None          # a top-level eagle_aux_hidden_state_layer_ids (SGLang ignores it)
    use_aux: Any = None                # eagle_config.use_aux_hidden_state as written
    num_aux: int | None = None         # num_aux_hidden_states (the draft's fc width, when given)
    target_hidden_size: int | None = None
    hidden_size: int | None = None
    vocab_size: int | None = None
    architectures: list[str] = field(default_factory=list)

    def ids_sglang_reads(self) -> list[int] | None:
        """What SGLang passes to the target's `set_eagle3_layers_to_capture` (its reader:
        `eagle_config["eagle_aux_hidden_state_layer_ids"]`, None on any error or absence)."""
        if not isinstance(self.eagle_config, dict) or not self.has_nested_key:
            return None
        ids = self.nested_ids
        return list(ids) if isinstance(ids, list) and all(_is_int(i) for i in ids) else None

    def aux_enabled(self) -> bool:
        """SGLang: `eagle_config.get("use_aux_hidden_state", True)`; without an eagle_config the
        `.get` raises and the flag keeps its True."""
        if not isinstance(self.eagle_config, dict):
            return True
        return bool(self.eagle_config.get("use_aux_hidden_state", True))

    def expected_count(self) -> int:
        """How many hidden states the draft's fc layer takes: SGLang's own rule
        (`num_aux_hidden_states`, else the nested ids' length, else 3)."""
        if self.num_aux:
            return self.num_aux
        ids = self.ids_sglang_reads()
        return len(ids) if ids else 3


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def parse_draft(text: str) -> Draft:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"the draft's config.json is not valid JSON ({e.msg} at line {e.lineno})") from None
    if not isinstance(doc, dict):
        raise ValueError("the draft's config.json is not a JSON object")
    ec = doc.get("eagle_config")

    def num(key: str) -> int | None:
        v = doc.get(key)
        return v if _is_int(v) else None

    archs = doc.get("architectures")
    return Draft(eagle_config=ec, nested_ids=ec.get(KEY) if isinstance(ec, dict) else None,
                 has_nested_key=isinstance(ec, dict) and KEY in ec, top_level_ids=doc.get(KEY),
                 use_aux=ec.get("use_aux_hidden_state") if isinstance(ec, dict) else None,
                 num_aux=num("num_aux_hidden_states"), target_hidden_size=num("target_hidden_size"),
                 hidden_size=num("hidden_size"), vocab_size=num("vocab_size"),
                 architectures=[a for a in archs if isinstance(a, str)] if isinstance(archs, list) else [])


def with_ids(text: str, ids: list[int] | None) -> str:
    """The draft config as a planned patch of the capture ids would leave it (None: unchanged)."""
    if ids is None:
        return text
    doc = json.loads(text)
    ec = doc.get("eagle_config")
    doc["eagle_config"] = {**(ec if isinstance(ec, dict) else {}), KEY: list(ids)}
    return json.dumps(doc)


def without_ids(text: str) -> str:
    """The draft config with the nested capture ids removed (SGLang then uses its default)."""
    doc = json.loads(text)
    ec = doc.get("eagle_config")
    if isinstance(ec, dict):
        doc["eagle_config"] = {k: v for k, v in ec.items() if k != KEY}
    return json.dumps(doc)


# -- a resolution (from the host's SGLang or a table) -----------------------------------------------

@dataclass
class Case:
    ids: list[int] | None
    raw: list[int] | None = None         # SGLang's layers_to_capture
    flags: list[int] = field(default_factory=list)
    error: str | None = None             # what set_eagle3_layers_to_capture raises (start-up fails)


@dataclass
class Resolution:
    version: str | None
    source: str                          # "host" (its installed source) or "table <version>"
    num_layers: int
    arch: str | None = None
    error: str | None = None             # the architecture cannot capture at all (why)
    method: str | None = None            # file:line of the set_eagle3_layers_to_capture used
    forward: dict[str, Any] = field(default_factory=dict)
    reader: dict[str, Any] | None = None
    cases: list[Case] = field(default_factory=list)
    elapsed_s: float | None = None

    def points(self, i: int) -> list[int] | None:
        """Capture points of case i, in the order the forward captures (and concatenates) them."""
        c = self.cases[i]
        if c.error or c.raw is None or not self.forward.get("known"):
            return None
        return points(c.raw, c.flags, self.num_layers, self.forward)


def points(raw: list[int], flags: list[int], n: int, fwd: dict[str, Any]) -> list[int]:
    """The boundaries a forward really captures, as capture points (boundary b -> point b - 1)."""
    if fwd.get("after_list"):      # gpt_oss 0.5.17: `start_layer in list` first, then `i + 1` after each layer
        b = {v for v in raw if (v == 0 and fwd.get("start_in_list")) or 1 <= v <= n}
    elif fwd.get("flags") and not fwd.get("entry_list"):
        b = set(flags) | ({n} if fwd.get("end_of_stack") and n in raw else set())
    else:
        b = {v for v in raw if 0 <= v < n} | (set(flags) if fwd.get("flags") else set())
        if fwd.get("end_of_stack") and n in raw:
            b.add(n)
    return [x - 1 for x in sorted(b)]


def probe_program() -> str:
    """The host program: eagle3_source's text, then eagle3_probe's (its import of the first dropped)."""
    pkg = resources.files("eaglebot.facts.host_programs")
    first = pkg.joinpath("eagle3_source.py").read_text()
    second = [ln for ln in pkg.joinpath("eagle3_probe.py").read_text().splitlines()
              if not ln.endswith("# host: inlined") and ln != "from __future__ import annotations"]
    return first + "\n" + "\n".join(second) + "\n"


def probe_command(python: str, archs: list[str], n: int, cases: list[list[int] | None],
                  method: str | None = None) -> str:
    """The command; the program goes on its stdin (`probe_program()`). `method`: the target's hook
    to run instead of `set_eagle3_layers_to_capture` (DFLASH: `set_dflash_layers_to_capture`)."""
    return shlex.join([python, "-", json.dumps(archs), str(n), json.dumps(cases), *(["", method] if method else [])])


def probe_answer(exit_status: int, stdout: str, stderr: str) -> dict[str, Any] | str:
    """The probe's answer as printed (its JSON document), or why it could not answer (one sentence)."""
    return program_answer(eagle3_probe.MARK, eagle3_probe.UNAVAILABLE, "the probe", exit_status, stdout, stderr)


def parse_probe(exit_status: int, stdout: str, stderr: str) -> Resolution | str:
    """The probe's answer, or why it could not answer (one sentence)."""
    doc = probe_answer(exit_status, stdout, stderr)
    return doc if isinstance(doc, str) else _from_doc(doc, "host")


def _from_doc(doc: dict[str, Any], source: str) -> Resolution:
    cases = [Case(c.get("ids"), c.get("raw"), list(c.get("flags") or []), c.get("error"))
             for c in doc.get("cases") or []]
    return Resolution(doc.get("sglang"), source, int(doc.get("num_layers") or 0), doc.get("arch"), doc.get("error"),
                      doc.get("method"), dict(doc.get("forward") or {}), doc.get("reader"), cases,
                      doc.get("elapsed_s"))


# -- the captured tables (one per SGLang version) -----------------------------------------------------

def _plus_one(ids: list[int], n: int) -> list[int]:
    return [v + 1 for v in ids]


def _identity(ids: list[int], n: int) -> list[int]:
    return list(ids)


def _plus_one_if_first_is_1(ids: list[int], n: int) -> list[int]:
    return _plus_one(ids, n) if ids and ids[0] == 1 else list(ids)


def _identity_if_max_is_n(ids: list[int], n: int) -> list[int]:
    return list(ids) if ids and max(ids) == n else _plus_one(ids, n)


# What a model file does with given ids: each rule is one SGLang wrote (the capture script fits
# every architecture to one of these on a grid of real runs, or records it as unfitted).
GIVEN: dict[str, Callable[[list[int], int], list[int]]] = {
    "plus_one": _plus_one, "identity": _identity, "plus_one_if_first_is_1": _plus_one_if_first_is_1,
    "identity_if_max_is_n": _identity_if_max_is_n}
_TERM = re.compile(r"^(N//2|N|)([+-]\d+)?$|^(\d+)$")


def eval_term(term: str, n: int) -> int:
    """One element of a fitted default: `2`, `N//2`, `N-3`, `N//2+1`."""
    m = _TERM.match(term.replace(" ", ""))
    if not m:
        raise ValueError(f"unknown default term {term!r}")
    if m.group(3) is not None:
        return int(m.group(3))
    base = n // 2 if m.group(1) == "N//2" else n
    return base + int(m.group(2) or 0)


def flag_layers(raw: list[int], n: int, mode: str) -> tuple[list[int], str | None]:
    """Layers a method flags `_is_layer_to_capture` on: `index` is `self.layers[raw]` (Python
    indexing: a negative id wraps, one past the end raises), `guarded` only 0 <= raw < n."""
    if mode == "none":
        return [], None
    out: set[int] = set()
    for v in raw:
        if mode == "guarded":
            if 0 <= v < n:
                out.add(v)
        elif -n <= v < n:
            out.add(v % n)
        else:
            return sorted(out), "IndexError: list index out of range"
    return sorted(out), None


def table_name(version: str) -> str:
    return f"eagle3-capture-{version}.json"


def has_table(version: str) -> bool:
    return resources.files("eaglebot.facts").joinpath("data", table_name(version)).is_file()


def load_table(version: str) -> dict[str, Any]:
    return dict(json.loads(resources.files("eaglebot.facts").joinpath("data", table_name(version)).read_text()))


def resolve_with_table(table: dict[str, Any], archs: list[str], n: int,
                       cases: list[list[int] | None]) -> Resolution | str:
    version = str(table.get("sglang"))
    entry = next(((a, table["archs"][a]) for a in archs if a in table.get("archs", {})), None)
    if entry is None:
        return f"the captured table of SGLang {version} has no {', '.join(archs)}"
    arch, row = entry
    res = Resolution(version, f"table {version}", n, arch, row.get("error"), row.get("method"),
                     dict(row.get("forward") or {}), table.get("reader"))
    if row.get("error"):
        return res
    if row.get("given") not in GIVEN or not row.get("default"):
        return f"the captured table of SGLang {version} could not fit {arch}'s rule; ask the host's SGLang"
    for ids in cases:
        raw = [eval_term(t, n) for t in row["default"]] if ids is None else GIVEN[row["given"]](list(ids), n)
        flags, err = flag_layers(raw, n, row.get("flags", "none"))
        res.cases.append(Case(ids, raw, flags, err))
    return res
