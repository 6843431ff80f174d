"""Facts about a host: each a command plus a pure parser, tested on real captures (tests/fixtures).

nvsmi (nvidia-smi, fuser), procs (/proc/PID/stat, owner and command line, environ),
ports (who listens on a TCP port), sglang_args (a launch command's flags), sglang (SGLang's
speculative rules, logs, /server_info, bench_serving output). Skills and `eagle doctor`
run the same commands through a host's `eaglebot.sdk.Host` and read them with the same
parsers; the audit store reads its own /proc with `procs.parse_stat`.
"""
