"""The draft-contract gate's static check on a corpus of (architecture, draft config, SGLang version)
cases, resolved against the REAL SGLang source (the 0.5.23 and 0.5.17 wheels, unpacked, never
installed: tests/support/sglang_source.py): every faulty case is flagged, no correct case is.

Each case is what a host gives draft.check: the target's config.json, the draft's config.json, the
layer outputs training concatenated. The resolution runs eaglebot's own host program
(`eagle3.probe_program`) with `python3 -` exactly as on a host, the real package found on its
PYTHONPATH (no sglang import, no torch); the same case through the shipped table must agree.
The training layers of the correct cases are what SpecForge's trainer captured for them
(specforge/algorithms/model_providers.py: the draft config's ids, default [1, N//2-1, N-4]).
"""
from __future__ import annotations

import json
from pathlib import Path
import os
import subprocess
from dataclasses import dataclass, field
from typing import Any

import pytest

from support.sglang_source import real_sglang

from eaglebot.facts.spec import draft_contract as dc
from eaglebot.facts.spec import eagle3
from eaglebot.facts.spec.eagle3 import KEY

# name -> (architectures, num_hidden_layers, hidden_size, vocab_size) of real targets' config.json
TARGETS = {
    "llama-3.1-8b": (["LlamaForCausalLM"], 32, 4096, 128256),
    "llama-3.3-70b": (["LlamaForCausalLM"], 80, 8192, 128256),
    "llama-61": (["LlamaForCausalLM"], 61, 4096, 128256),           # the seeds' story: 61 layers
    "mistral-7b": (["MistralForCausalLM"], 32, 4096, 32768),
    "qwen2.5-7b": (["Qwen2ForCausalLM"], 28, 3584, 152064),
    "qwen3-8b": (["Qwen3ForCausalLM"], 36, 4096, 151936),
    "qwen3-30b-a3b": (["Qwen3MoeForCausalLM"], 48, 2048, 151936),
    "deepseek-v3": (["DeepseekV3ForCausalLM"], 61, 7168, 129280),
    "gpt-oss-120b": (["GptOssForCausalLM"], 36, 2880, 201088),
}


@dataclass(frozen=True)
class Case:
    name: str
    target: str
    draft: dict[str, Any]                 # the draft's config.json (as SpecForge writes it, or broken)
    trained: list[int]                    # layer outputs training concatenated
    faulty: bool
    version: str = "0.5.23"
    finding: str | None = None            # the finding a faulty case must carry
    draft_target: str | None = None       # the target the draft was built for (default: `target`)


def draft(ids: Any = "absent", *, target: str, top_level: Any = None, use_aux: bool | None = True,
          no_eagle_config: bool = False, **extra: Any) -> dict[str, Any]:
    _, _, hidden, vocab = TARGETS[target]
    doc: dict[str, Any] = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama",
                           "hidden_size": hidden, "num_hidden_layers": 1, "vocab_size": vocab,
                           "draft_vocab_size": 32000, **extra}
    if not no_eagle_config:
        ec: dict[str, Any] = {} if use_aux is None else {"use_aux_hidden_state": use_aux}
        if ids != "absent":
            ec["eagle_aux_hidden_state_layer_ids"] = ids
        doc["eagle_config"] = ec
    if top_level is not None:
        doc["eagle_aux_hidden_state_layer_ids"] = top_level
    return doc


