"""Programs that run on the GPU host, in the host's own Python: each module here is a program whose
text eaglebot sends on stdin (`{python} - ARGS`), not a library eaglebot imports to do its work.

- `eagle3_source` + `eagle3_probe`: which hidden states SGLang hands an EAGLE-3 (or DFLASH) draft,
  sent as one text by `facts.spec.eagle3.probe_program`.
- `sglang_surface`: the installed SGLang's surface, for the version-drift sentinel
  (`facts.sglang.drift.program`).
- `spec_files`: the model folders and SGLang names a method's pre-flight needs
  (`facts.spec.methods.program`).

Their constraints (the host has an unknown Python, SGLang, maybe a training job, and no eaglebot):
- standard library only, and it must run on Python >= 3.9 (no `match`, no `X | Y` outside annotations,
  which `from __future__ import annotations` keeps unevaluated);
- never import eaglebot, nor sglang or torch: SGLang's package is located with
  `importlib.util.find_spec` and its source read, never run; no tensor is loaded (a safetensors
  file's header only); no GPU is touched; nothing on the host is written;
- the one import between them is `eagle3_probe`'s of `eagle3_source`, relative and on lines marked
  `# host: inlined`, which `probe_program` drops when it joins the two texts;
- the program prints ONE marked line, `MARK {json}` or `UNAVAILABLE reason` (each module's
  constants), read by `facts.fact.program_answer`; anything else it prints is ignored;
- the work runs under `if __name__ == "__main__":`, so eaglebot can import a module for its constants
  and call its functions in process (`spec_files.read` in `methods.check_local`, the capture scripts).

Checked by .importlinter ("Host programs import nothing of eaglebot") and tests/test_host_programs.py
(each compiles to Python 3.9's grammar and imports only `sys.stdlib_module_names`). The short programs
kept as strings beside their parsers (`sglang.launch_table.PROBE`, `spec.probe.PROBE_PY`, ...) are
not these: some import the host's sglang on purpose.
"""
