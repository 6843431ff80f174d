"""The smaller items of issue 34: the docs say the code's defaults, `--config`'s help says the
real discovery order, and the missing-token sentence points at a section that exists."""
from __future__ import annotations

import os
import re
from pathlib import Path

from support.helpers import eagle

from eaglebot.config import RegressionConfig
from eaglebot.configfile import SYSTEM_CONFIG

ROOT = Path(__file__).resolve().parents[1]


def test_the_regression_table_in_configuration_md_gives_the_codes_defaults():
    doc = (ROOT / "docs" / "configuration.md").read_text()
    section = doc[doc.index("### `regression`"):doc.index("### `health_watch`")]
    # the generated table (cog, from the model): key | type | default | allowed | meaning
    rows = dict(re.findall(r"^\| `(\w+)` \| [^|]+ \| ([^|]+?) \|", section, re.M))
    defaults = RegressionConfig()
    assert set(rows) == set(RegressionConfig.model_fields)
    for name, shown in rows.items():
        assert float(shown) == float(getattr(defaults, name)), f"{name}: the doc says {shown}"


def test_config_help_says_where_an_unnamed_config_is_found(tmp_path):
    res = eagle("run", "--help", cwd=tmp_path)
    text = " ".join(res.stdout.split())
    assert "$EAGLE_CONFIG, else ./eagle.yaml or the nearest eagle.yaml in a parent folder, else " \
           f"~/.config/eaglebot/eagle.yaml, else {SYSTEM_CONFIG}" in text, text
    assert "default ./eagle.yaml)" not in text


def test_the_missing_token_sentence_points_at_a_section_that_exists(tmp_path):
    env = {k: "" for k in ("SLACK_BOT_TOKEN", "SLACK_APP_TOKEN", "SLACK_SIGNING_SECRET")}
    res = eagle("serve", cwd=tmp_path, env={**os.environ, **env}, timeout=60)
    assert res.returncode == 2 and "SLACK_BOT_TOKEN is not set" in res.stderr
    m = re.search(r"\((docs/\w+\.md), '([^']+)'", res.stderr)
    assert m, res.stderr
    doc = (ROOT / m.group(1)).read_text()
    assert re.search(rf"^#+ .*{re.escape(m.group(2))}", doc, re.M), f"no heading {m.group(2)!r} in {m.group(1)}"
