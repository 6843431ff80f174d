"""`eagle completion bash|zsh`: a shell completion script written from the argparse parser,
so it cannot drift from the commands (argparse has no public walk of its sub-commands; this
reads its `choices`, as argcomplete and shtab do)."""
from __future__ import annotations

import argparse
import shlex
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from eaglebot.config import Settings


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
    local cur="${{COMP_WORDS[COMP_CWORD]}}" prev="${{COMP_WORDS[COMP_CWORD-1]}}" words="" names=""
    local i c=0 cmd="" cfg=()
    # The command is the first word that is not an option (`--config FILE` may come first);
    # `--config FILE` anywhere before the cursor is the config the names come from.
    for ((i = 1; i < COMP_CWORD; i++)); do
        case "${{COMP_WORDS[i]}}" in
            --config) cfg=(--config "${{COMP_WORDS[i+1]}}"); i=$((i + 1)) ;;
            -*) ;;
            *) [ -z "$cmd" ] && {{ cmd="${{COMP_WORDS[i]}}"; c=$i; }} ;;
        esac
    done
    if [ -z "$cmd" ]; then
        [ "$prev" = --config ] && {{ COMPREPLY=( $(compgen -f -- "$cur") ); return 0; }}
        COMPREPLY=( $(compgen -W {shlex.quote(top)} -- "$cur") )
        return 0
    fi
    local pb=""
    case "$prev" in
        -H|--host) names=targets ;;
        --playbook) names=playbooks ;;
        -e|--extra) [ "$cmd" = run ] && {{ names=inputs; pb="${{COMP_WORDS[c+1]}}"; }} ;;
    esac
    [ -z "$names" ] && case "$((COMP_CWORD - c)) $cmd" in
        "1 run"|"1 sweep"|"1 trend") names=playbooks ;;
        "1 logs"|"2 trend") names=hosts ;;
        "2 hosts") [ "${{COMP_WORDS[c+1]}}" = pin ] && names=hosts ;;
        "2 schedule") [ "${{COMP_WORDS[c+1]}}" != list ] && names=schedules ;;
    esac
    if [ -n "$names" ] && [ "${{cur#-}}" = "$cur" ]; then
        COMPREPLY=( $(compgen -W "$(eagle completion --list "$names" ${{pb:+--playbook "$pb"}} "${{cfg[@]}}" 2>/dev/null)" -- "$cur") )
        return 0
    fi
    case "$cmd" in
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


def names(settings: Settings, what: str, playbook: str | None = None) -> list[str]:
    """`eagle completion --list playbooks|hosts|targets|schedules|inputs`: one name a line, for
    the script above. `targets` are what `-H` takes (hosts, groups, `all`); `inputs` the input
    names of `--playbook` as `name=`."""
    if what == "hosts":
        return sorted(settings.hosts)
    if what == "targets":
        return sorted(set(settings.hosts) | set(settings.groups) | {"all"})
    if what == "inputs":
        from eaglebot.engine.playbook import find_playbook

        if not playbook:
            return []
        try:
            pb = find_playbook(playbook, settings.playbooks_path)
        except Exception:  # an unknown or broken playbook completes nothing
            return []
        return [f"{k}=" for k in pb.inputs]
    if what == "schedules":
        return [s.name for s in settings.schedules]
    from eaglebot.engine.playbook import playbook_files

    return list(playbook_files(settings.playbooks_path))


def completion_main(parser: argparse.ArgumentParser, shell: str) -> int:
    print(bash_script(parser) if shell == "bash" else zsh_script(parser), end="")
    return 0
