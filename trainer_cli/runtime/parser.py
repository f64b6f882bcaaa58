"""The parser of :class:`trainer_cli.runtime.cli.TrainerCLI` and its errors: close matches for unknown
keys and class names, the config file and line a bad value came from, the values the links gave."""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path
from typing import Any, Optional

import yaml
from jsonargparse import Namespace
from lightning.pytorch import LightningModule
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI

from trainer_cli.config.after_parse import with_checkpoint_class
from trainer_cli.config.explain import explain_parse_error, locate
from trainer_cli.config.keys import Layers
from trainer_cli.errors import ConfigError, report_user_error
from trainer_cli.optim.partials import skipped_arguments
from trainer_cli.rundir import record as run_records

CONFIG_HELP = (
    "--config FILE is repeatable (later layers win; short forms like experiment/digits work). "
    "--config_root DIR (repeatable) and $TRAINER_CLI_CONFIG_PATH add user config roots, folders laid out like "
    "configs/, searched before the bundled configs. "
    "train fit --sweep KEY=V1,V2 (repeatable; range(), uniform(), loguniform(), randint(), choice() with "
    "--sweep_trials N --sweep_seed S) runs one fit per trial in a sweep directory (`train sweep-results --help`). "
    "train fit --test_after_fit: once the fit has trained to its end, `train test` on the run's best checkpoint, on "
    "one device (as --slurm.test_after_fit true queues it on Slurm). "
    "Data->model links: the model's num_classes, in_channels and image_size take the data module's value where the "
    "model takes the argument, it was left at its default and the data module declares it (a value you set is kept); "
    "config.yaml records the value used."
)