CORRECT = [
    Case("llama-8b specforge ids", "llama-3.1-8b", draft([1, 15, 28], target="llama-3.1-8b"), [1, 15, 28], False),
    Case("llama-8b no ids: SGLang's default is SpecForge's", "llama-3.1-8b", draft(target="llama-3.1-8b"),
         [1, 15, 28], False),
    Case("llama-70b", "llama-3.3-70b", draft([2, 40, 77], target="llama-3.3-70b"), [2, 40, 77], False),
    Case("the story's draft as trained", "llama-61", draft([2, 30, 58], target="llama-61"), [2, 30, 58], False),
    Case("mistral-7b", "mistral-7b", draft([1, 15, 28], target="mistral-7b"), [1, 15, 28], False),
    Case("qwen2.5-7b", "qwen2.5-7b", draft([1, 13, 24], target="qwen2.5-7b"), [1, 13, 24], False),
    Case("qwen3-8b", "qwen3-8b", draft([1, 17, 32], target="qwen3-8b"), [1, 17, 32], False),
    Case("qwen3 moe (per-layer flags)", "qwen3-30b-a3b", draft([1, 23, 44], target="qwen3-30b-a3b"),
         [1, 23, 44], False),
    Case("deepseek-v3 specforge ids (first id 1: +1)", "deepseek-v3", draft([1, 29, 57], target="deepseek-v3"),
         [1, 29, 57], False),
    Case("deepseek-v3 ids as given (first id not 1)", "deepseek-v3", draft([3, 31, 59], target="deepseek-v3"),
         [2, 30, 58], False),
    Case("gpt-oss", "gpt-oss-120b", draft([1, 17, 32], target="gpt-oss-120b"), [1, 17, 32], False),
    Case("gpt-oss with the final hidden state (max id = layers)", "gpt-oss-120b",
         draft([2, 18, 36], target="gpt-oss-120b"), [1, 17, 35], False),
    Case("explicit num_aux_hidden_states and target_hidden_size", "llama-3.1-8b",
         draft([1, 15, 28], target="llama-3.1-8b", num_aux_hidden_states=3, target_hidden_size=4096),
         [1, 15, 28], False),
    Case("llama 0.5.17", "llama-61", draft([2, 30, 58], target="llama-61"), [2, 30, 58], False, "0.5.17"),
    Case("deepseek-v3 0.5.17", "deepseek-v3", draft([1, 29, 57], target="deepseek-v3"), [1, 29, 57], False,
         "0.5.17"),
]

FAULTY = [
    Case("+1 shift (dumped 'at' layers 3, 31, 59)", "llama-61", draft([3, 31, 59], target="llama-61"),
         [2, 30, 58], True),
    Case("-1 shift", "llama-3.1-8b", draft([0, 14, 27], target="llama-3.1-8b"), [1, 15, 28], True),
    Case("the wrong fix: embedding added", "llama-61", draft([-1, 2, 30], target="llama-61"), [2, 30, 58], True),
    Case("embedding added on qwen3", "qwen3-8b", draft([-1, 1, 17], target="qwen3-8b"), [1, 17, 32], True),
    Case("top-level key (ignored: the default is used)", "llama-61",
         draft(target="llama-61", top_level=[2, 30, 58]), [2, 30, 58], True, finding="top_level_ignored"),
    Case("missing eagle_config", "llama-61", draft(target="llama-61", no_eagle_config=True), [2, 30, 58], True,
         finding="no_eagle_config"),
    Case("duplicate id", "llama-3.1-8b", draft([1, 15, 15], target="llama-3.1-8b"), [1, 15, 28], True,
         finding="duplicate"),
    Case("id >= layers", "llama-3.1-8b", draft([1, 15, 40], target="llama-3.1-8b"), [1, 15, 28], True,
         finding="out_of_range"),
    Case("id >= layers on a per-layer-flag model (IndexError at start-up)", "qwen3-30b-a3b",
         draft([1, 23, 48], target="qwen3-30b-a3b"), [1, 23, 44], True, finding="startup_error"),
    Case("a llama-8b draft on qwen3-8b (same hidden size, same ids)", "qwen3-8b",
         draft([1, 15, 28], target="llama-3.1-8b"), [1, 15, 28], True, finding="vocab", draft_target="llama-3.1-8b"),
    Case("deepseek-v3: ids meant +1 but the first is not 1", "deepseek-v3", draft([2, 30, 58], target="deepseek-v3"),
         [2, 30, 58], True),
    Case("gpt-oss +1 shift", "gpt-oss-120b", draft([2, 18, 33], target="gpt-oss-120b"), [1, 17, 32], True),
    Case("use_aux_hidden_state false", "llama-3.1-8b", draft([1, 15, 28], target="llama-3.1-8b", use_aux=False),
         [1, 15, 28], True, finding="aux_off"),
    Case("embedding on 0.5.17 (its forward crashes)", "llama-61", draft([-1, 2, 30], target="llama-61"),
         [2, 30, 58], True, "0.5.17", finding="embedding_crash"),
    Case("+1 shift on 0.5.17", "llama-61", draft([3, 31, 59], target="llama-61"), [2, 30, 58], True, "0.5.17"),
]
CASES = CORRECT + FAULTY


