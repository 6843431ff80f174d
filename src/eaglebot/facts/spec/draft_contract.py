"""Does an EAGLE-3 draft see what it was trained on? The serving side (the capture points SGLang
will feed it, `eagle3`), the training side, and the verdict, in the user's words (pure).

The training side, in order: declared (`draft_train_layers`, the layer OUTPUTS training
concatenated); the trainer's provenance file next to the draft (SpecForge's `<run_id>.best_meta.json`
gives the training accuracy, see `parse_specforge_meta`); else the audit trail: what this draft's
config made the server capture the first time the bot saw it, before any patch the bot applied
(`first_seen`). A verdict is `ok`, `mismatch` or `unknown` and always names its source.
"""
from __future__ import annotations

import hashlib
import json
import posixpath
from dataclasses import dataclass, field
from typing import Any, Iterable

from eaglebot.facts.spec import eagle3

ERROR, WARNING = "error", "warning"


def layer_words(points: Iterable[int]) -> str:
    """`the embedding and the outputs of layers 2 and 30`."""
    pts = list(points)
    if not pts:
        return "no hidden state at all"
    parts = ["the embedding"] if -1 in pts else []
    layers = [p for p in pts if p >= 0]
    if len(layers) == 1:
        parts.append(f"the output of layer {layers[0]}")
    elif layers:
        parts.append(f"the outputs of layers {', '.join(map(str, layers[:-1]))} and {layers[-1]}")
    return " and ".join(parts) if len(parts) < 3 else ", ".join(parts[:-1]) + " and " + parts[-1]


@dataclass(frozen=True)
class Finding:
    kind: str
    severity: str      # "error": the draft cannot get what it expects; "warning": worth knowing
    message: str


@dataclass
class Feed:
    """What the server will feed the draft, from one config (and what is wrong with it)."""

    points: list[int] | None               # capture points in the order the server concatenates them
    ids: list[int] | None                  # what SGLang passes to set_eagle3_layers_to_capture (None: default)
    raw: list[int] | None
    findings: list[Finding] = field(default_factory=list)

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == ERROR]

    def words(self) -> str:
        return layer_words(self.points) if self.points is not None else "nothing it can know (see the findings)"


def _rule_words(res: eagle3.Resolution) -> str:
    return f"SGLang {res.version or '?'} ({res.source}, {res.method or res.arch})"


