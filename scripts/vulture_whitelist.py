"""Names vulture cannot see used (scripts/check-arch.sh passes this file with the package).

Each entry is read, never run: `_.name` marks `name` as used wherever it is defined. Only real
false positives belong here, each with why; code that is unused is deleted instead.
Pydantic validators and Bolt handlers are left out by decorator in check-arch.sh.
"""
# ruff: noqa
# mypy: ignore-errors
_ = object()

# Pydantic reads the class attribute `model_config` (extra="forbid" and the like).
_.model_config

# Slack payload fields (frontends/slack/payload.py): declared so pydantic checks their type in
# every signed request before Bolt sees it; nothing reads them afterwards, by design.
_.action_id, _.block_id, _.action_ts, _.channel_id, _.user_id, _.team, _.enterprise
_.authorizations, _.trigger_id, _.is_enterprise_install
# ... and Bolt's `authorize` callback: Bolt passes its arguments by name (slack/app.py).
_.enterprise_id, _.team_id, _.logger

# TypedDict keys and dataclass fields of --json shapes, read by subscript or through asdict():
# the audit tables' rows (store/rows.py), a step line of RunView, `eagle audit verify`'s report.
_.started_at, _.finished_at, _.created_at, _.requested_at, _.decided_at
_.acquired_at, _.set_at, _.recorded_at, _.changed_at, _.opened_run, _.opened_at, _.closed_run
_.closed_at, _.closed_kind, _.closed_by, _.cleaned_at, _.from_state, _.to_state, _.silenced_until, _.silenced_by
_.multi_host, _.rows_checked
_.run_status, _.run_channel, _.run_thread_ts, _.hash, _.run_finished_at
_.renewed_at, _.expires_at, _.seen_at, _.config_class
# ... and `StepEnd` (store/rows.py), the record a step's end is written from, read with .get()
_.output_bytes, _.output_sha256

# A function only mypy reads: it proves Store and AsyncStore satisfy their protocols (store/aio.py).
_._faces
# Store methods only the tests call, to set up or read a state (tests/support/store_contract.py, the lock
# and orphan tests): another run's locks, a step's process records, a host's run ids.
_.acquire_hosts, _.step_procs, _.host_run_ids

# Part of an lru_cache key (chat/router.py `_load_cached`): a changed file misses the cache.
_.mtime_ns

# Jinja2's sandbox reads `intercepted_binops` (engine/templating.py: the rendering budget).
_.intercepted_binops

# PEP 562 module __getattr__ (store/__init__.py: lazy imports).
_.__getattr__

# Bolt calls a class middleware's async_process (frontends/slack/context.py InjectContext).
_.async_process

# asyncssh calls these SSHClientSession hooks (transport/ssh.py).
_.exit_status_received, _.exit_signal_received

# The simulated SGLang server is an http.server handler (sim/sglang_pkg): the standard library
# calls do_GET/do_POST/log_message and reads the class attributes.
_.do_GET, _.do_POST, _.log_message, _.protocol_version, _.server_version, _.daemon_threads, _.request_queue_size
# The fake `sglang` package says what it is to whoever imports it.
_.SIMULATED

# The simulator's knobs (sim/gpu_state.py): the tests set them to stage a sick or busy GPU;
# docs/skills.md lists them.
_.set_residual, _.set_exit_code, _.set_health, _.set_unknown_fields, _.set_kernel_log, _.set_hang, _.memory_used
_.set_teardown_xids, _.set_hard_exit

# slack_sdk's AsyncRetryHandler calls _can_retry_async (frontends/slack/client.py _ErrorCount).
_._can_retry_async

# ast node fields the eagle3 probe clears before compiling SGLang's method on its own (the
# compiler reads them: a decorator or an annotation would need torch/typing in scope).
_.decorator_list, _.returns
# RemoteProcRow.step_started_at: a column of pending_procs' join, read by engine/procs.clear_pending as row.get(...).
_.step_started_at
# prometheus_client's Collector interface: the registry calls collect() on every scrape.
_.collect
# facts.spec.methods.check_local: the method pre-flight on this machine's folders, the entry the issue-44
# corpus (a test suite outside the package) calls; docs/methods.md names it.
_.check_local

# slack_sdk calls these on its clients; the chat test bot's in-memory ones override them
# (frontends/slack/inmemory.py). The bot's `click` and the `chatbot` fixture are for the tests
# of teams (docs/testing.md) and of the product (tests/test_slack_handlers.py), which vulture does not read.
_.api_call, _._upload_file, _._perform_http_request, _.click, _.chatbot

# Keys of the tuner's JSON records (tuning/records.py): written by a skill or by a dict literal,
# read by subscript, .get() or `eagle tune --json`'s readers.
_.acceptance_source, _.sglang_version, _.predicted_tok_s, _.error_pct, _.expected_tok_s, _.output_throughput
_.median_ttft_ms, _.throughput_spread