def target_config(name: str) -> dict[str, Any]:
    archs, n, hidden, vocab = TARGETS[name]
    return {"architectures": archs, "num_hidden_layers": n, "hidden_size": hidden, "vocab_size": vocab}


def host_probe(version: str, target: eagle3.Target, ids: list[int] | None) -> eagle3.Resolution:
    """What draft.check asks a host: the program on stdin, the real package on the PYTHONPATH."""
    env = dict(os.environ, PYTHONPATH=str(real_sglang(version).parent))
    res = subprocess.run(eagle3.probe_command("python3", target.archs, target.num_layers, [ids]), shell=True,
                         input=eagle3.probe_program(), capture_output=True, text=True, env=env, timeout=60)
    got = eagle3.parse_probe(res.returncode, res.stdout, res.stderr)
    assert isinstance(got, eagle3.Resolution), got
    return got


def verdict(case: Case, res: eagle3.Resolution) -> tuple[dc.Verdict, dc.Feed]:
    target = eagle3.parse_target(json.dumps(target_config(case.target)))
    f = dc.feed(res, 0, target, eagle3.parse_draft(json.dumps(case.draft)))
    return dc.judge(f, dc.Training(case.trained, "declared")), f


def test_the_corpus_is_half_correct_half_faulty_and_covers_every_fault_class():
    assert len(CASES) >= 24 and len(CORRECT) == len(FAULTY)
    names = " ".join(c.name for c in FAULTY)
    for fault in ("+1 shift", "-1 shift", "embedding added", "top-level key", "missing eagle_config",
                  "duplicate id", "id >= layers", "same hidden size"):
        assert fault in names
    assert {c.version for c in CASES} == {"0.5.23", "0.5.17"}


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_each_case_is_judged_right_from_the_real_sglang_source(case):
    target = eagle3.parse_target(json.dumps(target_config(case.target)))
    d = eagle3.parse_draft(json.dumps(case.draft))
    res = host_probe(case.version, target, d.ids_sglang_reads())
    assert res.source == "host" and res.version == case.version and res.arch == target.archs[0]
    v, f = verdict(case, res)
    assert (v.verdict != "ok") == case.faulty, (v.summary, f.findings)
    if case.faulty:
        assert v.verdict == "mismatch" and v.summary.startswith("mismatch: the server will feed the draft ")
        assert "(declared)" in v.summary or "training side unknown" in v.summary
    else:
        assert v.summary == (f"ok: the server will feed the draft {dc.layer_words(case.trained)}; "
                             f"training used {dc.layer_words(case.trained)} (declared)")
    if case.finding:
        assert case.finding in [x.kind for x in f.findings], f.findings
    # the table shipped for this version (made from the same wheel) says the same
    table = eagle3.resolve_with_table(eagle3.load_table(case.version), target.archs, target.num_layers,
                                      [d.ids_sglang_reads()])
    assert isinstance(table, eagle3.Resolution) and table.source == f"table {case.version}"
    tv, tf = verdict(case, table)
    assert (tv.verdict, tf.points, sorted(x.kind for x in tf.findings)) == \
        (v.verdict, f.points, sorted(x.kind for x in f.findings))


def test_the_story_in_words():
    """The seeds: training concatenated the outputs of layers 2, 30, 58; the wrong fix fed the embedding."""
    case = next(c for c in FAULTY if c.name == "the wrong fix: embedding added")
    target = eagle3.parse_target(json.dumps(target_config(case.target)))
    v, f = verdict(case, host_probe("0.5.23", target, [-1, 2, 30]))
    assert v.summary == ("mismatch: the server will feed the draft the embedding and the outputs of layers 2 and 30; "
                         "training used the outputs of layers 2, 30 and 58 (declared)")
    assert f.raw == [0, 3, 31]


@dataclass
class _Rows:
    rows: list[dict[str, Any]] = field(default_factory=list)

    def add(self, run_id: int, skill: str, **data: Any) -> None:
        self.rows.append({"run_id": run_id, "skill": skill, "data": data})


