"""``train completion bash|zsh``: a static shell completion script for ``train``.

The script is written once (``train completion bash > ~/.local/share/bash-completion/completions/train``)
and answers every TAB from its own tables, without starting Python. It completes:

- the verbs (``train f<TAB>``);
- ``--config``: the short forms of the bundled configs (``experiment/digits``), those of the user
  config roots (``--config_root DIR`` on the line being completed and ``$TRAINER_CLI_CONFIG_PATH``,
  read at completion time) and YAML files;
- option keys of the verb (``--trainer.max_<TAB>``): taken from the text of ``train <verb> --help``
  (:mod:`trainer_cli.config.help_cache`; built once, which imports Lightning, when the cache is empty);
- short class names after ``--model``, ``--data``, ``--optimizer``, ``--lr_scheduler``,
  ``--model.backbone`` and ``--trainer.callbacks+=`` (read from the sources by
  :mod:`trainer_cli.config.listing`, without importing torch).

Regenerate the script after upgrading trainer-cli or its libraries (new options, new classes).
"""

from __future__ import annotations

import argparse
import re
import shlex
from collections.abc import Callable
from typing import Any

from trainer_cli.config import listing
from trainer_cli.config.paths import configs_dir

LIGHTNING_VERBS = ("fit", "validate", "test", "predict")
# verbs that take fit's options (their own parsers add a few, listed in EXTRA_OPTIONS)
FIT_LIKE = ("submit", "cv", "lr-find", "scale-batch-size")
EXTRA_OPTIONS = {
    "submit": ["--dry-run", "--check", "--sweep", "--name"],
    "cv": ["--folds", "--fold", "--cv_dir", "--cv_seed", "--aggregate"],
    "fit": ["--sweep", "--config_root", "--test_after_fit"],
}
OPTION = re.compile(r"^\s+(?:-\w, )?(--[A-Za-z_][\w.+-]*)", re.M)


VerbHelp = Callable[[str], str]
"""What ``train VERB --help`` prints, given by ``train`` itself (``trainer_cli.__main__.verb_help``: this module
knows no verb's module)."""


def help_options(verb: str, verb_help: VerbHelp) -> list[str]:
    """The ``--keys`` of ``train <verb> --help`` (a Lightning verb's through the help cache, as ``train`` does)."""
    return sorted(set(OPTION.findall(verb_help(verb))))


# verbs whose own parser (``train <verb> --help``) lists options of their own, read from that help
OWN_OPTIONS = ("lr-find", "scale-batch-size", "export", "runs", "jobs", "init")


def class_names() -> dict[str, list[str]]:
    """Option -> the short class names it takes (read from the sources, no torch import)."""
    backbones = [n.lower() for n, (m, _) in listing.project_subclasses("Module").items() if m.endswith("backbones")]
    callbacks = sorted(set(listing.project_subclasses("Callback")) | set(listing.lightning_callbacks()))
    return {
        "--model": sorted(listing.project_subclasses("LightningModule")),
        "--data": sorted(listing.project_subclasses("LightningDataModule")),
        "--optimizer": listing.torch_optimizers(),
        "--lr_scheduler": sorted(
            set(listing.project_subclasses("_StepwiseLR", "LRScheduler")) | set(listing.torch_schedulers())
        ),
        "--model.backbone": sorted(set(backbones) | set(listing.torchvision_models())),
        "--trainer.callbacks+": callbacks,
        "--trainer.callbacks": callbacks,
    }


def config_short_forms() -> list[str]:
    """``group/name`` of every bundled config file."""
    root = configs_dir()
    return sorted(f"{p.parent.name}/{p.stem}" for p in root.glob("*/*.yaml"))


def tables(verb_help: VerbHelp) -> dict[str, Any]:
    """Everything the script completes from: verbs, options per verb (from ``verb_help``), class names, configs."""
    from trainer_cli.config.verbs import VERBS
    from trainer_cli.schedulers import option_flags as engine_option_flags

    fit = help_options("fit", verb_help)
    options = {verb: help_options(verb, verb_help) for verb in LIGHTNING_VERBS if verb != "fit"} | {"fit": fit}
    for verb in FIT_LIKE:
        options[verb] = list(fit)
    options["submit"] += engine_option_flags()
    for verb in OWN_OPTIONS:
        own = set(help_options(verb, verb_help)) - {"--help"}
        options[verb] = sorted(set(options.get(verb, [])) | own)
    for verb, extra in EXTRA_OPTIONS.items():
        options[verb] = sorted(set(options[verb]) | set(extra))
    return {"verbs": list(VERBS), "options": options, "classes": class_names(), "configs": config_short_forms()}


def _words(names: list[str]) -> str:
    return shlex.quote(" ".join(names))


def _fn(name: str) -> str:
    return "_train_" + re.sub(r"\W", "_", name)


