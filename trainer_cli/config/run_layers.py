"""A run's own record as ``--config`` layers: ``--run_dir <run>`` alone reads the run's ``config.yaml`` and
``launcher.yaml`` (:func:`with_stored_config`), and a ``--config <run>/config.yaml`` brings the launcher's
settings beside it (:func:`with_run_settings`), for :mod:`trainer_cli.config.compose` and the verbs."""

from __future__ import annotations

from pathlib import Path

from trainer_cli.config.keys import Layers, file_layer
from trainer_cli.config.request import Arg, Request, option
from trainer_cli.errors import UserError
from trainer_cli.rundir import record
from trainer_cli.rundir.layout import CONFIG_FILE


def with_stored_config(
    request: Request, under_configs: bool = False, verb: str | None = None, layers: Layers | None = None
) -> Request:
    """Put ``--config <run_dir>/config.yaml`` first when ``--run_dir`` names a run and no --config is given
    (:func:`stored_configs`); returns the request with them. ``layers``: the layers ``request`` was composed
    with (:func:`trainer_cli.config.compose.compose_args`), given the stored files' layers first, in place (where
    a value of the run's record was written, as for a ``--config <run>/config.yaml`` given).

    Raises:
        UserError: as :func:`stored_configs`.
    """
    stored = stored_configs(request, under_configs, verb)
    if layers is not None:
        layers[:0] = [file_layer(str(arg.value), [(Path(str(arg.value)), "")]) for arg in stored]
    return request.with_args([*stored, *request])


def no_run_there(run_dir: str) -> UserError:
    """The one line for a ``--run_dir`` that holds no run (no ``config.yaml``)."""
    where = "no such folder" if not Path(run_dir).exists() else "no config.yaml there"
    return UserError(
        f"--run_dir {run_dir}: {where} (a run directory of `train fit` holds one); `train runs` lists them"
    )


def stored_configs(request: Request, under_configs: bool = False, verb: str | None = None) -> list[Arg]:
    """The ``--config <run_dir>/config.yaml`` (and its ``launcher.yaml``) items that go first when ``--run_dir``
    names a run and no --config is given; none otherwise.

    With ``under_configs`` (``train submit``, whose ``--config`` files are often a site profile alone)
    they go first under the given ones too, unless one of them is a run's record already.

    Raises:
        UserError: for ``--run_dir`` alone naming a folder that holds no run, where the start of ``verb`` (given
            by ``train``'s verbs, whose model comes from a config) must be a run's: an evaluation (validate,
            test, predict), or a resume (``--ckpt_path``). LightningCLI would say the model is missing. (A
            user's script fixes its classes: its resume says there is no checkpoint to resume.)
    """
    run_dir = request.last("run_dir")
    given = request.values("config")
    resumes = verb in ("validate", "test", "predict") or (verb is not None and request.has("ckpt_path"))
    if run_dir and not given and resumes and not under_configs and not (Path(run_dir) / CONFIG_FILE).is_file():
        raise no_run_there(run_dir)
    stored_given = any(record.launcher_file(c) is not None or Path(c).name == CONFIG_FILE for c in given)
    if (given and not under_configs) or stored_given or not run_dir or not (Path(run_dir) / CONFIG_FILE).is_file():
        return []
    config = Path(run_dir) / CONFIG_FILE
    beside = record.launcher_file(config)  # the launcher's settings of the run, read with it
    return [option("config", str(config)), *([option("config", str(beside))] if beside else [])]


NO_RUN_DIR = "run_dir: null\n"
"""A ``--config`` layer that unsets the ``run_dir`` a run's ``launcher.yaml`` pins (:func:`with_run_settings`)."""


def with_run_settings(value: str, request: Request) -> list[str]:
    """A ``--config`` value of ``request`` and, when it is a run's ``config.yaml``, the ``launcher.yaml`` beside
    it (the launcher's settings of the run, :mod:`trainer_cli.rundir.record`) unless ``request`` names it (one of
    its tokens, as written).

    A ``run_dir`` there naming the file's own folder (earlier versions of ``train submit`` froze it so: the job
    read its folder from there) names the run the file belongs to, not a request to start in it: it is
    unset (:data:`NO_RUN_DIR` after it), so ``train fit --config <run>/config.yaml`` starts a new run as a
    local run's does, unless ``request`` gives ``--run_dir`` or this is that run's own Slurm job still queued
    from before (:func:`trainer_cli.job.jobstate.runs_in`)."""
    beside = None if "\n" in value else record.launcher_file(value)
    if beside is None or any(str(beside) in arg.tokens for arg in request):
        return [value]
    if request.has("run_dir") or not record.pins_own_folder(Path(value)):
        return [value, str(beside)]
    from trainer_cli.job.jobstate import runs_in

    return [value, str(beside)] if runs_in(Path(value).parent) else [value, str(beside), NO_RUN_DIR]
