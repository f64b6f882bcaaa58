"""What code a job runs, for every engine to render and describe the job (one rule for Slurm and Ray): for a user's
script (``python main.py submit``, ``python -m pkg.train submit``) the script's copy in the code snapshot or
the script where it is, as a file or as a module (:class:`ScriptEntry`), and the job's name after the
script's runs (:func:`script_job_name`); for every submission its ``Code:`` line (:func:`code_line`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer_cli.schedulers import snapshot


@dataclass(frozen=True)
class ScriptEntry:
    """The user's script a job runs (``python main.py submit``): its copy in the code snapshot, or
    the submitted file itself where there is no copy."""

    path: Path
    """The file the job runs (absolute): ``<run>/code/...`` or the script where it is."""
    live: str | None
    """Why the job runs the script where it is (no copy in the snapshot); None: it runs the copy."""
    script: Path
    """The script as submitted (absolute)."""
    module: str | None = None
    """The module the script runs as (``python -m pkg.train``): the job runs ``python -m`` it too, from the
    snapshot's copy of the submitting folder (the job starts there), or from the submitting folder."""

    @property
    def words(self) -> list[str]:
        """What the job's ``python`` runs: ``-m <module>``, or the script's file."""
        return ["-m", self.module] if self.module else [str(self.path)]

    @property
    def shown(self) -> str:
        """The entry as the plan says it: ``python -m <module> (<file>)``, or the file."""
        return f"python -m {self.module} ({self.path})" if self.module else str(self.path)


def no_snapshot(snapshot_off: str | None, submit_dir: Path) -> str:
    """Why a job takes no code snapshot: the option that turned it off (``snapshot_off``, as the engine
    names it), or no git work tree to take it of."""
    return snapshot_off or f"{submit_dir} is in no git work tree"


def script_entry(script: Path, snapshot_off: str | None, run_dir: Path, submit_dir: Path) -> ScriptEntry:
    """Which file a job running ``script`` runs. With a code snapshot (:mod:`trainer_cli.schedulers.snapshot`)
    holding the script, its copy there: Python puts the script's folder first on ``sys.path``, so the
    job imports the user's modules from the snapshot too, not from the live tree. Otherwise (no
    snapshot, or the script outside the work tree or ignored by git) the script where it is.
    ``snapshot_off``: the option that turned the job's snapshot off, as its engine names it (Slurm's
    ``--slurm.snapshot false``); None where it takes one."""
    script = script.absolute()
    top = snapshot.work_tree(submit_dir) if snapshot_off is None else None
    if top is None:
        return ScriptEntry(script, no_snapshot(snapshot_off, submit_dir), script)
    copy = snapshot.planned_file(script, submit_dir, run_dir)
    if copy is not None:
        return ScriptEntry(copy, None, script)
    try:
        (script.parent.resolve() / script.name).relative_to(top.resolve())
        why = f"git ignores it in {top}"
    except ValueError:
        why = f"it lies outside the work tree {top}"
    return ScriptEntry(script, why, script)


def script_job_name(config: Any, script: Path) -> str:
    """The job name of a user's script's run, as ``train submit`` names a job after its
    experiment: the name its runs go under (``--name``, its logger's ``name``:
    :func:`trainer_cli.runtime.lightning_folders.lightning_log_root`), else, where that is Lightning's default
    ``lightning_logs``, the folder of the script (its project)."""
    from trainer_cli.runtime.lightning_folders import lightning_log_root

    _, name = lightning_log_root(config)
    return name if name and name != "lightning_logs" else script.absolute().parent.name or "run"


def code_line(
    entry: ScriptEntry | None, snapshot_off: str | None, code: snapshot.Snapshot | None, lead: str = ""
) -> str:
    """The ``Code:`` line of a submission: the code snapshot, and which script a user's script's job runs
    (``entry``); ``snapshot_off``: the option that turned the job's snapshot off (None: it was to take one);
    ``lead``: a dry run's (``# ``: the snapshot planned, not taken)."""
    if code is not None:
        state = "with uncommitted changes" if code.dirty else "clean"
        if code.linked:  # git-ignored data, found where the code's own file says
            shown = ", ".join(code.linked[:3]) + (f" and {len(code.linked) - 3} more" if len(code.linked) > 3 else "")
            state += f"; git-ignored {shown} linked, not copied"
        taken = " (dry run: not taken)" if lead else ""
        where = f"{lead}Code:          {code.root}{taken} ({code.files} files of {code.source} at {code.commit[:12]}"
        where += f", {state})"
        if entry is None:
            return f"{where}: the job imports your code from there"
        if entry.live is None:
            return f"{where}: the job runs {entry.shown} and imports your code from there"
        return (
            f"{where}: the job runs {entry.script} where it is ({entry.live}), so it imports your modules beside "
            "it from there and later edits reach the job"
        )
    if entry is not None:
        return (
            f"{lead}Code:          no snapshot ({entry.live}): the job runs {entry.script} and imports your code as "
            "it is when the job starts"
        )
    return (
        f"{lead}Code:          no snapshot ({no_snapshot(snapshot_off, Path.cwd())}): the job imports your code from "
        "the live files as they are when it starts (later edits reach it)"
    )