def test_first_seen_is_the_oldest_record_before_any_patch_and_forgets_another_draft():
    cfg = "/m/draft/config.json"
    r = _Rows()
    r.add(3, "config.patch", path=cfg, values={eagle3.NESTED_KEY: {"before": [2, 30, 58], "after": [-1, 2, 30]}})
    r.add(4, "draft.check", draft_config=cfg, disk_points=[-1, 2, 30], draft_identity="aaa")
    s = dc.first_seen(r.rows, cfg, "aaa")
    assert s == dc.Sighting(None, [2, 30, 58], "run 3, before its patch")
    # a patch of another key is no sighting of the capture ids; another file's records do not count
    r2 = _Rows()
    r2.add(1, "config.patch", path=cfg, values={"eagle_config.use_aux_hidden_state": {"before": True, "after": False}})
    r2.add(2, "draft.check", draft_config="/other/config.json", disk_points=[1, 2, 3])
    r2.add(5, "draft.check", draft_config=cfg, disk_points=[2, 30, 58], draft_identity="aaa")
    assert dc.first_seen(r2.rows, cfg, "aaa") == dc.Sighting([2, 30, 58], None, "run 5")
    # new weights in the folder: the old draft's records, and all before them, are forgotten
    r2.add(6, "draft.check", draft_config=cfg, disk_points=[3, 31, 59], draft_identity="bbb")
    assert dc.first_seen(r2.rows, cfg, "ccc") is None
    assert dc.first_seen(r2.rows, cfg, "bbb") == dc.Sighting([3, 31, 59], None, "run 6")
    assert dc.first_seen([], cfg, None) is None


def test_layer_words():
    assert dc.layer_words([-1, 2, 30]) == "the embedding and the outputs of layers 2 and 30"
    assert dc.layer_words([2, 30, 58]) == "the outputs of layers 2, 30 and 58"
    assert dc.layer_words([5]) == "the output of layer 5"
    assert dc.layer_words([]) == "no hidden state at all"


def test_specforge_best_meta_gives_the_per_position_accuracy():
    # the file SpecForge's CheckpointManager.update_best writes beside its checkpoints
    meta = {"run_id": "llama31-eagle3", "step": 12000, "score": 2.41, "metric": "eval/simulated_acc_len",
            "metrics": {"eval/avg_loss": 1.9, "eval/avg_acc": 0.747, "eval/per_position_acc": [0.747, 0.71, 0.68],
                        "eval/simulated_acc_len": 2.41}}
    assert dc.parse_specforge_meta(json.dumps(meta)) == [0.747, 0.71, 0.68]
    del meta["metrics"]["eval/per_position_acc"]
    assert dc.parse_specforge_meta(json.dumps(meta)) == [0.747]
    assert dc.parse_specforge_meta("not json") is None and dc.parse_specforge_meta("{}") is None


def test_repair_candidates_cover_both_conventions_the_shifts_and_the_default():
    labels = dict((json.dumps(ids), label) for label, ids in dc.candidate_ids([2, 30, 58], [-1, 2, 30]))
    assert set(labels) == {"[2, 30, 58]", "[3, 31, 59]", "[1, 29, 57]", "[0, 3, 31]", "[-2, 1, 29]", "null"}
    assert "default" in labels["null"]


def _program() -> dict[str, Any]:
    ns: dict[str, Any] = {"__name__": "eagle3_probe_in_test"}
    exec(compile(eagle3.probe_program(), "eagle3_probe", "exec"), ns)
    return ns


