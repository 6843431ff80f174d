"""A fact about a host is a command and the parser of what it prints, in one object.

pyinfra's design: whoever needs a fact gathers it through the object (`await
fact.gather(...)`), so the command a skill runs is the command whose real output the
parser is tested on. tests/test_fact_captures.py holds every fact a shipped skill uses to
a capture of its exact command (`fact.command({})`, the tools by their plain names) in
tests/fixtures/captures.json, and parses that capture with the fact's own parser.
"""
from __future__ import annotations

import json
from typing import Any, Callable, Mapping, Protocol, TypeVar, runtime_checkable

T_co = TypeVar("T_co", covariant=True)


@runtime_checkable
class Fact(Protocol[T_co]):
    @property
    def parse(self) -> Callable[[str], T_co]:
        """The pure parser of the command's output."""

    def command(self, host_vars: Mapping[str, Any]) -> str:
        """The exact shell command on a host with these host vars (a tool's path may be one)."""


def program_answer(mark: str, unavailable: str, what: str, exit_status: int, stdout: str,
                   stderr: str) -> dict[str, Any] | str:
    """What a host program sent on stdin printed: the JSON document on its `mark` line, or why there is
    none, one sentence (its `unavailable` line's reason, or `what` and the last line it printed)."""
    for line in stdout.splitlines():
        if line.startswith(unavailable):
            return line[len(unavailable):].strip()
        if line.startswith(mark + " "):
            try:
                doc: dict[str, Any] = json.loads(line[len(mark) + 1:])
            except json.JSONDecodeError:
                return f"{what} printed an unreadable answer"
            return doc
    tail = (stderr.strip() or stdout.strip()).splitlines()[-1:] or [f"exit status {exit_status}"]
    return f"{what} did not answer ({tail[0][:200]})"