BASH = r"""# bash completion for `train` (trainer-cli), written by `train completion bash`.
# Install: train completion bash > ~/.local/share/bash-completion/completions/train
#      or: source <(train completion bash)     (in ~/.bashrc)
_train_verbs={verbs}
_train_configs={configs}
{options}
{classes}
_train_config_roots() {{
    # user config roots: --config_root DIR on the line, then $TRAINER_CLI_CONFIG_PATH
    local i o=${{ZSH_VERSION:+1}} rest=$TRAINER_CLI_CONFIG_PATH
    for ((i = 1; i < ${{#COMP_WORDS[@]}} - 1; i++)); do
        [[ ${{COMP_WORDS[i+o]}} == --config_root ]] && printf '%s\n' "${{COMP_WORDS[i+1+o]}}"
    done
    while [[ -n $rest ]]; do
        printf '%s\n' "${{rest%%:*}}"
        [[ $rest == *:* ]] && rest=${{rest#*:}} || rest=
    done
}}
_train_user_configs() {{
    [[ -n $ZSH_VERSION ]] && setopt localoptions nullglob
    local root f
    while IFS= read -r root; do
        [[ -n $root && -d $root ]] || continue
        for f in "$root"/*/*.yaml; do
            [[ -f $f ]] || continue
            f=${{f#"$root"/}}
            printf '%s\n' "${{f%.yaml}}"
        done
    done < <(_train_config_roots)
}}
_train() {{
    # zsh (bashcompinit) numbers COMP_WORDS from 1, bash from 0; COMP_CWORD counts from 0 in both
    local o=${{ZSH_VERSION:+1}}
    local cur=${{COMP_WORDS[COMP_CWORD+o]}} prev=${{COMP_WORDS[COMP_CWORD-1+o]}}
    COMPREPLY=()
    if ((COMP_CWORD == 1)); then
        COMPREPLY=($(compgen -W "$_train_verbs" -- "$cur"))
        return
    fi
    local verb=${{COMP_WORDS[1+o]}} opts
    eval "opts=\$_train_opts_${{verb//[^a-zA-Z0-9]/_}}"
    # bash splits `--opt=value` at "=" (COMP_WORDBREAKS): complete the value of the option before it
    if [[ $cur == = ]]; then
        prev=${{COMP_WORDS[COMP_CWORD-1+o]}} cur=
    elif [[ $prev == = ]] && ((COMP_CWORD > 2)); then
        prev=${{COMP_WORDS[COMP_CWORD-2+o]}}
    fi
    case $prev in
        --config|-c)
            compopt -o filenames 2>/dev/null
            COMPREPLY=($(compgen -W "$_train_configs $(_train_user_configs)" -- "$cur"))
            COMPREPLY+=($(compgen -f -X '!*.yaml' -- "$cur") $(compgen -f -X '!*.yml' -- "$cur"))
            COMPREPLY+=($(compgen -d -- "$cur"))
            return;;
        --config_root|--trainer.default_root_dir|--ckpt_path|--data.data_dir)
            compopt -o filenames 2>/dev/null
            COMPREPLY=($(compgen -f -- "$cur"))
            return;;
{class_cases}
    esac
    if [[ $cur == --trainer.callbacks+=* ]]; then
        local word=${{cur#--trainer.callbacks+=}}
        COMPREPLY=($(compgen -P --trainer.callbacks+= -W "$_train_cls___trainer_callbacks_" -- "$word"))
        return
    fi
    if [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "$opts" -- "$cur"))
        return
    fi
    compopt -o filenames 2>/dev/null
    COMPREPLY=($(compgen -f -- "$cur"))
}}
complete -F _train train
"""

ZSH = r"""# zsh completion for `train` (trainer-cli), written by `train completion zsh`: the bash script,
# run by zsh's bashcompinit.
# Install: source <(train completion zsh)     (in ~/.zshrc)
autoload -U +X compinit && compinit
autoload -U +X bashcompinit && bashcompinit
{bash}"""


def bash_script(t: dict[str, Any]) -> str:
    """The bash completion script of the tables ``t`` (:func:`tables`)."""
    options = "\n".join(
        f"_train_opts_{re.sub(r'[^a-zA-Z0-9]', '_', v)}={_words(opts)}" for v, opts in t["options"].items()
    )
    classes = "\n".join(f"{_fn('cls_' + opt)}={_words(names)}" for opt, names in t["classes"].items())
    cases = "\n".join(
        f'        {opt})\n            COMPREPLY=($(compgen -W "${_fn("cls_" + opt)}" -- "$cur"))\n            return;;'
        for opt in t["classes"]
    )
    return BASH.format(
        verbs=_words(t["verbs"]), configs=_words(t["configs"]), options=options, classes=classes, class_cases=cases
    )


def main(args: list[str], verb_help: VerbHelp) -> int:
    """``train completion bash|zsh``: print a completion script for ``train``, each verb's options read from what
    ``verb_help`` says ``train VERB --help`` prints."""
    parser = argparse.ArgumentParser(
        prog="train completion",
        description="Print a shell completion script for train (verbs, --config files, option keys, class names).",
        epilog=(
            "examples:\n"
            "  train completion bash > ~/.local/share/bash-completion/completions/train\n"
            "  echo 'source <(train completion bash)' >> ~/.bashrc\n"
            "  echo 'source <(train completion zsh)' >> ~/.zshrc"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("shell", choices=("bash", "zsh"), help="the shell to complete in")
    ns = parser.parse_args(args)
    script = bash_script(tables(verb_help))
    print(ZSH.format(bash=script) if ns.shell == "zsh" else script, end="")
    return 0