class TrainerArgumentParser(LightningArgumentParser):
    """LightningCLI's parser whose errors name close matches for unknown keys and class names, and
    the config file and line a bad value came from (in its command line's :attr:`layers`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("epilog", CONFIG_HELP)  # `train fit --help`
        super().__init__(*args, **kwargs)
        self.layers = Layers()  # where each value of the command line parsed was written (TrainerCLI sets them)
        self.exits = False  # a user's script: an error ends the process here, as LightningCLI's parser does
        self.stock_keys_only = False  # a user's script: a printed config holds only what LightningCLI takes (dump)
        self.not_stock_keys: tuple[str, ...] = ()  # keys left out of every dump (a run=False script: ckpt_path, ...)

    def add_lightning_class_args(
        self, lightning_class: Any, nested_key: str, subclass_mode: bool = False, required: bool = True
    ) -> list[str]:
        """LightningArgumentParser's; a model's optimizer and scheduler arguments leave out what the module
        gives them when it builds them (:func:`trainer_cli.optim.partials.skipped_arguments`: Hydra's
        ``_partial_`` entries, with the class as their annotation)."""
        if not (isinstance(lightning_class, type) and issubclass(lightning_class, LightningModule)):
            return super().add_lightning_class_args(lightning_class, nested_key, subclass_mode, required)
        skip = skipped_arguments()
        if subclass_mode:
            return self.add_subclass_arguments(  # type: ignore[no-any-return]
                lightning_class, nested_key, fail_untyped=False, required=required, skip=skip
            )
        return self.add_class_arguments(  # type: ignore[no-any-return]
            lightning_class,
            nested_key,
            fail_untyped=False,
            sub_configs=True,
            skip=skip,  # type: ignore[arg-type]
        )

    def link_arguments(  # type: ignore[override]
        self, source: Any, target: str, compute_fn: Any = None, apply_on: str = "parse", **kwargs: Any
    ) -> None:
        """jsonargparse's; the target is remembered, so the launcher's own data->model links leave
        a key the user's CLI links alone. A link applied when the classes are built (``apply_on=
        "instantiate"``) has the value it gives recorded (:attr:`link_values`, the run's config.yaml
        holds it: the value the object was built with, not the constructor's default)."""
        if apply_on == "instantiate" and (compute_fn is not None or isinstance(source, str)):
            compute_fn = partial(_recorded_link, compute_fn, target, self.link_values)
        super().link_arguments(source, target, compute_fn, apply_on, **kwargs)
        self.link_targets = getattr(self, "link_targets", set()) | {target}
        if apply_on == "instantiate":
            self.instantiate_link_targets = getattr(self, "instantiate_link_targets", set()) | {target}

    @property
    def link_values(self) -> dict[str, Any]:
        """``{target key: value}`` of the links applied when the classes were built (YAML values only)."""
        if "_link_values" not in self.__dict__:
            self.__dict__["_link_values"] = {}
        return self.__dict__["_link_values"]  # type: ignore[no-any-return]

    def error(self, message: str, ex: Optional[Exception] = None) -> Any:  # type: ignore[override]
        """jsonargparse's for its inner parsers (``exit_on_error=False``: it tries the next type);
        for the command line's own a :class:`trainer_cli.errors.ConfigError` (the key, its file and
        line, the message with close matches), rendered where the command started (``train``'s
        ``main``). In a user's script (:attr:`exits`) the parser is where the command started, as
        LightningCLI's: it renders the error and exits 2 (LightningCLI catches that ``SystemExit``
        to add its own line, e.g. for a checkpoint's hyperparameters).

        Raises:
            ConfigError: for a key or value of the command line the parser refuses.
            SystemExit: 2, in a user's script, after one ``error:`` line on stderr.
        """
        message = explain_parse_error(
            message, getattr(ex, "subcommand_parser", None) or self, layers=getattr(self, "layers", None)
        )
        if not self.exit_on_error:
            return super().error(message, ex)
        verb = (getattr(ex, "subcommand_parser", None) or self).prog.split()[-1]
        verb = verb if verb in LightningCLI.subcommands() else "fit"  # lr-find, cv, ...: fit's options
        key, origin = locate(message, self.layers)  # a value from a --config file: the file and line
        hint = _replaced_class_hint(str(origin or ""), message)
        command = getattr(self, "help_command", "train")  # or the user's script (TrainerCLI.init_parser)
        error = ConfigError(message, key, origin, hint, f"`{command} {verb} --help` lists every option")
        if self.exits:
            sys.exit(report_user_error(error))
        raise error

    def dump(self, namespace: Namespace, *args: Any, **kwargs: Any) -> str:  # type: ignore[override]
        """jsonargparse's; in a user's script (:attr:`stock_keys_only`) a dump that leaves the link targets
        out, as ``--print_config`` and a plain ``save`` do, holds only what the script's stock LightningCLI
        takes: the launcher's own keys (:data:`trainer_cli.rundir.record.LAUNCHER_KEYS`) are left out, as the
        run's config.yaml leaves them out. The run's record (a dump with the link targets) keeps them, for
        ``launcher.yaml``."""
        if self.stock_keys_only and kwargs.get("skip_link_targets", True) and isinstance(namespace, Namespace):
            namespace = namespace.clone()
            for key in run_records.LAUNCHER_KEYS:
                if key in namespace:
                    del namespace[key]
        if self.not_stock_keys and isinstance(namespace, Namespace):  # any dump: config.yaml too
            namespace = namespace.clone()
            for key in self.not_stock_keys:
                if key in namespace:
                    del namespace[key]
        return super().dump(namespace, *args, **kwargs)  # type: ignore[no-any-return]

    def save(self, cfg: Namespace, path: Any, *args: Any, overwrite: bool = False, **kwargs: Any) -> None:  # type: ignore[override]
        """jsonargparse's; in a user's script the run's record (:meth:`trainer_cli.runtime.run.Run.record`:
        the resolved config with the linked values and a header) is what LightningCLI's
        SaveConfigCallback saves into the run directory; a config it saves elsewhere (no logger: stock's
        ``config.yaml`` in ``default_root_dir``, :meth:`trainer_cli.runtime.run.Run.bind_to_log_dir`) is
        stock's text."""
        record = getattr(self, "run_record", None)
        record_dir = getattr(self, "record_dir", None)
        if record is None or (record_dir is not None and Path(path).absolute().parent != record_dir):
            return super().save(cfg, path, *args, overwrite=overwrite, **kwargs)
        target = Path(path)
        if target.exists() and not overwrite:
            raise ValueError(f"Refusing to overwrite existing file: {target}")  # jsonargparse's rule
        run_records.write(target, record)  # config.yaml as LightningCLI reads it, launcher.yaml beside
        return None

    def parse_object(self, obj: Any, namespace: Optional[Namespace] = None, *args: Any, **kwargs: Any) -> Namespace:  # type: ignore[override]
        """jsonargparse's; a stock checkpoint's hyperparameters apply to the configured model
        (:func:`trainer_cli.config.after_parse.with_checkpoint_class`)."""
        return super().parse_object(with_checkpoint_class(obj, namespace), namespace, *args, **kwargs)


def _recorded_link(compute_fn: Any, target: str, values: dict[str, Any], *sources: Any) -> Any:
    """A link's value (``compute_fn`` of the sources, or the one source as it is), recorded in
    ``values`` under ``target`` when it is a plain YAML value (a number, a string, a list of them)."""
    value = compute_fn(*sources) if compute_fn is not None else sources[0]
    try:
        yaml.safe_dump(value)
    except yaml.YAMLError:
        return value
    values[target] = value
    return value


def _replaced_class_hint(where: str, message: str) -> str:
    """For an experiment that names another class than its group default (``model: class_path:
    mymodels.TinyNet`` over ``/experiment/digits``): Hydra merged the group file's init_args into
    it. Say how to drop them; for an option set by the body of an experiment this one extends
    (``optimizer: init_args: lr`` of ``/experiment/digits`` with ``override /optimizer: null``), say
    how to give it a class instead."""
    marker = ", from group file "
    if marker not in where or "Problem with given class_path" not in message:
        return ""
    source = Path(where.split(marker, 1)[1].rsplit(" line ", 1)[0])
    group, section = source.parent.name, message.split(":", 1)[0].strip()
    if section and group != section:  # set in the body of a file the experiment extends (/experiment/digits)
        return (
            f"\n  (the option is set by /{group}/{source.stem} itself, which the experiment extends, for a class it "
            f"no longer has: name one for it (`- override /{section}: NAME` in the defaults list, or {section}: "
            f"class_path: in the experiment), or leave /{group}/{source.stem} out of its defaults list)"
        )
    return (
        f"\n  (the option comes from the default /{group} of a defaults list; an experiment that names another "
        f"class keeps its init_args: add `- override /{group}: null` to the experiment's defaults list)"
    )
