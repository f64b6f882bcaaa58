"""What the entry that starts a run says about it, fixed before anything is parsed: ``train``'s verbs
(the defaults) or a user's script (``TrainerCLI as LightningCLI``: :meth:`RunEntry.script`). Built
once by whoever builds the :class:`trainer_cli.runtime.run.Run` (``train``'s verbs, ``train cv``,
:class:`trainer_cli.runtime.cli.TrainerCLI` for a script) and given to it; read, never written."""

from __future__ import annotations

from dataclasses import dataclass

RESUME_COMMAND = "train fit --run_dir {path} --ckpt_path last"


@dataclass(frozen=True)
class RunEntry:
    """The facts of a run's entry (see the module's description)."""

    command: str = "train"
    """The entry that re-runs the run's record (``train``; a user's script: ``python main.py``)."""
    resume_command: str = RESUME_COMMAND
    """The command the resume line after a stop shows (``{path}``: the run directory)."""
    follows_lightning: bool = False
    """Files where LightningCLI puts them (a user's script): a new run's directory is the folder
    Lightning's ``ModelCheckpoint`` saves into, chosen by Lightning (its logger's version or run id)
    and bound when the Trainer is built (:meth:`trainer_cli.runtime.run.Run.bind_to_log_dir`);
    ``config.yaml`` is written by the script's ``SaveConfigCallback`` where that folder is its
    ``log_dir``."""
    missing_is_error: bool = True
    """A missing ``--ckpt_path`` file: one line before anything is written (False: Lightning's error,
    when it loads it: a script called from Python, as LightningCLI fails there)."""
    checkpoint_hparams_win: bool = False
    """LightningCLI's rule for a user's script: the checkpoint's hyperparameters replace the config's
    model arguments, so a difference is not refused."""

    @classmethod
    def script(cls, command: str, has_verbs: bool, missing_is_error: bool) -> RunEntry:
        """A user's script's entry: ``command`` (``python main.py``) re-runs its record, its resume line
        names ``fit`` where the script has verbs (not one built with ``run=False``)."""
        verb = " fit" if has_verbs else ""
        return cls(
            command=command,
            resume_command=f"{command}{verb} --run_dir {{path}} --ckpt_path last",
            follows_lightning=True,
            missing_is_error=missing_is_error,
            checkpoint_hparams_win=True,
        )
