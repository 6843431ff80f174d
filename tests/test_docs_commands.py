"""Every command the user documentation shows is one the real parsers accept.

The `eagle ...` lines of README.md and docs/*.md (in code blocks, and inline code spans that
start with `eagle `) go through the CLI's own argparse parser without running anything; the
`/eagle ...` lines go through the slash command's parser (`router.parse`, pure). A renamed
option or a misspelt subcommand in the docs fails here with the file and line.

The reference style the docs use is read as a person reads it: `[--json]` is an option that
may be given (parsed as given), `bash|zsh` is a choice (parsed as its first word), and a
span that only names a command (`eagle run`, `eagle audit verify`) must name a real one.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest

from eaglebot.frontends.chat.grammar import parse as parse_slash
from eaglebot.frontends.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[1]
# docs/reference.md is generated from the parser and the skills (cog): what it quotes are their own
# help texts (`eagle chat 'help SKILL'`), checked against the code by `cog --check`, not commands.
PAGES = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").glob("*.md") if p.name != "reference.md")]

_FENCE = re.compile(r"^(`{3,}|~{3,})")
_SPAN = re.compile(r"(?<!`)`([^`]+)`(?!`)")


def _code_lines(text: str) -> tuple[list[tuple[int, str]], str]:
    """The lines inside fenced code blocks (with their line numbers), and the text outside them
    with the blocks blanked out (so the line numbers of inline spans stay right)."""
    lines, prose, fence = [], [], None
    for n, line in enumerate(text.splitlines(), 1):
        m = _FENCE.match(line.strip())
        if fence is None and m:
            fence = m.group(1)
            prose.append("")
        elif fence is not None and line.strip().startswith(fence):
            fence = None
            prose.append("")
        elif fence is not None:
            lines.append((n, line))
            prose.append("")
        else:
            prose.append(line)
    return lines, "\n".join(prose)


def documented(prefix: str) -> list[tuple[str, str]]:
    """(file:line, command) for every documented line starting with `prefix` ("eagle " or "/eagle ")."""
    found: list[tuple[str, str]] = []
    for page in PAGES:
        name = page.relative_to(ROOT)
        code, prose = _code_lines(page.read_text())
        for n, line in code:
            cmd = line.strip().removeprefix("$ ")
            if cmd.startswith(prefix):
                found.append((f"{name}:{n}", cmd))
        for m in _SPAN.finditer(prose):
            span = " ".join(m.group(1).split())   # a span may wrap over lines
            if span.startswith(prefix):
                found.append((f"{name}:{prose.count(chr(10), 0, m.start()) + 1}", span))
    return found


def _reference_words(cmd: str, comment_at: str) -> list[str]:
    """The words of a documented line: its comment cut off, `[optional]` parts kept,
    `a|b` choices read as `a`."""
    cmd = re.split(comment_at, cmd, maxsplit=1)[0]
    cmd = re.sub(r"(?:(?<=\s)|^)\[([^\[\]]*)\]", r"\1", cmd).replace("...", " ")   # not `aux_layers=[2,30]`
    cmd = re.sub(r"(?<=\s)\|(?=\s)", " ", cmd)          # `/eagle show 42 | status`: a list of commands
    words = shlex.split(cmd)
    return [w.split("|")[0] if "|" in w and not w.startswith(("{", "'", '"')) else w for w in words]


def _names_a_command(parser: argparse.ArgumentParser, words: list[str]) -> bool:
    """True when `words` is a chain of (sub)command names and nothing else."""
    for w in words:
        sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
        if sub is None or w not in sub.choices:
            return False
        parser = sub.choices[w]
    return True


def _cli_error(words: list[str]) -> str | None:
    parser = build_parser()
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
            parser.parse_args(words)
    except SystemExit as e:
        if e.code not in (0, None):   # --help and --version exit 0
            if _names_a_command(parser, words):
                return None
            return stderr.getvalue().strip().splitlines()[-1]
    return None


CLI = documented("eagle ")
SLASH = documented("/eagle ")


def test_the_docs_show_commands():
    # The extraction itself works: the README's quick start and the CLI page are found.
    assert any(where.startswith("README.md:") for where, _ in CLI)
    assert any(where.startswith("docs/cli.md:") for where, _ in CLI)
    assert any(where.startswith("docs/slack.md:") for where, _ in SLASH)


@pytest.mark.parametrize("where,cmd", CLI, ids=[w for w, _ in CLI])
def test_every_documented_eagle_command_parses(where, cmd):
    words = _reference_words(cmd, r"\s#\s|\s{2,}#|\s{2,}(?=[a-z])")[1:]
    why = _cli_error(words)
    assert why is None, f"{where}: `{cmd}` does not parse: {why}"
    if words[:1] == ["chat"] and len(words) > 1:   # `eagle chat "TEXT"` is `/eagle TEXT`
        parsed = parse_slash(words[1])
        assert parsed.name != "error", f"{where}: `{cmd}`: the chat text does not parse: {parsed.error}"


@pytest.mark.parametrize("where,cmd", SLASH, ids=[w for w, _ in SLASH])
def test_every_documented_slash_command_parses(where, cmd):
    # In the slash reference a description follows the command after two or more spaces.
    line = re.split(r"\s{2,}", cmd, maxsplit=1)[0].removeprefix("/eagle").strip()
    for one in re.split(r"\s\|\s", line):   # `/eagle show 42 | status | cancel 42`
        words = _reference_words(one, r"\s#\s")
        text = shlex.join(words)
        parsed = parse_slash(text)
        if len(words) == 1 and (parsed.error or "").startswith("usage:"):
            continue   # the span names a command (`/eagle show`): its usage line proves it exists
        assert parsed.name != "error", f"{where}: `/eagle {text}` does not parse: {parsed.error}"
