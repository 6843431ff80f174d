"""One `python -m sglang.bench_serving` run on the host, as bench.serving and bench.batches run it:
random-ids, fixed lengths, cache flushed, a fresh `--output-file` (the tool appends), and its JSONL
record read back."""
from __future__ import annotations

import shlex
from typing import Any

from eaglebot.errors import StepFailed
from eaglebot.sdk import SkillContext

from eaglebot.facts.sglang import release


def argv(python: str, port: int, num_prompts: int, input_len: int, output_len: int, max_concurrency: int,
         output_file: str, extra: list[str] | None = None, base: str | None = None) -> list[str]:
    """`base`: the server's URL where the host reaches it (server.base_url), default 127.0.0.1."""
    return [python, "-m", "sglang.bench_serving", "--backend", "sglang",
            "--base-url", base or f"http://127.0.0.1:{port}", "--dataset-name", "random-ids",
            "--random-input-len", str(input_len), "--random-output-len", str(output_len),
            "--random-range-ratio", "1.0", "--num-prompts", str(num_prompts),
            "--max-concurrency", str(max_concurrency), "--flush-cache",
            "--output-file", output_file, *(extra or [])]


def last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""


async def run_once(ctx: SkillContext, cmd: list[str], out_file: str, timeout_s: float) -> dict[str, Any]:
    """Run it and return its JSONL record; a run without one fails the step with its last words."""
    res = await ctx.host.run(f"rm -f {shlex.quote(out_file)} && {shlex.join(cmd)}", timeout=timeout_s,
                             on_output=lambda _s, line: ctx.log(line))
    printed = res.stdout + res.stderr
    if res.timed_out:
        raise StepFailed(f"the benchmark did not finish within {timeout_s:g}s", output=release.tail(printed, 60))
    fres = await ctx.host.run(f"cat {shlex.quote(out_file)}", timeout=30)
    record = release.parse_bench_jsonl(fres.stdout) if fres.exit_status == 0 else None
    if record is None:
        raise StepFailed(f"the benchmark gave no numbers: its JSONL file {out_file} "
                         + ("does not exist" if fres.exit_status != 0 else "holds no record")
                         + f" (exit status {res.exit_status}): {last_line(printed) or 'no output'}",
                         output=release.tail(printed, 60))
    return record
