"""Facts about a host: each a command plus a pure parser, tested on real captures (tests/fixtures).

The GPU facts are objects that hold both (`fact.Fact`: `nvsmi.GPU_TABLE`, `GPU_MEMORY`,
`COMPUTE_APPS`, `FUSER`, `health.HEALTH`, `NVLINK_STATUS`, `NVLINK_ERRORS`): a skill gathers
one through it, and tests/test_fact_captures.py holds each to a real capture of its exact
command. nvsmi (nvidia-smi, fuser), health (GPU health readings, Xids, DCGM), procs
(/proc/PID/stat, owner and command line, environ), ports (who listens on a TCP port),
sglang_args (a launch command's flags), sglang (SGLang's speculative rules, logs,
/server_info, bench_serving output). Skills and `eagle doctor` run the same commands through
a host's `eaglebot.sdk.Host` and read them with the same parsers; the audit store reads its
own /proc with `procs.parse_stat`.
"""
