"""The user's CLI: their own link and trainer defaults, for any LightningCLI class."""

from __future__ import annotations

from typing import Any

from lit_foreign.data import BlobData
from lit_foreign.model import SmallNet

TRAINER_DEFAULTS: dict[str, Any] = {
    "max_epochs": 2,
    "log_every_n_steps": 2,
    "enable_progress_bar": False,
    "logger": {"class_path": "lightning.pytorch.loggers.CSVLogger", "init_args": {"save_dir": "foreign_logs", "name": "blobs"}},
}


def build(cli_class: type, args: Any = None, run: bool = True, **kwargs: Any) -> Any:
    """``cli_class(SmallNet, BlobData, ...)`` with the project's link (data.n_labels -> model.num_classes)."""

    class ForeignCLI(cli_class):  # type: ignore[misc, valid-type]
        def add_arguments_to_parser(self, parser: Any) -> None:
            super().add_arguments_to_parser(parser)
            parser.link_arguments("data.n_labels", "model.num_classes")

    kwargs.setdefault("trainer_defaults", TRAINER_DEFAULTS)
    kwargs.setdefault("seed_everything_default", 7)
    return ForeignCLI(SmallNet, BlobData, args=args, run=run, **kwargs)