def feed(res: eagle3.Resolution, i: int, target: eagle3.Target, draft: eagle3.Draft) -> Feed:
    """Case i of a resolution (the draft's config as SGLang reads it), with every finding."""
    c = res.cases[i]
    pts = res.points(i)
    f = Feed(pts, c.ids, c.raw)
    n, add = target.num_layers, f.findings.append
    reader = res.reader or {}
    if res.error:
        add(Finding("no_capture", ERROR, f"{res.error} ({_rule_words(res)})"))
        return f
    if draft.architectures and not any("eagle3" in a.lower() for a in draft.architectures):
        add(Finding("not_eagle3", WARNING, f"the draft's architectures {draft.architectures} name no EAGLE-3 "
                                           f"model (LlamaForCausalLMEagle3 and the like)"))
    if not draft.aux_enabled():
        add(Finding("aux_off", ERROR, "eagle_config.use_aux_hidden_state is false: SGLang captures no layer for "
                                      "this EAGLE-3 draft, which then sees only the last hidden state"))
        f.points = []
        return f
    if draft.top_level_ids is not None and not (reader.get("top_level") and not draft.has_nested_key):
        where = "and the nested one is used" if draft.has_nested_key else "so SGLang uses its default"
        add(Finding("top_level_ignored", ERROR if not draft.has_nested_key else WARNING,
                    f"the top-level eagle_aux_hidden_state_layer_ids {draft.top_level_ids} is ignored by SGLang "
                    f"(it reads only eagle_config.eagle_aux_hidden_state_layer_ids) {where}"))
    if draft.eagle_config is None:
        add(Finding("no_eagle_config", WARNING, "the draft's config has no eagle_config: SGLang captures its "
                                                f"default layers ({layer_words(pts or [])})"))
    elif draft.has_nested_key and draft.ids_sglang_reads() is None and draft.nested_ids is not None:
        add(Finding("ids_invalid", ERROR, f"eagle_config.eagle_aux_hidden_state_layer_ids is "
                                          f"{json.dumps(draft.nested_ids)}, not a list of integers: SGLang "
                                          f"uses its default"))
    ids = c.ids or []
    dups = sorted({v for v in ids if ids.count(v) > 1})
    if dups:
        add(Finding("duplicate", ERROR, f"the capture list repeats {', '.join(map(str, dups))}: the layer is "
                                        f"captured once, so the draft gets fewer hidden states than it expects"))
    if ids and ids != sorted(ids):
        add(Finding("unsorted", WARNING, f"the capture list {ids} is not in layer order: the server "
                                         f"concatenates in layer order, {layer_words(pts or [])}"))
    if not res.forward.get("known") and not c.error:
        where = res.forward.get("holder") or "the class holding the capture list"
        add(Finding("forward_unknown", WARNING, f"the forward of {where} captures in a way eaglebot does not "
                                                f"recognise ({_rule_words(res)}): what the draft gets is not known"))
    if c.error:
        add(Finding("startup_error", ERROR, f"SGLang's set_eagle3_layers_to_capture raises {c.error} for "
                                            f"{ids or 'its default'} (the launch fails; {_rule_words(res)})"))
        return f
    if c.raw is not None and pts is not None:
        lost = [v for v in c.raw if not any(p + 1 == v for p in pts)]
        outside = sorted({v for v in lost if v < 0 or v > n or (v == n and not res.forward.get("end_of_stack"))})
        if outside:
            add(Finding("out_of_range", ERROR,
                        f"the target has {n} layers (0..{n - 1}); SGLang's list {c.raw} holds "
                        f"{', '.join(map(str, outside))}, which capture nothing"))
        if -1 in pts and res.forward.get("unguarded_sum"):
            add(Finding("embedding_crash", ERROR, f"SGLang {res.version}'s forward adds the residual to the "
                                                  f"embedding capture before it exists: TypeError on the first "
                                                  f"forward ({res.forward.get('file')}:{res.forward.get('line')})"))
        want = draft.expected_count()
        if len(pts) != want:
            add(Finding("count", ERROR, f"the draft takes {want} hidden states (its fc layer), the server will "
                                        f"capture {len(pts)}: the launch fails with a shape error"))
    if target.hidden_size and (draft.target_hidden_size or draft.hidden_size) and \
            (draft.target_hidden_size or draft.hidden_size) != target.hidden_size:
        add(Finding("hidden_size", ERROR, f"the draft was built for hidden size "
                                          f"{draft.target_hidden_size or draft.hidden_size}, the target has "
                                          f"{target.hidden_size}: a draft for another target"))
    if target.vocab_size and draft.vocab_size and draft.vocab_size != target.vocab_size:
        add(Finding("vocab", ERROR, f"the draft's vocab_size {draft.vocab_size} is not the target's "
                                    f"{target.vocab_size}: a draft trained for another target"))
    return f


# -- the training side -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Training:
    points: list[int] | None        # capture points training concatenated (None: not known)
    source: str                     # "declared", "provenance <file>", "first seen (run N)", "unknown"
    accuracy: list[float] | None = None      # per-position training accuracy (the probe's proxy)
    accuracy_source: str | None = None

    @property
    def kind(self) -> str:
        """`declared`, `provenance`, `first seen` or `unknown`."""
        return self.source.split(" (")[0].split(" ")[0] if not self.source.startswith("first seen") else "first seen"


