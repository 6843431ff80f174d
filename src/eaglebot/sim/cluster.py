"""SIMULATED workload schedulers for the drain skills: `scontrol`, `sinfo` and `kubectl`.

Standard library only; install_sim_bin writes wrappers `scontrol`, `sinfo` and `kubectl` that
run `cluster.py TOOL ARGS...`. State: `cluster.json` in $EAGLE_SIM_STATE:

    {"slurm": {"gpu-01": {"base": "idle", "drain": false, "reason": null, "partitions": ["gpu"]}},
     "k8s": {"nodes": {"gpu-01": {"unschedulable": false}},
             "pods": [{"namespace": "ml", "name": "trainer-0", "node": "gpu-01", "gpus": 8}]}}

Every call is appended to `cluster-commands.log` (one JSON argv per line) so tests can check
the exact commands. Output follows the real tools (tests/fixtures/cluster/ names the sources):
`sinfo -N -h -o "%N %T %E"` prints one line per node and partition; a drained node with jobs
is `draining`, without `drained` (also when down); scontrol refuses DRAIN and DOWN without a
Reason, RESUME of a node that is not drained or down (a resumed down node is idle), and any
update from a user not in the state's `slurm_operators` (when it lists them: Slurm's root and
SlurmUser); kubectl answers `node/NAME cordoned` and the like. tests/test_slurm_fidelity.py runs
the same commands against a real Slurm 22.05 (tests/support/slurm.py). Not simulated, as the real one
does them: `idle*` (not responding) for a moment after a RESUME, until slurmctld pings slurmd;
`sinfo -n NODE` saying `allocated` for a partly allocated node until the whole node list is
asked for (22.05 refreshes a node's allocated CPUs only then); State=UNDRAIN.
"""
from __future__ import annotations

import json
import os
import pwd
import sys
from pathlib import Path
from typing import Any

STATE_FILE = "cluster.json"
LOG_FILE = "cluster-commands.log"


def _dir() -> Path:
    return Path(os.environ.get("EAGLE_SIM_STATE") or ".")


def load() -> dict[str, Any]:
    try:
        with open(_dir() / STATE_FILE) as f:
            state: dict[str, Any] = json.load(f)
            return state
    except FileNotFoundError:
        return {"slurm": {}, "k8s": {"nodes": {}, "pods": []}}


def save(state: dict[str, Any], state_dir: str | Path | None = None) -> None:
    d = Path(state_dir) if state_dir is not None else _dir()
    d.mkdir(parents=True, exist_ok=True)
    tmp = d / f".{STATE_FILE}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(state, indent=2) + "\n")
    os.chmod(tmp, 0o666)
    os.replace(tmp, d / STATE_FILE)


def _err(msg: str, code: int = 1) -> int:
    sys.stderr.write(msg + "\n")
    return code


def _long_state(n: dict[str, Any]) -> str:
    # As Slurm's node_state_string: the drain flag wins over the base state; draining only while
    # jobs hold the node (a drained node that is also down reads `drained`).
    if n.get("drain"):
        return "draining" if n.get("base", "idle") in ("mixed", "allocated", "completing") else "drained"
    return str(n.get("base", "idle"))


def sinfo(state: dict[str, Any], args: list[str]) -> int:
    if args[:4] != ["-N", "-h", "-n", args[3] if len(args) > 3 else ""] or args[4:] != ["-o", "%N %T %E"]:
        return _err(f"SIMULATED sinfo: unsupported arguments {args!r}")
    node = state["slurm"].get(args[3])
    if node is not None:
        for _ in node.get("partitions") or ["gpu"]:
            sys.stdout.write(f"{args[3]} {_long_state(node)} {node.get('reason') or 'none'}\n")
    return 0


def _operator(state: dict[str, Any]) -> bool:
    # Slurm lets root and SlurmUser update nodes (without accounting no one else gets AdminLevel).
    ops = state.get("slurm_operators")
    return ops is None or os.geteuid() == 0 or pwd.getpwuid(os.geteuid()).pw_name in ops


def scontrol(state: dict[str, Any], args: list[str]) -> int:
    if args[:1] != ["update"]:
        return _err(f"SIMULATED scontrol: unsupported arguments {args!r}")
    if not _operator(state):
        return _err("slurm_update error: Invalid user id")
    kv = dict(a.split("=", 1) for a in args[1:] if "=" in a)
    node = state["slurm"].get(kv.get("NodeName", ""))
    if node is None:
        return _err("slurm_update error: Invalid node name specified")
    want = kv.get("State", "").upper()
    if want in ("DRAIN", "DOWN"):
        if not kv.get("Reason"):
            return _err("You must specify a reason when DOWNING or DRAINING a node. Request denied")
        node.update(reason=kv["Reason"], **({"drain": True} if want == "DRAIN" else {"base": "down"}))
    elif want == "RESUME":
        if not node.get("drain") and node.get("base") != "down":
            return _err("slurm_update error: Invalid node state specified")
        # A resumed down node is idle again (Slurm pings it first: `idle*` for a moment, not simulated).
        node.update(drain=False, reason=None, **({"base": "idle"} if node.get("base") == "down" else {}))
    else:
        return _err(f"SIMULATED scontrol: unsupported state {want!r}")
    save(state)
    return 0


