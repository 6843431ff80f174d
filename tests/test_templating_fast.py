"""Templates that only substitute variables are rendered without Jinja (engine/templating.py):
held here to Jinja's own output on a corpus, both for plain and shell fields, and shown to keep
Jinja out of a fresh `eagle run hello -H local`."""
from __future__ import annotations

import itertools
import json
import subprocess
import sys

import pytest

from eaglebot.engine import templating, templating_jinja

CTX = {"greeting": "hello", "n": 3, "ratio": 0.1, "flag": True, "off": False, "big": 10**30,
       "spaced": "a b; rm -rf /", "sub": "$(reboot)", "quote": "it's", "empty": "", "braces": "{{ n }}",
       "uni": "héllo ✓", "layers": [2, 30, 58], "nothing": None, "raw": templating.Raw("-l -a"),
       "nested": {"a": 1}, "nl": "line\nnext"}

TEMPLATES = [
    "{{ greeting }}", " {{ greeting }} ", "{{greeting}}", "{{\tn\n}}", "echo {{ greeting }} from $(hostname)",
    "n={{ n }}", "{{ n }}{{ ratio }}", "{{ flag }} {{ off }}", "{{ big }}", "x {{ spaced }} y", "{{ sub }}",
    "{{ quote }}", "[{{ empty }}]", "{{ braces }}", "{{ uni }}!", "{{ layers }}", "at {{ layers }}",
    "{{ nothing }}", "v={{ nothing }}", "ls {{ raw }}", "{{ nested }}", "a{{ nl }}b", "{ {{ n }} }",
    "}} {{ n }} {{", "{{ n }}}", "{{{ n }}", "trailing\n", "{{ n }}\n", "{{ n | string }}", "{{ n + 1 }}",
    "{{ true }}", "{{ none }}", "{{ range }}", "{{ dict }} x", "{{ cycler }}", "{% if flag %}y{% endif %}", "{# c #}{{ n }}", "{{- n }}",
    "{{ n -}}", "a\r\n{{ n }}", "{{ greeting.upper() }}", "{{ layers[0] }}", "{{ raw | raw }}",
    "{{ missing }}", "x {{ missing }}", "{{ not }}", "{{ if }}",
]


def jinja(value, ctx, shell):
    try:
        return ("ok", templating_jinja.render_value(value, ctx, shell=shell))
    except templating.TemplateFailure as e:
        return ("failed", str(e))


def ours(value, ctx, shell):
    try:
        return ("ok", templating.render_value(value, ctx, shell=shell))
    except templating.TemplateFailure as e:
        return ("failed", str(e))


@pytest.mark.parametrize("shell", [False, True])
def test_every_template_renders_as_jinja_renders_it(shell):
    fast = 0
    for t in TEMPLATES:
        assert ours(t, CTX, shell) == jinja(t, CTX, shell), t
        fast += templating._fast(t, CTX, shell) is not templating._SLOW
    # structures of templates, as `with:` holds them
    for a, b in itertools.product(TEMPLATES[:12], TEMPLATES[-12:]):
        value = {"a": a, "l": [b, a, 7]}
        assert ours(value, CTX, shell) == jinja(value, CTX, shell), value
    assert fast >= 15   # the corpus exercises the fast path, not only the fallback


def test_the_fast_path_takes_only_plain_substitution():
    for t in ["{{ greeting }}", "say {{ greeting }} {{ n }}", "{{ flag }}"]:
        assert templating._fast(t, CTX, False) is not templating._SLOW, t
    for t in ["{{ n + 1 }}", "{{ missing }} x", "{% if flag %}{% endif %}", "{{ raw }} x", "{{ layers }} x",
              "{{ true }} x", "a\r\n{{ n }}", "{{- n }}"]:
        assert templating._fast(t, CTX, False) is templating._SLOW, t
    assert templating._fast("ls {{ raw }}", CTX, True) is templating._SLOW   # `Raw` is the sandbox's to finalize


def test_names_and_syntax_agree_with_jinja():
    assert set(templating_jinja._ENV.globals) <= templating._NOT_NAMES
    for t in TEMPLATES:
        assert templating.names_used(t) == (templating_jinja.template_names(t) if templating.is_template(t) else set()), t
        assert (templating.check_syntax(t) is None) == ((templating_jinja.syntax_error(t) if templating.is_template(t) else None) is None), t
    assert templating.check_syntax({"a": ["{{ n }}", "{% if %}"]}).startswith("template syntax error")


def test_unresolved_values_are_the_sandboxes_and_never_substituted():
    u = templating.unresolved("x", "cannot render x")
    assert templating.is_unresolved(u)
    assert ours("{{ x }}", {"x": u}, False)[0] == "failed"
    assert ours("a {{ x }}", {"x": u}, True)[0] == "failed"


def test_a_fresh_run_of_hello_never_loads_jinja(tmp_path):
    code = ("import sys, json, contextlib, io\n"
            "from eaglebot.frontends.cli.main import main\n"
            "with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n"
            "    rc = main(['run', 'hello', '-H', 'local', '-e', 'greeting=hi there'])\n"
            "print(json.dumps([rc, 'jinja2' in sys.modules]))\n")
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    res = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         env=env)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout.strip().splitlines()[-1]) == [0, False]
