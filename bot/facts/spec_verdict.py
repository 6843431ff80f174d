"""What a method's static check finds (spec_methods, spec_dflash): findings of three severities in one
verdict, and the small readers of configs and launch flags the per-method checks share."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from eaglebot.facts import sglang_args

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


def attn_dp(f: dict[str, str | None]) -> str | None:
    """The flag that turns attention DP on, as given ("--attn-dp-size 2"), or None."""
    size = sglang_args.int_value(flag(f, "--attn-dp-size", "--attention-data-parallel-size"))
    if size is not None and size > 1:
        return f"--attn-dp-size {size}"
    if "--enable-dp-attention" in f:
        return "--enable-dp-attention"
    return None


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
