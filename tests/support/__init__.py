"""The suite's own helpers, imported as `support.NAME` (tests/conftest.py puts tests/ on sys.path): a real
loopback sshd (sshd), PostgreSQL and Slurm started for the session (pg, slurm), the in-process CLI (inproc),
signed Bolt HTTP (slack_harness) with its fake Slack Web API (fakes), the simulated GPU host (gpu_helpers),
and the shared builders of configs, histories and corpora. Nothing here is a test."""