def parse_specforge_meta(text: str) -> list[float] | None:
    """SpecForge's `<run_id>.best_meta.json` (specforge/training/checkpoint.py, CheckpointManager):
    `{"run_id", "step", "score", "metric", "metrics": {"eval/per_position_acc": [...],
    "eval/avg_acc": a0, ...}}`: the eval accuracy per draft position (TTT step), or None."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        return None
    metrics = doc.get("metrics") if isinstance(doc, dict) else None
    if not isinstance(metrics, dict):
        return None
    per = metrics.get("eval/per_position_acc")
    if isinstance(per, list) and per and all(isinstance(v, (int, float)) for v in per):
        return [float(v) for v in per]
    avg = metrics.get("eval/avg_acc")
    return [float(avg)] if isinstance(avg, (int, float)) and not isinstance(avg, bool) else None


@dataclass(frozen=True)
class Sighting:
    """The first time the audit trail saw a draft's config: the capture points a draft.check
    resolved it to (`points`), or the capture ids a config.patch found before patching (`ids`,
    None: the key was absent) for the caller to resolve."""

    points: list[int] | None
    ids: list[int] | None
    where: str


def first_seen(rows: list[dict[str, Any]], config_path: str, identity: str | None) -> Sighting | None:
    """The oldest record of this draft's config, before any patch the bot applied: a `draft.check`
    (the points its on-disk config resolved to) or a `config.patch` of its capture ids (their
    `before`), whichever came first. Records of another draft in the same folder (other weights:
    `identity`) and everything before them do not count. Rows: {run_id, skill, data}, oldest first."""
    def same(p: object) -> bool:
        return isinstance(p, str) and posixpath.normpath(p) == posixpath.normpath(config_path)

    start = 0
    for i, r in enumerate(rows):
        d = r.get("data") or {}
        if r.get("skill") == "draft.check" and same(d.get("draft_config")) and identity \
                and d.get("draft_identity") and d.get("draft_identity") != identity:
            start = i + 1
    for r in rows[start:]:
        d = r.get("data") or {}
        if r.get("skill") == "draft.check" and same(d.get("draft_config")) \
                and isinstance(d.get("disk_points"), list):
            return Sighting([int(p) for p in d["disk_points"]], None, f"run {r.get('run_id')}")
        if r.get("skill") == "config.patch" and same(d.get("path")):
            values = d.get("values") or {}
            if eagle3.NESTED_KEY in values:
                before = (values[eagle3.NESTED_KEY] or {}).get("before")
            elif "eagle_config" in values:
                ec = (values["eagle_config"] or {}).get("before")
                before = ec.get(eagle3.KEY) if isinstance(ec, dict) else None
            else:
                continue
            ids = [int(v) for v in before] if isinstance(before, list) and all(
                isinstance(v, int) for v in before) else None
            return Sighting(None, ids, f"run {r.get('run_id')}, before its patch")
    return None


def carried(newest: list[dict[str, Any]], config_path: str, identity: str | None) -> tuple[bool, Sighting | None]:
    """The sighting as the newest draft.check of this config recorded it (each check carries the first
    sighting forward in `first_seen`, so a long history is never rescanned): (found, sighting).
    Not found (no draft.check of it among `newest`, newest first): scan with `first_seen`. A newer
    draft in the folder (other weights): the first config.patch of its ids since, if any."""
    def same(p: object) -> bool:
        return isinstance(p, str) and posixpath.normpath(p) == posixpath.normpath(config_path)

    for i, r in enumerate(newest):
        d = r.get("data") or {}
        if r.get("skill") != "draft.check" or not same(d.get("draft_config")):
            continue
        if identity and d.get("draft_identity") and d.get("draft_identity") != identity:
            return True, first_seen(list(reversed(newest[:i])), config_path, identity)
        fs = d.get("first_seen")
        if isinstance(fs, dict) and isinstance(fs.get("points"), list):
            return True, Sighting([int(p) for p in fs["points"]], None, str(fs.get("where")))
        if isinstance(d.get("disk_points"), list):
            return True, Sighting([int(p) for p in d["disk_points"]], None, f"run {r.get('run_id')}")
        return False, None
    return False, None


# -- the verdict -------------------------------------------------------------------------------------

@dataclass
class Verdict:
    verdict: str                 # ok | mismatch | unknown
    summary: str
    reasons: list[str] = field(default_factory=list)


def judge(f: Feed, t: Training, first_sight: bool = False) -> Verdict:
    """`first_sight`: nothing in the audit trail saw this draft before (its points are recorded now)."""
    server = f"the server will feed the draft {f.words()}"
    errors = [x.message for x in f.errors]
    if t.points is None:
        if errors:
            return Verdict("mismatch", f"mismatch: {server}; {errors[0]} (training side unknown)", errors)
        why = ("the bot's first sight of this draft, recorded unless this is a dry run: later checks compare with it"
               if first_sight else "nothing records it")
        return Verdict("unknown", f"unknown: {server}; what training used is not known ({why}; or declare "
                                  f"draft_train_layers)")
    training = f"training used {layer_words(t.points)} ({t.source})"
    if f.points is None and not errors:
        return Verdict("unknown", f"unknown: what the server will feed the draft is not known; {training}")
    same = f.points is not None and sorted(f.points) == sorted(t.points)
    if same and not errors:
        only = ("; it rests on the bot's first sight of this draft only, not on what training declared "
                "(declare draft_train_layers to be sure)") if t.kind == "first seen" else ""
        return Verdict("ok", f"ok: {server}; {training}{only}")
    if same:   # the right layers, and yet the draft cannot get what it expects
        return Verdict("mismatch", f"mismatch: {server}, as {training}, but {errors[0]}", errors)
    return Verdict("mismatch", f"mismatch: {server}; {training}", [f"{server}; {training}", *errors])


def candidate_ids(training: list[int] | None, current: list[int] | None) -> list[tuple[str, list[int] | None]]:
    """Capture lists worth trying (`draft-repair`), labelled: the training layers under each
    convention and shifted by one, the current list shifted by one, and SGLang's default."""
    out: list[tuple[str, list[int] | None]] = []
    if training:
        t = sorted(training)
        out += [("the training layers as layer outputs (SGLang's +1 convention)", t),
                ("the training layers as SGLang boundaries (+1 each)", [v + 1 for v in t]),
                ("the training layers shifted by -1", [v - 1 for v in t])]
    if current:
        out += [("the current list shifted by +1", [v + 1 for v in current]),
                ("the current list shifted by -1", [v - 1 for v in current])]
    out.append(("SGLang's default (the key removed)", None))
    seen: set[str] = set()
    uniq = []
    for label, ids in out:
        key = json.dumps(ids)
        if key not in seen:
            seen.add(key)
            uniq.append((label, ids))
    return uniq


