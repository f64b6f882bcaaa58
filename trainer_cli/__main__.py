"""The ``train`` entry point: picks the verb and hands over. Dispatch only.

Launcher verbs never import torch before they need it, so ``train --help`` and
``train ls`` answer at once.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import gc
import importlib
import io
import os
import sys
from typing import Any

from trainer_cli.atomic import LockTimeout
from trainer_cli.config.request import Request
from trainer_cli.config.verbs import VERBS
from trainer_cli.errors import UserError, report_user_error
from trainer_cli.job import workdir
from trainer_cli.job.scheduler import SCHEDULER_NAMES

LIGHTNING_VERBS = {"fit", "validate", "test", "predict"}
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, as shells report a writer whose reader went away
REQUEUE_VERBS = {"fit", "cv"}  # verbs whose Slurm jobs checkpoint and requeue on SIGUSR1
# verbs whose main takes the request (trainer_cli.config.request.Request) with the precheck's composition
REQUEST_VERBS = {"submit", "fit-sweep", "cv", "lr-find", "scale-batch-size"}
# verbs whose main takes the scheduler engines by name (trainer_cli.schedulers.engines): what they ask of jobs
ENGINE_VERBS = {"jobs", "cancel", "sweep-results", "runs"}

# verb -> the function it runs, named by ``module:function`` so that nothing is imported until the verb runs
# (each takes the argument list after the verb as words, or the request with REQUEST_VERBS and the Lightning verbs
# (verb, request), and returns an exit code);
# the verbs and their help: trainer_cli.config.verbs.VERBS
TARGETS: dict[str, str] = {
    "fit": "trainer_cli.runtime.verbs:run_subcommand",
    "validate": "trainer_cli.runtime.verbs:run_subcommand",
    "test": "trainer_cli.runtime.verbs:run_subcommand",
    "predict": "trainer_cli.runtime.verbs:run_subcommand",
    "lr-find": "trainer_cli.tools.lr_find:main",
    "scale-batch-size": "trainer_cli.tools.scale_batch_size:main",
    "cv": "trainer_cli.tools.cv:main",
    "export": "trainer_cli.tools.export:main",
    "doctor": "trainer_cli.schedulers.slurm.doctor:main",
    "submit": "trainer_cli.schedulers.slurm.submit:main",
    "jobs": "trainer_cli.launch.jobs:main",
    "cancel": "trainer_cli.launch.cancel:cancel",
    "sweep-results": "trainer_cli.sweeps.results:main",
    "runs": "trainer_cli.tools.runs:main",
    "init": "trainer_cli.schedulers.slurm.init:main",
    "ls": "trainer_cli.config.listing:main",
    "completion": "trainer_cli.tools.completion:main",
}
# `train submit --scheduler NAME` -> the engine's submission (TARGETS' submit: the default engine's)
SUBMIT_TARGETS: dict[str, str] = {
    "slurm": "trainer_cli.schedulers.slurm.submit:main",
    "ray": "trainer_cli.schedulers.ray.submit:main",
}
assert tuple(SUBMIT_TARGETS) == SCHEDULER_NAMES and TARGETS["submit"] == SUBMIT_TARGETS[SCHEDULER_NAMES[0]]

USAGE = """\
usage: train <verb> [--config FILE ...] [--key.sub value ...]

A config-driven launcher for PyTorch Lightning training.

verbs:
{verbs}

examples:
  train fit --config configs/experiment/digits.yaml
  train fit --config configs/experiment/digits.yaml --trainer.max_epochs 3 --optimizer.lr 0.01
  train fit --config configs/experiment/digits.yaml --config configs/precision/bf16-mixed.yaml
  train fit --config configs/experiment/digits.yaml --sweep optimizer.init_args.lr=1e-3,1e-2   # one run per value
  train ls models
  train fit --config_root myconfigs --config experiment/mine   # your own configs, laid out like configs/

`train <verb> --help` shows every option of a verb. User config roots (folders laid out like
configs/) are searched before the bundled configs: --config_root DIR (repeatable, any verb) and
$TRAINER_CLI_CONFIG_PATH (os.pathsep-separated).
"""


def usage() -> str:
    from trainer_cli.tables import format_table

    return USAGE.format(verbs=format_table(list(VERBS.items()), indent=2))


def main(argv: list[str] | None = None) -> int:
    """Run ``train``; returns the process exit code (0 ok, 2 user error, 141 reader gone).

    When stdout's reader goes away early (``train fit --help | head -3``), the rest of the
    output is dropped quietly: no ``BrokenPipeError`` traceback (the Python documentation's
    recipe for ``SIGPIPE``).
    """
    whole_process = argv is None  # `train` / `python -m trainer_cli` itself, not a call from Python (tests, notebooks)
    try:
        try:
            return _dispatch(list(sys.argv[1:] if argv is None else argv), whole_process)
        finally:  # also when --help exits: a pipe closed early fails here, at the last flush
            sys.stdout.flush()
    except BrokenPipeError:
        # Python flushes stdout again at exit: point it at devnull so that flush cannot fail too
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE


def _dispatch(argv: list[str], whole_process: bool) -> int:
    if whole_process:
        from trainer_cli.imports import own_process

        own_process()  # imports of torch and Lightning with the collector paused (heavy_import)
        from trainer_cli.errors import quiet_disk_full_in_threads

        quiet_disk_full_in_threads()  # a writer thread's full disk is one line; the main thread reports it
        atexit.register(_quick_exit)  # registered first: runs after every other exit handler (Lightning's, loggers')
    if not argv or argv[0] in {"-h", "--help", "help"}:
        print(usage())
        return 0
    if argv[0] in {"-V", "--version"}:
        from trainer_cli import __version__

        print(f"trainer-cli {__version__}")
        return 0
    verb, rest = argv[0], argv[1:]
    if "" not in sys.path and os.getcwd() not in sys.path:  # as `python -m trainer_cli` and `python main.py`:
        sys.path.insert(0, os.getcwd())  # the user's own modules in the working directory import by class_path
    workdir.enter()  # a Slurm job started in its code snapshot: its imports come from there, paths from here
    if verb in REQUEUE_VERBS:  # before anything slow: SIGUSR1 from Slurm must not kill a starting job,
        from trainer_cli.job import (
            requeue_signal,  # and SIGTERM / Ctrl-C stop every rank at one step
            stop_signals,
        )

        requeue_signal.install()
        if whole_process:  # the signals of the process: a caller's own process keeps its handling (Lightning's)
            stop_signals.install()
        code = None
        try:
            code = _run_verb(verb, rest)
            return code
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else 1
            raise
        finally:  # nor a finished one, while Python shuts down
            requeue_signal.ignore_from_now()
            stop_signals.disarm(finished=True)
            stop_signals.note(f"exit {code}" if code is not None else "error")  # None: an exception of its own
    return _run_verb(verb, rest)


def _import_verb(module_name: str) -> Any:
    """The verb's module, imported with the collector paused (:func:`trainer_cli.imports.heavy_import`)."""
    from trainer_cli.imports import heavy_import

    with heavy_import():
        return importlib.import_module(module_name)


