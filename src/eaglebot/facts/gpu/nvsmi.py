"""nvidia-smi and `fuser -v /dev/nvidia*`: the facts (query + parser, `NvsmiFact`), pure parsers, one runner.

Each parser takes the text a tool printed and returns plain data; they are tested
byte for byte on real captured output (`tests/fixtures/nvidia-smi/`, indexed by command in
tests/fixtures/captures.json). A skill gathers a fact (`GPU_TABLE`, `GPU_MEMORY`,
`COMPUTE_APPS`, `FUSER`) through its object, never by pasting its arguments. `run_nvsmi` and
`FUSER.gather` are the only functions here that touch a host (any `eaglebot.sdk.Host`: the
GPU skills pass `ctx.host`, `eagle doctor` the host's transport). `run_nvsmi` runs the
binary the host var `nvidia_smi` names (default: `nvidia-smi` on PATH) and turns its
own exit codes (9 driver not loaded, 14 InfoROM corrupted, 15 GPU fallen off the bus,
127 not installed) into one clear sentence instead of a parse error.
"""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Any, Callable, Generic, Mapping, TypeVar

from eaglebot.errors import StepFailed
from eaglebot.sdk import Host

# eagle doctor's query (the GPU skills gather the facts at the end of this module).
NVSMI_TIMEOUT_S = 30.0


class NvsmiError(StepFailed):
    """nvidia-smi could not report: one sentence a person can act on."""


class ParseError(ValueError):
    pass


# -- generic CSV ----------------------------------------------------------------------

_UNIT = re.compile(r"^(-?\d+(?:\.\d+)?)\s*(MiB|GiB|KiB|%|W|MHz|C)$")


def strip_unit(value: str) -> str:
    """`'19592 MiB'` -> `'19592'`; values without a unit are returned unchanged."""
    m = _UNIT.match(value.strip())
    return m.group(1) if m else value.strip()


def _mib(value: str) -> int:
    v = value.strip()
    m = _UNIT.match(v)
    if m:
        num, unit = float(m.group(1)), m.group(2)
        if unit == "GiB":
            num *= 1024
        elif unit == "KiB":
            num /= 1024
        elif unit != "MiB":
            raise ParseError(f"not a memory size: {value!r}")
        return int(round(num))
    try:
        return int(float(v))
    except ValueError:
        raise ParseError(f"not a memory size: {value!r}") from None


def split_csv(text: str) -> list[list[str]]:
    """Rows of nvidia-smi's CSV (`a, b, c`); blank lines are dropped.

    nvidia-smi never quotes fields, and the fields we query (indices, UUIDs, numbers,
    process names) contain no ", " themselves, except a process name, which is
    handled by the compute-apps parser.
    """
    return [[c.strip() for c in line.split(", ")] for line in text.splitlines() if line.strip()]


def _header_name(col: str) -> str:
    """`'memory.total [MiB]'` -> `'memory.total'`."""
    return re.sub(r"\s*\[[^\]]*\]$", "", col.strip())


def parse_query(text: str, fields: list[str] | None = None) -> list[dict[str, str]]:
    """Parse a `--query-gpu=...` output, with or without header, with or without units.

    With a header (`--format=csv`) the column names come from it and `fields` may be
    omitted; without one, `fields` names the columns in the order queried. Values keep
    their text with any unit removed (`'143771 MiB'` -> `'143771'`, `'108.32 W'` -> `'108.32'`).
    """
    rows = split_csv(text)
    if not rows:
        return []
    if _looks_like_header(rows[0]):
        header = [_header_name(c) for c in rows[0]]
        rows = rows[1:]
        if fields is None:
            fields = header
        elif header != list(fields):
            raise ParseError(f"header {', '.join(header)!r} does not match the query {', '.join(fields)!r}")
    elif fields is None:
        raise ParseError("no header line and no field names given")
    out = []
    for r in rows:
        if len(r) != len(fields):
            raise ParseError(f"expected {len(fields)} columns, got {len(r)}: {', '.join(r)!r}")
        out.append({f: strip_unit(v) for f, v in zip(fields, r)})
    return out


def _looks_like_header(row: list[str]) -> bool:
    return bool(row) and _header_name(row[0]) in ("index", "uuid", "name", "pid", "pci.bus_id", "count")


def parse_memory_used(text: str) -> dict[int, int]:
    """`--query-gpu=index,memory.used` (units or `nounits`) -> {gpu index: MiB used}."""
    out: dict[int, int] = {}
    for row in parse_query(text, ["index", "memory.used"]):
        out[_index(row["index"])] = _mib(row["memory.used"])
    return out


# The GPU table the GPU skills read (a real capture exists of exactly this query, with its
# header and units: h200-query-gpu-full.csv); the header is checked against the fields.
GPU_TABLE_FIELDS = ["index", "uuid", "name", "memory.total", "memory.used", "memory.free", "utilization.gpu",
                    "temperature.gpu", "power.draw"]


