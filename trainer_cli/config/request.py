"""A command line read once: the one reader of ``train``'s and a user's script's arguments.

``train fit --config a.yaml --trainer.max_epochs 3 --sweep optimizer.init_args.lr=1e-3,1e-2`` becomes
a :class:`Request`: the entry (``train`` or the user's script), the verb and its arguments, each an
:class:`Arg` with the option's name (``config``, ``trainer.max_epochs``, ``sweep``), its value and the
tokens it was written as (``--k v``, ``--k=v``, ``-c v``). Everything after the reader takes the
request's values by name: no other code compares tokens with ``--flag`` strings.

The launcher's own options, those it takes out before LightningCLI's parser sees the command line
(``--config_root``, ``--sweep*``, ``--slurm.*``, ``--dry-run``, ``--check``), are declared once, in
:data:`OPTIONS`, with the LightningCLI options the launcher reads itself (``--config``,
``--run_dir``, ``--model``/``--data`` classes). Any other ``--key`` is passed on as it was written,
one token at a time.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trainer_cli.config.keys import Layers

from trainer_cli.job.scheduler import DEFAULT_SCHEDULER, SCHEDULER_NAMES


@dataclass(frozen=True)
class Option:
    """One option the launcher reads from the command line itself.

    Args:
        name: Its name without dashes (``config``, ``sweep_trials``, ``dry_run``).
        takes_value: ``--name VALUE`` / ``--name=VALUE`` (else a switch: ``--name``).
        aliases: Other spellings, dashes included (``-c``, ``--dry-run``).
        launcher: The launcher's own (taken out before LightningCLI's parser sees the command line),
            not an option of the parser the launcher also reads.
    """

    name: str
    takes_value: bool = True
    aliases: tuple[str, ...] = ()
    launcher: bool = True

    @property
    def spellings(self) -> tuple[str, ...]:
        return (f"--{self.name}", *self.aliases)


SWEEP_OPTIONS = (
    "sweep",
    "sweep_trials",
    "sweep_seed",
    "sweep_sampler",
    "sweep_pruner",
    "sweep_storage",
    "sweep_metric",
    "sweep_direction",
)
ENGINE_SECTIONS = SCHEDULER_NAMES  # every --<engine>.KEY VALUE: `train submit --scheduler <engine>`'s options
SLURM = DEFAULT_SCHEDULER  # --slurm FILE: the default engine's options from a file (a site profile's section)

OPTIONS: tuple[Option, ...] = (
    Option("config", aliases=("-c",), launcher=False),  # composed by the launcher, parsed by LightningCLI
    Option("config_root"),
    *(Option(name) for name in SWEEP_OPTIONS),
    Option("dry_run", takes_value=False, aliases=("--dry-run",)),
    Option("check", takes_value=False),
    Option("test_after_fit", takes_value=False),  # `train fit`'s: test the best checkpoint after the fit
    Option("help", takes_value=False, aliases=("-h",), launcher=False),
    Option(SLURM),
    Option("scheduler"),  # `train submit --scheduler slurm|ray`: the engine (trainer_cli.job.scheduler)
    Option("run_dir", launcher=False),
    Option("ckpt_path", launcher=False),
    Option("model", launcher=False),
    Option("model.class_path", launcher=False),
    Option("data", launcher=False),
    Option("data.class_path", launcher=False),
)
# taken out before LightningCLI's parser sees a fit's command line (--slurm: `train submit`'s alone)
LAUNCHER_OPTIONS = frozenset(o.name for o in OPTIONS if o.launcher and o.name != SLURM)
_BY_SPELLING = {spelling: option for option in OPTIONS for spelling in option.spellings}


@dataclass(frozen=True)
class Arg:
    """One item of a command line: an option with its value, or one token passed on as written.

    Attributes:
        name: The option's name without dashes (``config``, ``slurm.time``, ``trainer.max_epochs``);
            None for a value token of an option the launcher does not read (``3`` of
            ``--trainer.max_epochs 3``).
        value: The option's value (None for a switch, or a value missing at the end of the line).
        tokens: The tokens as written (``("--config", "a.yaml")``, ``("--config=a.yaml",)``).
    """

    name: str | None
    value: str | None
    tokens: tuple[str, ...]

    @property
    def missing_value(self) -> bool:
        """An option that takes a value, given last without one (``train fit --config``)."""
        option = _BY_SPELLING.get(self.tokens[0]) if self.name is not None else None
        return self.value is None and (
            (option is not None and option.takes_value)
            or any((self.name or "").startswith(section + ".") for section in ENGINE_SECTIONS)
        )

    @property
    def flag(self) -> str:
        """The option as written, without its value (``--config``, ``-c``, ``--dry-run``)."""
        return self.tokens[0].split("=", 1)[0]

    @property
    def is_option(self) -> bool:
        """A ``--key`` item (not a value token)."""
        return self.name is not None


def option(name: str, value: str) -> Arg:
    """The item ``--name value``."""
    return Arg(name, value, (f"--{name}", value))


def read(tokens: Iterable[str]) -> list[Arg]:
    """The items of ``tokens``: the options of :data:`OPTIONS` and every ``--slurm.KEY`` with their
    values (a value missing at the end: ``value=None``, see :attr:`Arg.missing_value`), any other
    ``--key[=value]`` and token one by one, as written."""
    tokens = list(tokens)
    out: list[Arg] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        spelling, eq, inline = token.partition("=")
        known = _BY_SPELLING.get(spelling)
        engine_key = any(spelling.startswith(f"--{s}.") and len(spelling) > len(s) + 3 for s in ENGINE_SECTIONS)
        if known is None and not engine_key:
            if token.startswith("--") and len(token) > 2:
                out.append(Arg(spelling[2:], inline if eq else None, (token,)))
            else:
                out.append(Arg(None, token, (token,)))
            i += 1
            continue
        name = known.name if known is not None else spelling[2:]
        if eq:
            out.append(Arg(name, inline, (token,)))
        elif known is not None and not known.takes_value:
            out.append(Arg(name, None, (token,)))
        elif i + 1 < len(tokens):
            out.append(Arg(name, tokens[i + 1], (token, tokens[i + 1])))
            i += 1
        else:
            out.append(Arg(name, None, (token,)))
        i += 1
    return out


@dataclass(frozen=True)
class Request:
    """What a command line asks for, read once (:func:`read`).

    Attributes:
        verb: ``fit``, ``submit``, ... (None for a script built with ``run=False``).
        args: The verb's arguments, in command-line order.
        entry: How the user runs it: ``train``, or ``python main.py`` for a user's script.
        script: The user's script's path, as given (``main.py``); None under ``train``.
        module: The module the script runs as when started with ``python -m`` (``pkg.train``), else None.
        composed: This request composed by ``train``'s precheck (``(request, layers)``:
            :func:`trainer_cli.config.compose.compose_args`), for the verb to take as it is: each
            ``--config`` file is read and composed once (:func:`trainer_cli.config.compose.composed`).
    """

    verb: str | None
    args: list[Arg] = field(default_factory=list)
    entry: str = "train"
    script: str | None = None
    composed: tuple[Request, Layers] | None = None
    module: str | None = None

    @classmethod
    def of(cls, args: Sequence[str], verb: str | None = None) -> Request:
        """The request of the words ``args`` (:func:`read`): only where words come from outside the process
        (argv at an entry, a record read back from disk); inside the launcher a command line travels as a
        :class:`Request`."""
        return cls(verb, read(args))

    def __iter__(self) -> Iterator[Arg]:
        return iter(self.args)

    def values(self, name: str) -> list[str]:
        """Every value of option ``name`` in command-line order."""
        return [a.value for a in self.args if a.name == name and a.value is not None]

    def last(self, name: str) -> str | None:
        """The value of option ``name`` that wins (the last one), None when it is not given."""
        values = self.values(name)
        return values[-1] if values else None

    def has(self, *names: str) -> bool:
        """Whether any of the options ``names`` is given."""
        return any(a.name in names for a in self.args)

    def has_prefix(self, prefix: str) -> bool:
        """Whether an option whose name starts with ``prefix`` is given (``slurm.cv_folds``)."""
        return any(a.name is not None and a.name.startswith(prefix) for a in self.args)

    @property
    def only_help(self) -> bool:
        """``train VERB --help`` and nothing else."""
        return len(self.args) == 1 and self.args[0].name == "help"

    @property
    def helps(self) -> bool:
        """``--help`` / ``-h`` anywhere."""
        return self.has("help")

    @property
    def dry_run(self) -> bool:
        return self.has("dry_run")

    @property
    def check(self) -> bool:
        return self.has("check")

    @property
    def sweep(self) -> bool:
        """Whether a ``--sweep`` is given (cheap: nothing is parsed)."""
        return self.has("sweep")

    def without(self, *names: str) -> Request:
        """This request without the options ``names`` (as :meth:`with_args` keeps its other fields)."""
        return self.with_args(a for a in self.args if a.name not in names)

    def with_args(self, args: Iterable[Arg]) -> Request:
        """This request with other arguments; its verb, entry, script and module are kept, its composition
        (:attr:`composed`, of the arguments it had) is not."""
        return replace(self, args=list(args), composed=None)

    def tokens(self) -> list[str]:
        """The arguments as tokens again, as written: for what needs words (LightningCLI's ``args=``, a
        process's command, a record written to disk, a printed line)."""
        return [token for a in self.args for token in a.tokens]


def command_line() -> list[str]:
    """This process's command line as it was started (``sys.argv``, for records of what the user ran):
    the one place outside an entry point's ``main`` that reads it."""
    return list(sys.argv)


def of_process() -> Request:
    """The request of this process's own command line, ``python main.py VERB ARGS`` (a user's script
    with TrainerCLI)."""
    argv = command_line()
    script = argv[0] if argv else ""
    verb = argv[1] if len(argv) > 1 and not argv[1].startswith("-") else None
    rest = argv[2:] if verb is not None else argv[1:]
    module = main_module()
    entry = f"python -m {module}" if module else f"python {script}"
    return Request(verb, read(rest), entry=entry, script=script, module=module)


def main_module() -> str | None:
    """The module this process runs as ``__main__`` when started with ``python -m pkg.train`` (``pkg.train``;
    ``pkg`` for a package's ``__main__``), else None (a script run by its path)."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    name = getattr(spec, "name", None)
    if not name or name == "__main__":
        return None
    return name[: -len(".__main__")] if name.endswith(".__main__") else name


def runs_as_script(request: Request) -> bool:
    """Whether this process is the user's script run from the command line (``python main.py fit``,
    or a DDP rank Lightning started the same way): the script of ``request`` (:func:`of_process`) is the
    ``__main__`` module's file."""
    main_file = getattr(sys.modules.get("__main__"), "__file__", None)
    try:
        return (
            bool(main_file)
            and bool(request.script)
            and Path(str(request.script)).resolve() == Path(str(main_file)).resolve()
        )
    except OSError:
        return False
