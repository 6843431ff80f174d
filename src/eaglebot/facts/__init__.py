"""Facts about a host: each a command plus a pure parser, tested on real captures (tests/fixtures).

By subject:
- `gpu`: nvidia-smi and fuser (`nvsmi`, `nvsmi_watch`), GPU health readings and their verdict
  (`health`, `health_probe`), the kernel log's Xids (`xid`), DCGM's diagnostic (`dcgm`).
- `sglang`: what each SGLang release does and prints (`release`: speculative defaults and their
  resolution, log lines, /server_info, bench_serving output), a launch command's flags (`cmdline`),
  SGLang's own launch parser (`launch_table`), where a start-up is (`startup`), adaptive steps
  (`adaptive`), the version-drift sentinel (`drift`).
- `spec`: speculative decoding and its drafts: what an EAGLE-3 draft is fed (`eagle3`) and trained
  on (`draft_contract`), what it is accepted at (`draft_accept`), the per-method pre-flight
  (`methods`, `dflash`, `verdict`), speculation really on (`live`), a tuning's probes (`probe`).
- `bench`: is a benchmark worth recording (`sanity`), are greedy outputs unchanged (`correctness`).
- `host`: the host's processes (`procs`), listeners (`ports`), home and state folder (`paths`),
  and its scheduler's view of the node (`cluster`: Slurm, Kubernetes).
- `host_programs`: the programs sent to a GPU host's own Python (standard library only; their
  constraints are in that package's docstring); their answers are read by the modules above.
- `data/`: tables captured from real SGLang wheels (eagle3 capture points, launch flags, surfaces).

The GPU facts are objects that hold command and parser (`fact.Fact`: `gpu.nvsmi.GPU_TABLE`,
`GPU_MEMORY`, `COMPUTE_APPS`, `FUSER`, `gpu.health.HEALTH`, `NVLINK_STATUS`, `NVLINK_ERRORS`): a
skill gathers one through it, and tests/test_fact_captures.py holds each to a real capture of its
exact command. Skills and `eagle doctor` run the same commands through a host's
`eaglebot.sdk.Host` and read them with the same parsers; the audit store reads its own /proc with
`host.procs.parse_stat`. The arrows run one way (.importlinter, "facts by subject"): `spec` reads
`sglang` and `bench`; `sglang` and `spec` send host programs and read their answers with
`fact.program_answer`; the other subjects are independent.
"""