def kubectl(state: dict[str, Any], args: list[str]) -> int:
    k8s = state["k8s"]
    if args[:1] in (["cordon"], ["uncordon"]) and len(args) == 2:
        node = k8s["nodes"].get(args[1])
        if node is None:
            return _err(f'Error from server (NotFound): nodes "{args[1]}" not found')
        want = args[0] == "cordon"
        if bool(node.get("unschedulable")) == want:
            sys.stdout.write(f"node/{args[1]} already {args[0]}ed\n")
            return 0
        node["unschedulable"] = want
        save(state)
        sys.stdout.write(f"node/{args[1]} {args[0]}ed\n")
        return 0
    if args[:1] == ["annotate"]:
        rest = [a for a in args[1:] if a != "--overwrite"]
        if len(rest) != 3 or rest[0] != "node":
            return _err(f"SIMULATED kubectl: unsupported arguments {args!r}")
        node = k8s["nodes"].get(rest[1])
        if node is None:
            return _err(f'Error from server (NotFound): nodes "{rest[1]}" not found')
        notes = node.setdefault("annotations", {})
        if rest[2].endswith("-") and "=" not in rest[2]:
            notes.pop(rest[2][:-1], None)
        else:
            key, _, value = rest[2].partition("=")
            if key in notes and "--overwrite" not in args:
                return _err(f"error: --overwrite is false but found the following declared annotation(s): "
                            f"'{key}' already has a value ({notes[key]})")
            notes[key] = value
        save(state)
        sys.stdout.write(f"node/{rest[1]} annotated\n")
        return 0
    if args[:2] == ["get", "node"] and len(args) == 5 and args[3] == "-o" \
            and args[4].startswith("jsonpath={.metadata.annotations.") and args[4].endswith("}"):
        node = k8s["nodes"].get(args[2])
        if node is None:
            return _err(f'Error from server (NotFound): nodes "{args[2]}" not found')
        key = args[4][len("jsonpath={.metadata.annotations."):-1].replace("\\.", ".")
        sys.stdout.write(str((node.get("annotations") or {}).get(key, "")))
        return 0
    if args[:2] == ["get", "node"] and args[3:] == ["-o", "jsonpath={.spec.unschedulable}"]:
        node = k8s["nodes"].get(args[2])
        if node is None:
            return _err(f'Error from server (NotFound): nodes "{args[2]}" not found')
        sys.stdout.write("true" if node.get("unschedulable") else "")
        return 0
    if args[:3] == ["get", "pods", "-A"] and len(args) == 7 and args[3] == "--field-selector" \
            and args[4].startswith("spec.nodeName=") and args[5:] == ["-o", "json"]:
        name = args[4].split("=", 1)[1]
        items = [_pod(p) for p in k8s["pods"] if p["node"] == name]
        sys.stdout.write(json.dumps({"apiVersion": "v1", "kind": "List", "items": items,
                                     "metadata": {"resourceVersion": ""}}, indent=4) + "\n")
        return 0
    if args[:2] == ["delete", "pod"] and len(args) == 6 and args[2] == "-n" and args[5].startswith("--timeout="):
        ns, name = args[3], args[4]
        left = [p for p in k8s["pods"] if not (p["namespace"] == ns and p["name"] == name)]
        if len(left) == len(k8s["pods"]):
            return _err(f'Error from server (NotFound): pods "{name}" not found')
        k8s["pods"] = left
        save(state)
        sys.stdout.write(f'pod "{name}" deleted\n')
        return 0
    return _err(f"SIMULATED kubectl: unsupported arguments {args!r}")


def _pod(p: dict[str, Any]) -> dict[str, Any]:
    res: dict[str, Any] = {"requests": {"cpu": "4"}}
    if p.get("gpus"):
        res = {"limits": {"nvidia.com/gpu": str(p["gpus"])}, "requests": {"cpu": "4", "nvidia.com/gpu": str(p["gpus"])}}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": p["name"], "namespace": p["namespace"]},
            "spec": {"nodeName": p["node"], "containers": [{"name": "main", "image": "python:3.12", "resources": res}]},
            "status": {"phase": "Running"}}


def main(argv: list[str]) -> int:
    tool, args = argv[0], argv[1:]
    d = _dir()
    d.mkdir(parents=True, exist_ok=True)
    with open(d / LOG_FILE, "a") as f:
        f.write(json.dumps([tool, *args]) + "\n")
    state = load()
    state.setdefault("slurm", {})
    state.setdefault("k8s", {"nodes": {}, "pods": []})
    handler = {"sinfo": sinfo, "scontrol": scontrol, "kubectl": kubectl}.get(tool)
    if handler is None:
        return _err(f"SIMULATED cluster: unknown tool {tool!r}")
    return handler(state, args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
