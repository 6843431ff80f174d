"""Write src/eaglebot/facts/data/sglang-surface-<version>.json, the version-drift sentinel's record of a release,
from its REAL wheel (run by scripts/capture/surface.sh, by hand; CI re-reads the real wheels and
checks that each record still matches, tests/test_sglang_releases.py).

    .venv/bin/python scripts/capture/surface_capture.py SGLANG_ROOT OUT.json

SGLANG_ROOT is the `sglang` folder of an unpacked wheel (every Python file; no install, no torch):
the sentinel program `draft.check`'s relaunch pre-flight and `eagle doctor` send to a host reads it
exactly as it reads a host's installed package.
"""
from __future__ import annotations

import json
import sys

from eaglebot.facts.host_programs import sglang_surface

VOLATILE = ("root", "elapsed_s")   # where it was read and how long that took: not part of the record


def main(root: str, out: str) -> None:
    rec = {k: v for k, v in sglang_surface.fingerprint(root).items() if k not in VOLATILE}
    with open(out, "w") as f:
        json.dump(rec, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"wrote {out}: SGLang {rec['sglang']}, {len(rec['flags']['options'])} flags, "
          f"{len(rec['env']['declared']) + len(rec['env']['read'])} env vars, {len(rec['hooks'])} capture hooks")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
