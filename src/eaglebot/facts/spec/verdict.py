"""What a method's static check finds (methods, dflash): findings of three severities in one
verdict, and the small readers of configs and launch flags the per-method checks share."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from eaglebot.facts.sglang import cmdline

REFUSE, WARN, NOTE = "refuse", "warn", "note"



@dataclass(frozen=True)
class Finding:
    check: str           # a short id: "dflash.ids_location", "mtp.weights", ...
    severity: str        # REFUSE, WARN or NOTE
    message: str         # one sentence; a refusal names the fix


@dataclass
class Verdict:
    algorithm: str | None               # as asked, upper-cased
    resolved: str | None                # what SGLang runs it as (NEXTN -> EAGLE)
    method: str | None                  # the checks applied: DFLASH, MTP, STANDALONE, NGRAM, or None
    findings: list[Finding] = field(default_factory=list)

    def add(self, check: str, severity: str, message: str) -> None:
        self.findings.append(Finding(check, severity, message))

    def of(self, severity: str) -> list[str]:
        return [f.message for f in self.findings if f.severity == severity]

    @property
    def refused(self) -> bool:
        return any(f.severity == REFUSE for f in self.findings)

    def to_json(self) -> dict[str, Any]:
        return {"algorithm": self.algorithm, "resolved": self.resolved, "method": self.method,
                "findings": [vars(f) for f in self.findings]}


# -- small readers ------------------------------------------------------------------------------

def as_int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def text(doc: dict[str, Any], key: str) -> Any:
    """A config key, or its `text_config`'s (multimodal configs nest the language model)."""
    if key in doc:
        return doc[key]
    t = doc.get("text_config")
    return t.get(key) if isinstance(t, dict) else None


def flag(f: dict[str, str | None], *names: str) -> str | None:
    for n in names:
        if n in f:
            return f[n] if f[n] is not None else ""
    return None


# Where each release drops a lone --enable-dp-attention (attention DP needs a DP size above 1).
_DP1_DROP = {"0.5.10": "server_args.py _handle_data_parallelism",
             "0.5.17": "arg_groups/overrides.py _data_parallelism_defaults",
             "0.5.23": "arg_groups/parallel_hook.py, which moves it to --attn-dp-size <dp-size>"}


def _dp_size(f: dict[str, str | None]) -> int:
    """--dp-size (flag_values reads every release's --data-parallel-size as it), 1 if unset."""
    return cmdline.int_value(flag(f, "--dp-size", "--data-parallel-size")) or 1


def _scale_joiner(f: dict[str, str | None], version: str) -> bool:
    """An elastic-EP scale joiner runs attention DP at any DP size (0.5.17's _data_parallelism_defaults
    keeps the flag; 0.5.23's attn_dp_enabled_of is true for it); 0.5.10 has no such mode."""
    return version != "0.5.10" and flag(f, "--elastic-ep-join-mode") == "scale"


def attn_dp(f: dict[str, str | None], version: str) -> str | None:
    """The flags that turn attention DP on in SGLang `version`, as given ("--attn-dp-size 2",
    "--enable-dp-attention --dp-size 2"), or None. A lone --enable-dp-attention is not attention DP:
    every release drops it when the DP size is 1 (`_DP1_DROP`), before the methods' refusals."""
    size = cmdline.int_value(flag(f, "--attn-dp-size", "--attention-data-parallel-size"))
    if size is not None and size > 1:
        return f"--attn-dp-size {size}"
    joiner = _scale_joiner(f, version)
    if "--enable-dp-attention" in f:
        dp = _dp_size(f)
        if dp > 1:
            return f"--enable-dp-attention --dp-size {dp}"
        if joiner:
            return "--enable-dp-attention --elastic-ep-join-mode scale"
    if joiner and version != "0.5.17":
        return "--elastic-ep-join-mode scale"
    return None


def attn_dp_ignored(f: dict[str, str | None], version: str) -> str | None:
    """The warning for a --enable-dp-attention that SGLang `version` drops (DP size 1), or None."""
    if "--enable-dp-attention" not in f or attn_dp(f, version) is not None:
        return None
    where = _DP1_DROP.get(version, _DP1_DROP["0.5.23"])
    return (f"SGLang {version} ignores --enable-dp-attention without --dp-size > 1 ({where}): attention DP is off; "
            f"drop the flag, or pass --dp-size N (N > 1) if you meant attention DP")


def is_local(path: str | None) -> bool:
    return bool(path) and str(path).startswith(("/", "./", "../", "~"))


def folder(host: dict[str, Any], key: str) -> dict[str, Any] | None:
    got = host.get(key)
    return got if isinstance(got, dict) else None


def config(v: Verdict, host: dict[str, Any], key: str, what: str, path: str | None) -> dict[str, Any] | None:
    """A folder's config.json, or None with a warning saying why it was not checked."""
    if not is_local(path):
        if path:
            v.add(f"{key}.config", NOTE, f"the {what} {path} is not a folder on the host: its files are not checked")
        return None
    got = folder(host, key)
    if got is None:
        v.add(f"{key}.config", WARN, f"the {what} folder {path} could not be read on the host: not checked")
        return None
    if not got.get("exists"):
        v.add(f"{key}.exists", REFUSE, f"the {what} folder {path} does not exist on the host: give the right path")
        return None
    if not isinstance(got.get("config"), dict):
        v.add(f"{key}.config", WARN, f"the {what}'s config.json cannot be read ({got.get('config_error')}): "
                                     f"not checked")
        return None
    cfg: dict[str, Any] = got["config"]
    return cfg