def _quick_exit() -> None:
    """The last exit handler of a ``train`` process: ``gc.freeze()``, so that Python's shutdown
    does not run full garbage collections over the millions of objects torch and Lightning
    imported while it clears the modules (1.2-1.5 s of every command that imported Lightning, after
    its work was done). Objects are still freed as their modules go; only cycles still alive at
    exit are left to the end of the process, whose ``__del__`` Python does not promise to call
    then anyway (the data model's ``object.__del__``). Every file the launcher writes is closed
    where it is written, and Lightning's loggers are finalized when training ends."""
    gc.freeze()


def _run_verb(verb: str, rest: list[str]) -> int:
    if verb not in VERBS:
        import difflib

        close = difflib.get_close_matches(verb, list(VERBS), n=3)
        hint = f" Did you mean: {', '.join(close)}?" if close else ""
        return report_user_error(UserError(f"unknown verb {verb!r}.{hint} Verbs: {', '.join(VERBS)}."))
    target = TARGETS[verb]
    request = Request.of(rest, verb)  # the command line, read once
    if verb == "fit" and request.sweep:  # trials one after another, each a plain `fit` process
        target, verb = "trainer_cli.sweeps.local:main", "fit-sweep"
    engine = request.last("scheduler") if verb == "submit" else None
    if engine in SUBMIT_TARGETS:  # `train submit --scheduler NAME`: that engine's submission
        target = SUBMIT_TARGETS[engine]
    module_name, func_name = target.split(":")
    test_after_fit = request.has("test_after_fit")  # `train fit`'s own switch: the test follows the fit here
    try:
        if engine is not None and engine not in SCHEDULER_NAMES:
            raise UserError(f"--scheduler {engine}: not an engine; choose one of {', '.join(SCHEDULER_NAMES)}")
        if test_after_fit and verb != "fit":
            on_slurm = ": on Slurm, --slurm.test_after_fit true" if verb == "submit" else ""
            raise UserError(f"--test_after_fit is train fit's (a plain fit, without --sweep){on_slurm}")
        request = request.without("test_after_fit")
        from trainer_cli.config.before_parse import precheck

        # mistakes seen without torch, before its import; a verb that reads --config files takes the request as
        # the precheck composed it (each file read and composed once: trainer_cli.config.compose.composed)
        request = dataclasses.replace(request, composed=precheck(verb if verb != "fit-sweep" else "fit", request))
        if verb in LIGHTNING_VERBS:  # parses the command line the precheck composed
            run = lambda: getattr(_import_verb(module_name), func_name)(  # noqa: E731
                verb, request, **({"test_after_fit": True} if test_after_fit else {})
            )
            if request.only_help:  # `train fit --help` without importing Lightning, after the first time
                from trainer_cli.config import help_cache

                if help_cache.cacheable(request):
                    return help_cache.print_help(verb, run)
            return int(run() or 0)
        takes_request = verb in REQUEST_VERBS  # (the others read their own words, with the request's reader)
        given: dict[str, Any] = {}
        if verb in ENGINE_VERBS:  # the engines behind the scheduler seam, built here (launch/ imports none)
            from trainer_cli.schedulers import engines

            given["engines"] = engines()
        if verb == "completion":  # each verb's options from its --help, as `train` answers it
            given["verb_help"] = verb_help
        verb_main = getattr(_import_verb(module_name), func_name)
        return int(verb_main(request if takes_request else request.tokens(), **given) or 0)
    except UserError as err:
        return report_user_error(err)
    except LockTimeout as err:  # a record's lock not taken in time (trainer_cli.atomic): one line, as a user error
        return report_user_error(err)


def verb_help(verb: str) -> str:
    """What ``train VERB --help`` prints (shell completion reads each verb's options from it: the tools know no
    verb's module)."""
    text = io.StringIO()
    with contextlib.redirect_stdout(text), contextlib.suppress(SystemExit):
        _run_verb(verb, ["--help"])
    return text.getvalue()


if __name__ == "__main__":
    sys.exit(main())
