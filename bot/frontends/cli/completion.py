"""`eagle completion bash|zsh`: a shell completion script written from the argparse parser,
so it cannot drift from the commands (argparse has no public walk of its sub-commands; this
reads its `choices`, as argcomplete and shtab do)."""
from __future__ import annotations

import argparse
import shlex


def _commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _options(parser: argparse.ArgumentParser) -> list[str]:
    return sorted({o for a in parser._actions for o in a.option_strings})


def _choices(parser: argparse.ArgumentParser) -> list[str]:
    """Words a positional or option with `choices` takes (e.g. `completion bash|zsh`)."""
    return sorted({str(c) for a in parser._actions if a.choices and not isinstance(a, argparse._SubParsersAction)
                   for c in a.choices})


def bash_script(parser: argparse.ArgumentParser) -> str:
    cmds = _commands(parser)
    cases = []
    for name, sub in cmds.items():
        words = " ".join(list(_commands(sub)) + _options(sub) + _choices(sub))
        cases.append(f"        {name}) words={shlex.quote(words)} ;;")
    top = " ".join(list(cmds) + _options(parser))
    return f"""# eagle completion for bash: eval "$(eagle completion bash)" (e.g. in ~/.bashrc)
_eagle() {{
    local cur="${{COMP_WORDS[COMP_CWORD]}}" words=""
    if [ "$COMP_CWORD" -le 1 ]; then
        COMPREPLY=( $(compgen -W {shlex.quote(top)} -- "$cur") )
        return 0
    fi
    case "${{COMP_WORDS[1]}}" in
{chr(10).join(cases)}
    esac
    COMPREPLY=( $(compgen -W "$words" -- "$cur") )
    if [ "${{#COMPREPLY[@]}}" -eq 0 ]; then
        COMPREPLY=( $(compgen -f -- "$cur") )
    fi
    return 0
}}
complete -F _eagle eagle
"""


def zsh_script(parser: argparse.ArgumentParser) -> str:
    return ("# eagle completion for zsh: eval \"$(eagle completion zsh)\" (e.g. in ~/.zshrc)\n"
            "autoload -U +X compinit && compinit\n"
            "autoload -U +X bashcompinit && bashcompinit\n" + bash_script(parser).split("\n", 1)[1])


def completion_main(parser: argparse.ArgumentParser, shell: str) -> int:
    print(bash_script(parser) if shell == "bash" else zsh_script(parser), end="")
    return 0
