"""The REAL SGLang source of a version, for the draft-contract tests and the release matrix
(tests/test_sglang_releases.py): the wheel from PyPI (`pip download --no-deps sglang==VERSION`,
6-40 MB, seconds), its Python files unpacked (never installed, nothing imported: the probe and the
sentinel read them as they read a host's installed package).

Cached in $EAGLE_SGLANG_SRC (default ~/.cache/eaglebot/sglang-src: the wheel in wheels/VERSION/, its
model files in VERSION/, every file in VERSION-full/), fetched on first use (CI: a fresh machine
downloads 0.5.10, 0.5.17 and 0.5.23 once, about 70 MB, seconds);
`python tests/support/sglang_source.py [--full] 0.5.23` fetches by hand. Nothing of SGLang is vendored here.
A machine that cannot download it fails the test that needs it, saying so (never a skip).
"""
from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

# What the probe reads: the package's version, its model files, and the model runner (where the
# draft's config key is read). The rest of the wheel is not unpacked.
KEEP = ("sglang/__init__.py", "sglang/_version.py", "sglang/version.py", "sglang/srt/__init__.py",
        "sglang/srt/models/", "sglang/srt/model_executor/")


def cache_root() -> Path:
    return Path(os.environ.get("EAGLE_SGLANG_SRC") or Path.home() / ".cache" / "eaglebot" / "sglang-src")


def real_wheel(version: str) -> Path:
    """The real wheel of `version`, downloaded once (kept: the models-only and the full unpacking share it)."""
    folder = cache_root() / "wheels" / version
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as lock:        # xdist workers: one downloads, the others wait
        fcntl.flock(lock, fcntl.LOCK_EX)
        found = sorted(folder.glob("sglang-*.whl"))
        if found:
            return found[0]
        with tempfile.TemporaryDirectory(dir=folder) as tmp:
            # one build on every machine (the Python files are the same in each; its compiled parts
            # are never used), so a CI runner of another Python or CPU reads the same bytes
            res = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                                  "--disable-pip-version-check", "--only-binary=:all:", "--python-version", "3.11",
                                  "--platform", "manylinux_2_34_x86_64", f"sglang=={version}", "-d", tmp],
                                 capture_output=True, text=True, timeout=600)
            wheels = list(Path(tmp).glob("sglang-*.whl"))
            if res.returncode != 0 or not wheels:
                raise RuntimeError(f"could not download the real sglang=={version} wheel (pip: "
                                   f"{(res.stderr.strip().splitlines() or ['no output'])[-1]}); these tests read "
                                   f"its source: give this machine PyPI access or set EAGLE_SGLANG_SRC")
            return wheels[0].rename(folder / wheels[0].name)


def real_sglang(version: str, full: bool = False) -> Path:
    """The `sglang` folder of the real wheel of `version` (downloaded and unpacked once); `full`: every
    Python file of the package (the version-drift sentinel reads flags, env vars and field names
    from all over `srt/`), in a folder of its own."""
    root = cache_root() / (f"{version}-full" if full else version)
    done = root / ".complete"
    if done.exists():
        return root / "sglang"
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            with zipfile.ZipFile(real_wheel(version)) as z:
                z.extractall(root, [n for n in z.namelist() if n.endswith(".py")
                                    and n.startswith(("sglang/",) if full else KEEP)])
            done.write_text(version + "\n")
    return root / "sglang"


if __name__ == "__main__":
    whole = "--full" in sys.argv[1:]
    for v in sys.argv[1:]:
        if v != "--full":
            print(real_sglang(v, whole))
