"""Render sbatch scripts from Jinja2 templates, every value quoted.

Templates live in the bundled ``slurm/`` folder (``ddp.sbatch.j2``, ``test.sbatch.j2``) or anywhere
a user points ``--slurm.template``. Rendering uses ``StrictUndefined`` (a missing value is an error,
never an empty string) and a ``finalize`` hook that refuses any value not passed through one of
the quoting filters, so a template cannot put a raw value into the script by mistake:

- ``q``: a shell word (:func:`shlex.quote`), for the script body;
- ``directive``: a ``#SBATCH`` option value; sbatch reads these lines itself and understands
  double quotes with backslash escapes, not the shell's single quotes; a value holding a newline or
  another control character is refused, since it would end the ``#SBATCH`` line;
- ``command``: a setup command, split into words like a shell (:func:`shlex.split`) and each
  word quoted, so it runs as one simple command: ``;``, ``$(...)``, backticks, pipes and newlines
  inside it are plain text;
- ``envname``: an environment variable name, checked against ``[A-Za-z_][A-Za-z0-9_]*``.

The quoting follows submitit's (facebookincubator/submitit, ``submitit/slurm/slurm.py``).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

from trainer_cli.config.paths import slurm_templates_dir
from trainer_cli.errors import UserError

TEMPLATE_SUFFIX = ".sbatch.j2"
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_PLAIN = re.compile(r"[A-Za-z0-9_@%+=:,./-]+")  # needs no quotes on an #SBATCH line
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class Quoted(str):
    """Text already quoted for where the template puts it."""


def quote_shell(value: Any) -> Quoted:
    """One shell word holding ``value`` literally."""
    return Quoted(shlex.quote(str(value)))


def quote_directive(value: Any) -> Quoted:
    """``value`` as one argument of an ``#SBATCH`` line (double quotes and ``\\`` escapes where needed).

    Raises:
        UserError: when ``value`` holds a newline or another control character.
    """
    text = str(value)
    if _CONTROL.search(text):
        raise UserError(f"{text!r} holds a newline or control character, which cannot go on an #SBATCH line: remove it")
    if _PLAIN.fullmatch(text):
        return Quoted(text)
    return Quoted('"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"')


def quote_command(value: Any) -> Quoted:
    """A setup command as quoted words: it runs as one simple command, nothing in it is expanded.

    Raises:
        UserError: for unbalanced quotes.
    """
    try:
        words = shlex.split(str(value))
    except ValueError as err:
        raise UserError(f"--slurm.setup {value!r}: {err}") from None
    return Quoted(" ".join(shlex.quote(w) for w in words))


def verbatim(value: Any) -> Quoted:
    """A site's own shell block (``slurm.setup_raw``), unchanged: the one value a template may put
    in the script unquoted, by naming this filter. Ends with a newline.

    Raises:
        UserError: for a NUL byte (bash cannot run it).
    """
    text = str(value)
    if "\0" in text:
        raise UserError("--slurm.setup_raw holds a NUL byte: remove it")
    return Quoted(text.rstrip("\n"))


def check_env_name(value: Any) -> Quoted:
    """An environment variable name, unchanged.

    Raises:
        UserError: for anything but letters, digits and ``_`` (not starting with a digit).
    """
    if not _ENV_NAME.fullmatch(str(value)):
        raise UserError(f"--slurm.env: {str(value)!r} is not an environment variable name (letters, digits, _)")
    return Quoted(str(value))


def _finalize(value: Any) -> Any:
    if isinstance(value, Quoted) or value == "":
        return value
    raise UserError(
        f"sbatch template error: {value!r} is rendered unquoted; pass it through |q, |directive or |command"
    )


def template_path(template: str) -> Path:
    """The file of ``--slurm.template``: a bundled name (``ddp``) or a path.

    Raises:
        UserError: when neither exists; the message lists the bundled templates.
    """
    bundled = slurm_templates_dir() / f"{template}{TEMPLATE_SUFFIX}"
    if bundled.is_file():
        return bundled
    path = Path(template).expanduser()
    if path.is_file():
        return path.resolve()
    names = sorted(p.name[: -len(TEMPLATE_SUFFIX)] for p in slurm_templates_dir().glob(f"*{TEMPLATE_SUFFIX}"))
    raise UserError(
        f"--slurm.template {template}: no such file, and no bundled template of that name (bundled: {', '.join(names)})"
    )


def render(template: str, context: dict[str, Any]) -> str:
    """Render ``template`` (a bundled name or a path) with ``context``.

    A user's template may ``{% extends "ddp.sbatch.j2" %}`` and override its blocks.

    Raises:
        UserError: for a missing template, a value used but not given (StrictUndefined), a
            template syntax error, or a value that cannot be quoted.
    """
    import jinja2

    path = template_path(template)
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader([str(path.parent), str(slurm_templates_dir())]),
        undefined=jinja2.StrictUndefined,
        finalize=_finalize,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )
    env.filters.update(
        q=quote_shell, directive=quote_directive, command=quote_command, envname=check_env_name, verbatim=verbatim
    )
    try:
        return env.get_template(path.name).render(**context)
    except jinja2.UndefinedError as err:
        raise UserError(f"sbatch template {path}: {err.message}") from None
    except jinja2.TemplateSyntaxError as err:
        raise UserError(f"sbatch template {err.filename or path} line {err.lineno}: {err.message}") from None