@dataclass(frozen=True)
class GpuRow:
    index: int
    uuid: str
    name: str
    used_mib: int
    total_mib: int
    utilization: str      # percent as printed ("[N/A]" where the driver has none)


def parse_gpus(text: str) -> list[GpuRow]:
    """`--query-gpu=<GPU_TABLE_FIELDS> --format=csv` -> one GpuRow per GPU, in nvidia-smi's order."""
    return [GpuRow(_index(r["index"]), r["uuid"], r["name"], _mib(r["memory.used"]), _mib(r["memory.total"]),
                   r["utilization.gpu"])
            for r in parse_query(text, GPU_TABLE_FIELDS)]


def parse_gpu_names(text: str) -> dict[int, str]:
    """`--query-gpu=index,name` -> {gpu index: product name}, in nvidia-smi's order."""
    return {_index(r["index"]): r["name"] for r in parse_query(text, ["index", "name"])}


def _index(v: str) -> int:
    try:
        return int(v)
    except ValueError:
        raise ParseError(f"not a GPU index: {v!r}") from None


# -- compute apps -----------------------------------------------------------------------

@dataclass(frozen=True)
class ComputeApp:
    pid: int
    process_name: str
    used_mib: int | None       # None: nvidia-smi printed "[N/A]" (e.g. MIG, no permission)
    gpu_uuid: str | None       # None when the query had no gpu_uuid column


def parse_compute_apps(text: str) -> list[ComputeApp]:
    """`--query-compute-apps=pid,process_name,used_memory[,gpu_uuid]` (noheader, units or not).

    Empty output means no process. A process on two GPUs appears twice. The process
    name is whatever sits between the first and the last numeric columns, so a name
    containing ", " still parses.
    """
    apps: list[ComputeApp] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = [p.strip() for p in line.split(", ")]
        if parts[0] == "pid":       # a header line (--format=csv)
            continue
        uuid: str | None = None
        if len(parts) >= 4 and parts[-1].startswith(("GPU-", "MIG-")):
            uuid = parts.pop()
        if len(parts) < 3:
            raise ParseError(f"unexpected compute-apps line: {line!r}")
        try:
            pid = int(parts[0])
        except ValueError:
            raise ParseError(f"unexpected compute-apps line: {line!r}") from None
        mem = parts[-1]
        used = None if mem.startswith("[") else _mib(mem)
        apps.append(ComputeApp(pid, ", ".join(parts[1:-1]), used, uuid))
    return apps


# -- fuser ------------------------------------------------------------------------------

@dataclass(frozen=True)
class FuserEntry:
    device: str
    user: str
    pid: int
    access: str
    command: str

    @property
    def gpu(self) -> int | None:
        """GPU index for /dev/nvidiaN; None for nvidiactl, nvidia-uvm, ..."""
        m = re.fullmatch(r"/dev/nvidia(\d+)", self.device)
        return int(m.group(1)) if m else None


_FUSER_LINE = re.compile(r"^(?:(?P<dev>\S.*?):)?\s+(?P<user>\S+)\s+(?P<pid>\d+)\s+(?P<access>[a-zA-Z.]{5,})\s+(?P<cmd>.*)$")


def parse_fuser(text: str) -> list[FuserEntry]:
    """`fuser -v /dev/nvidia* 2>&1` -> one entry per (device, pid).

    fuser writes the PIDs to stdout and everything else to stderr, so the skill merges
    the two streams (as the captured fixture shows). A line without a device name
    continues the previous device. Header, `kernel` users and error lines are skipped.
    """
    out: list[FuserEntry] = []
    device = ""
    for line in text.splitlines():
        if not line.strip() or line.split()[:2] == ["USER", "PID"]:
            continue
        m = _FUSER_LINE.match(line)
        if not m:
            dev = re.match(r"^(\S+):\s", line)
            if dev:
                device = dev.group(1)   # e.g. "/dev/nvidia0: root kernel mount ..."
            continue
        if m.group("dev"):
            device = m.group("dev")
        if not device:
            continue
        out.append(FuserEntry(device, m.group("user"), int(m.group("pid")), m.group("access"),
                              m.group("cmd").strip()))
    return out


# -- selection ------------------------------------------------------------------------