# -- the draft's weights, as an identity ----------------------------------------------------------------

def identity_command(folder_sh: str) -> str:
    """Shell (the folder already quoted for sh) printing `name size sha256-of-first-MiB` per weights file."""
    return (f"cd {folder_sh} 2>/dev/null && for f in *.safetensors *.bin; do [ -f \"$f\" ] || continue; "
            f"printf '%s %s ' \"$f\" \"$(wc -c < \"$f\" | tr -d ' ')\"; head -c 1048576 -- \"$f\" | "
            f"sha256sum | cut -d' ' -f1; done; true")


def parse_identity(stdout: str) -> str | None:
    """One hash of the weights files' lines; None when the folder holds no weights file."""
    lines = sorted(ln.strip() for ln in stdout.splitlines() if len(ln.split()) == 3)
    if not lines:
        return None
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]


# -- the trainer's provenance next to the draft ------------------------------------------------------

@dataclass(frozen=True)
class Provenance:
    accuracy: list[float] | None = None       # SpecForge best_meta.json: eval/per_position_acc
    accuracy_file: str | None = None
    ids: list[int] | None = None              # the capture ids a SpecForge checkpoint's config.json kept
    ids_default: bool = False                 # that config had none: SpecForge captured its default
    ids_file: str | None = None


_SEP = "EAGLE-PROVENANCE:"


def provenance_command(folder_sh: str) -> str:
    """Shell (the draft folder quoted for sh): the newest SpecForge `<run_id>.best_meta.json` in the
    folder or its parent, then the newest SpecForge checkpoint folder beside it (`epoch_E_step_S`,
    scripts/train_eagle3.py's save_checkpoints: the draft's config.json as training had it) that is
    not the served folder itself."""
    d, p = folder_sh, f"{folder_sh}/.."
    return (f"f=$(ls -1t -- {d}/*.best_meta.json {p}/*.best_meta.json 2>/dev/null | head -n 1); "
            f"[ -n \"$f\" ] && f=$(cd \"$(dirname \"$f\")\" && pwd -P)/$(basename \"$f\"); "
            f"printf '{_SEP} META %s\\n' \"$f\"; [ -n \"$f\" ] && cat -- \"$f\"; echo; "
            f"me=$(cd {d} 2>/dev/null && pwd -P); c=''; for x in $(ls -1dt -- {p}/epoch_*_step_* 2>/dev/null); do "
            f"[ -f \"$x/config.json\" ] && [ \"$(cd \"$x\" && pwd -P)\" != \"$me\" ] && "
            f"c=$(cd \"$x\" && pwd -P) && break; done; "
            f"printf '{_SEP} CKPT %s\\n' \"$c\"; [ -n \"$c\" ] && cat -- \"$c/config.json\"; true")


def parse_provenance(stdout: str) -> Provenance:
    parts: dict[str, tuple[str, str]] = {}
    for chunk in stdout.split(_SEP + " ")[1:]:
        head, _, body = chunk.partition("\n")
        kind, _, name = head.partition(" ")
        parts[kind] = (name.strip(), body)
    acc_file, acc_text = parts.get("META", ("", ""))
    ck_file, ck_text = parts.get("CKPT", ("", ""))
    accuracy = parse_specforge_meta(acc_text) if acc_file else None
    ids, default = None, False
    if ck_file:
        try:
            doc = json.loads(ck_text)
        except json.JSONDecodeError:
            doc = None
        if isinstance(doc, dict):
            d = eagle3.parse_draft(json.dumps(doc))
            ids = d.ids_sglang_reads()
            default = ids is None
    return Provenance(accuracy, acc_file or None if accuracy else None, ids, default,
                      f"{ck_file}/config.json" if ck_file and (ids is not None or default) else None)


def specforge_default(n: int) -> list[int]:
    """The capture ids SpecForge trains with when the draft config names none
    (specforge/algorithms/model_providers.py, resolve_eagle_capture_layers)."""
    return [1, n // 2 - 1, n - 4]