@pytest.mark.parametrize("version", ["0.5.23", pytest.param("0.5.17", marks=pytest.mark.e2e)])  # older: e2e
def test_the_probe_reading_the_source_agrees_with_sglangs_own_imported_classes(version):
    """tests/fixtures/sglang/eagle3-imported-VERSION.json: what SGLang's classes, IMPORTED (CPU torch)
    and called on a stand-in, set for 37 architectures x 3 layer counts x 4 id lists. The probe, which
    imports nothing, must give the same list, flags and exception for every one of them."""
    rows = json.loads((Path(__file__).parent / "fixtures" / "sglang" / f"eagle3-imported-{version}.json")
                      .read_text())["rows"]
    ns = _program()
    src = ns["Source"](str(real_sglang(version)))
    by_key: dict[tuple[str, int], list[list[Any]]] = {}
    for r in rows:
        by_key.setdefault((r[0], r[1]), []).append(r)
    mismatched = []
    for (arch, n), group in by_key.items():
        doc = ns["probe"]([arch], n, [r[2] for r in group], src)
        for r, case in zip(group, doc.get("cases") or [{}] * len(group)):
            theirs_err, mine_err = r[5], (case.get("error") or doc.get("error") or "").split(":")[0] or None
            if theirs_err or mine_err:
                # both refuse (MindSpore's external model; a release without the method) or raise alike
                same = bool(theirs_err) and bool(mine_err) and (
                    r[3] is None or (theirs_err == mine_err and case.get("raw") == r[3]))
            else:
                same = (case.get("raw"), case.get("flags")) == (r[3], r[4])
            if not same:
                mismatched.append((arch, n, r[2], r[3:], case))
    assert mismatched == [] and len(rows) >= 420


def test_provenance_reads_specforges_files_beside_the_draft(tmp_path):
    import shlex

    def read(draft: Path) -> dc.Provenance:
        res = subprocess.run(dc.provenance_command(shlex.quote(str(draft))), shell=True, capture_output=True,
                             text=True, timeout=30)
        return dc.parse_provenance(res.stdout)

    out = tmp_path / "outputs"
    served = out / "epoch_9_step_900"
    served.mkdir(parents=True)
    (served / "config.json").write_text(json.dumps({"eagle_config": {KEY: [3, 31, 59]}}))
    assert read(served) == dc.Provenance()                     # nothing beside it: nothing known
    older = out / "epoch_4_step_400"
    older.mkdir()
    (older / "config.json").write_text(json.dumps({"eagle_config": {KEY: [2, 30, 58]}}))
    (out / "run.best_meta.json").write_text(json.dumps({"metrics": {"eval/per_position_acc": [0.7, 0.6]}}))
    assert read(served) == dc.Provenance([0.7, 0.6], str(out / "run.best_meta.json"), [2, 30, 58], False,
                                         str(older / "config.json"))
    (older / "config.json").write_text(json.dumps({"eagle_config": {"use_aux_hidden_state": True}}))
    got = read(served)
    assert got.ids is None and got.ids_default and dc.specforge_default(61) == [1, 29, 57]


def test_each_check_carries_the_first_sighting_forward_so_a_long_history_is_not_rescanned():
    cfg = "/m/draft/config.json"
    newest = _Rows()                      # newest first, as draft.check asks the store
    newest.add(9, "draft.check", draft_config=cfg, disk_points=[-1, 2, 30], draft_identity="aaa",
               first_seen={"points": [2, 30, 58], "where": "run 1"})
    newest.add(8, "config.patch", path=cfg, values={eagle3.NESTED_KEY: {"before": [2, 30, 58], "after": [-1, 2, 30]}})
    assert dc.carried(newest.rows, cfg, "aaa") == (True, dc.Sighting([2, 30, 58], None, "run 1"))
    assert dc.carried(newest.rows, "/m//draft/./config.json", "aaa")[1].where == "run 1"   # the same file
    # the newest check was itself the first sight: its own disk points
    first = _Rows()
    first.add(4, "draft.check", draft_config=cfg, disk_points=[2, 30, 58], draft_identity="aaa")
    assert dc.carried(first.rows, cfg, "aaa") == (True, dc.Sighting([2, 30, 58], None, "run 4"))
    # another draft (other weights) since: only what came after it counts (here a patch of its ids)
    other = _Rows()
    other.add(12, "config.patch", path=cfg, values={eagle3.NESTED_KEY: {"before": [1, 29, 57], "after": [5, 6, 7]}})
    other.add(11, "draft.check", draft_config=cfg, disk_points=[2, 30, 58], draft_identity="aaa")
    assert dc.carried(other.rows, cfg, "bbb") == (True, dc.Sighting(None, [1, 29, 57], "run 12, before its patch"))
    assert dc.carried(other.rows[1:], cfg, "bbb") == (True, None)
    # no check of this config among the newest records: the caller scans from the oldest
    assert dc.carried([], cfg, "aaa") == (False, None)
