r"""The workload scheduler's view of a node, as pure parsers: Slurm's `sinfo` and Kubernetes'
`kubectl get` output, and the exact commands that drain and resume a node in each.

Formats (tests/fixtures/cluster/, each file naming its source):
- `sinfo -N -h -n NODE -o "%N %T %E"`: one line per node *and partition* (a node in two
  partitions is listed twice), `NODE STATE REASON`; STATE is the long form (`idle`, `mixed`,
  `allocated`, `draining`, `drained`, `down`, ...; a `*` suffix means not responding), REASON
  is free text with spaces, or `none`.
- `kubectl get node NODE -o jsonpath={.spec.unschedulable}`: `true` when cordoned, empty otherwise.
- `kubectl get node NODE -o jsonpath={.metadata.annotations.eaglebot\.io/drain-reason}`: the
  annotation eaglebot writes when it cordons a node (Kubernetes records no reason for a cordon),
  so a cordon eaglebot did not make is told apart; empty when absent.
- `kubectl get pods -A --field-selector spec.nodeName=NODE -o json`: a v1 List of Pods; a pod
  that requested GPUs names `nvidia.com/gpu` in a container's resources (requests or limits).
"""
from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from typing import Any

GPU_RESOURCE = "nvidia.com/gpu"
DRAIN_STATES = ("draining", "drained", "drain")


class ClusterParseError(ValueError):
    pass


@dataclass(frozen=True)
class SlurmNode:
    name: str
    state: str          # long form, lower case, without the `*` (not responding) suffix
    reason: str | None
    responding: bool

    @property
    def draining(self) -> bool:
        return any(self.state.startswith(s) or f"+{s}" in self.state for s in DRAIN_STATES)


def sinfo_command(node: str, sinfo: str = "sinfo") -> str:
    return shlex.join([sinfo, "-N", "-h", "-n", node, "-o", "%N %T %E"])


def parse_sinfo(text: str, node: str) -> SlurmNode | None:
    """The node's line of `sinfo -N -h -o "%N %T %E"` (the first of its partitions), or None."""
    for line in text.splitlines():
        parts = line.strip().split(" ", 2)
        if len(parts) < 2 or parts[0] != node:
            continue
        state = parts[1].lower()
        reason = parts[2].strip() if len(parts) > 2 else ""
        return SlurmNode(node, state.rstrip("*~#!%$@^-"), None if reason in ("", "none") else reason,
                         not state.endswith("*"))
    return None


def scontrol_drain(node: str, reason: str, scontrol: str = "scontrol") -> str:
    return shlex.join([scontrol, "update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}"])


def scontrol_resume(node: str, scontrol: str = "scontrol") -> str:
    return shlex.join([scontrol, "update", f"NodeName={node}", "State=RESUME"])


def kubectl_command(kubectl: str, *args: str) -> str:
    return shlex.join([kubectl, *args])


DRAIN_ANNOTATION = "eaglebot.io/drain-reason"
DRAIN_ANNOTATION_PATH = "jsonpath={.metadata.annotations." + DRAIN_ANNOTATION.replace(".", "\\.") + "}"


def parse_annotation(text: str) -> str | None:
    """The annotation's value as `kubectl get -o jsonpath=...` prints it; None when absent."""
    return text.strip() or None


def parse_unschedulable(text: str) -> bool:
    """`kubectl get node -o jsonpath={.spec.unschedulable}`: `true` when cordoned."""
    return text.strip().lower() == "true"


def _asks_gpu(container: dict[str, Any]) -> bool:
    res = container.get("resources") or {}
    return any(GPU_RESOURCE in (res.get(k) or {}) for k in ("requests", "limits"))


def gpu_pods(text: str) -> list[tuple[str, str]]:
    """(namespace, name) of the pods in a `kubectl get pods -o json` List that requested GPUs."""
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise ClusterParseError(f"kubectl did not print JSON: {e}") from None
    out = []
    for pod in doc.get("items") or []:
        spec, meta = pod.get("spec") or {}, pod.get("metadata") or {}
        if any(_asks_gpu(c) for c in (spec.get("containers") or []) + (spec.get("initContainers") or [])):
            out.append((str(meta.get("namespace") or "default"), str(meta.get("name"))))
    return out
