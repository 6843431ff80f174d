#!/usr/bin/env bash
# The whole test suite on a fresh machine: OpenSSH server (for the loopback sshd
# the tests start), a virtualenv with eaglebot and its test tools, then pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v sshd >/dev/null 2>&1 && [ ! -x /usr/sbin/sshd ]; then
  if [ "$(id -u)" = 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq openssh-server >/dev/null
  else
    echo "the tests need OpenSSH's sshd: sudo apt-get install -y openssh-server" >&2
    exit 2
  fi
fi
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && ! command -v initdb >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq postgresql >/dev/null
  else
    echo "the PostgreSQL store's tests need PostgreSQL's binaries: sudo apt-get install -y postgresql" >&2
    exit 2
  fi
fi
if ! command -v slurmctld >/dev/null 2>&1 && [ ! -x /usr/sbin/slurmctld ]; then
  if [ "$(id -u)" = 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq slurm-wlm munge >/dev/null
  else
    echo "the drain skills' tests need Slurm (a one-node cluster of their own): sudo apt-get install -y slurm-wlm munge" >&2
    exit 2
  fi
fi
python3 -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[dev]'
# Byte-compile the editable sources once: the tests start many `eagle` processes, and where
# PYTHONDONTWRITEBYTECODE is set (as on some CI images) each would compile them again (~0.2 s).
.venv/bin/python -m compileall -q src >/dev/null
# ...and let the test modules' bytecode (pytest's rewritten asserts) be kept too: each xdist worker
# collects all 2,200 tests, 11 s of CPU a worker without it and 5.5 s with (measured).
unset PYTHONDONTWRITEBYTECODE
# Six workers (pytest-xdist) by default: most tests wait on sshd, subprocesses and sockets, so even
# a 2-core machine runs them faster than fewer would (from a fresh clone, 2,494 tests: 4 min 43 s on 4
# workers, 4 min 21 s twice on 6; docs/benchmarks.md, "The test suite").
# The end-to-end tests (marker e2e) are not in this run: `.ci/run` runs them (`-m e2e`).
# EAGLE_TEST_WORKERS=0: one process.
exec .venv/bin/python -m pytest -q -n "${EAGLE_TEST_WORKERS:-6}" "$@"