def parse_gpu_selection(value: int | str | list[Any] | None) -> list[int] | None:
    """`[0, 1]`, `"0,1"`, `"0 1"`, `0` -> [0, 1] / [0]; None or "" or "all" -> None (all GPUs)."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError("gpus must be GPU indices, not a boolean")
    if isinstance(value, int):
        items: list[Any] = [value]
    elif isinstance(value, str):
        s = value.strip().strip("[]")
        if s in ("", "all"):
            return None
        items = [x for x in re.split(r"[,\s]+", s) if x]
    else:
        items = list(value)
    out: list[int] = []
    for x in items:
        try:
            i = int(x)
        except (TypeError, ValueError):
            raise ValueError(f"GPU index {x!r} is not a number") from None
        if i < 0:
            raise ValueError(f"GPU index {i} is negative")
        if i not in out:
            out.append(i)
    return out


# -- running it -------------------------------------------------------------------------

EXIT_MEANINGS = {
    9: "the NVIDIA driver is not loaded (nvidia-smi exit 9)",
    14: "a GPU's InfoROM is corrupted (nvidia-smi exit 14)",
    15: "a GPU has fallen off the bus (nvidia-smi exit 15); the node needs attention",
}


def nvsmi_path(host_vars: Mapping[str, Any]) -> str:
    """The nvidia-smi to run: the host var `nvidia_smi` (a driver outside PATH), else the one on PATH."""
    return str(host_vars.get("nvidia_smi") or "nvidia-smi")


def nvsmi_command(path: str, args: list[str]) -> str:
    return shlex.join([path, *args])


def explain_exit(host: str, path: str, rc: int | None, stdout: str, stderr: str) -> str:
    """One sentence for a failed nvidia-smi call (pure: tested without a host)."""
    if rc in (126, 127):
        return f"nvidia-smi not found on {host} ({path}); install the NVIDIA driver or set the host var nvidia_smi"
    if rc in EXIT_MEANINGS:
        return f"GPU check failed on {host}: {EXIT_MEANINGS[rc]}"
    last = (stderr.strip() or stdout.strip()).splitlines()[-1:] or [""]
    detail = f": {last[0][:200]}" if last[0] else ""
    return f"nvidia-smi failed on {host} with exit status {rc}{detail}"


async def run_nvsmi(host: Host, host_vars: Mapping[str, Any], args: list[str],
                    timeout: float = NVSMI_TIMEOUT_S) -> str:
    """Run nvidia-smi (nvsmi_path of `host_vars`) with `args` on the host; return stdout or raise NvsmiError."""
    path = nvsmi_path(host_vars)
    res = await host.run(nvsmi_command(path, args), timeout=timeout)
    if res.timed_out:
        raise NvsmiError(f"nvidia-smi did not answer within {timeout:g}s on {host.name}; the driver may be hung")
    if res.exit_status != 0:
        raise NvsmiError(explain_exit(host.name, path, res.exit_status, res.stdout, res.stderr))
    return res.stdout


_T = TypeVar("_T")


def parsed(what: str, host: str, fn: Callable[[str], _T], text: str) -> _T:
    """Apply a parser; unexpected output becomes one sentence, not a traceback."""
    try:
        return fn(text)
    except ParseError as e:
        raise NvsmiError(f"unexpected {what} output from nvidia-smi on {host}: {e}") from None


@dataclass(frozen=True)
class NvsmiFact(Generic[_T]):
    """One nvidia-smi fact: its exact arguments and the parser of what they print."""

    args: tuple[str, ...]
    parse: Callable[[str], _T]
    what: str        # named in the sentence about unexpected output: "--query-gpu"

    def command(self, host_vars: Mapping[str, Any]) -> str:
        return nvsmi_command(nvsmi_path(host_vars), list(self.args))

    async def gather(self, host: Host, host_vars: Mapping[str, Any], *, timeout: float = NVSMI_TIMEOUT_S) -> _T:
        """Run the query and parse it; NvsmiError (one sentence) when nvidia-smi cannot tell."""
        return parsed(self.what, host.name, self.parse, await run_nvsmi(host, host_vars, list(self.args), timeout))


@dataclass(frozen=True)
class FuserFact:
    """Who holds /dev/nvidia* (`fuser -v`, both streams): where nvidia-smi names nobody."""

    parse: Callable[[str], list[FuserEntry]] = parse_fuser

    def command(self, host_vars: Mapping[str, Any]) -> str:
        # The host var `fuser` may name another binary. The glob is ours (never user input);
        # fuser -v writes its table to stderr, hence 2>&1.
        return f"LC_ALL=C {shlex.quote(str(host_vars.get('fuser') or 'fuser'))} -v /dev/nvidia* 2>&1"

    async def gather(self, host: Host, host_vars: Mapping[str, Any]) -> tuple[list[FuserEntry], str]:
        """([entries], "") or ([], why it cannot tell)."""
        res = await host.run(self.command(host_vars), timeout=NVSMI_TIMEOUT_S)
        if res.exit_status in (126, 127):
            return [], f"fuser is not installed on {host.name}"
        return self.parse(res.stdout), ""


# The facts the GPU skills gather (the simulator prints exactly these formats).
GPU_TABLE = NvsmiFact((f"--query-gpu={','.join(GPU_TABLE_FIELDS)}", "--format=csv"), parse_gpus, "--query-gpu")
GPU_MEMORY = NvsmiFact(("--query-gpu=index,memory.used", "--format=csv,noheader,nounits"), parse_memory_used,
                       "--query-gpu")
COMPUTE_APPS = NvsmiFact(("--query-compute-apps=pid,process_name,used_memory,gpu_uuid", "--format=csv,noheader,nounits"),
                         parse_compute_apps, "--query-compute-apps")
GPU_NAMES = NvsmiFact(("--query-gpu=index,name", "--format=csv,noheader"), parse_gpu_names, "--query-gpu")
FUSER = FuserFact()
