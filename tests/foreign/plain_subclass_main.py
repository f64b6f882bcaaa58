"""The user's script for stock Lightning in subclass mode (``--model pkg.Class`` picks any SmallNet subclass)."""

from lightning.pytorch.cli import LightningCLI

from lit_foreign.cli import TRAINER_DEFAULTS
from lit_foreign.data import BlobData
from lit_foreign.model import SmallNet


class SubclassCLI(LightningCLI):
    def add_arguments_to_parser(self, parser) -> None:  # type: ignore[no-untyped-def]
        parser.link_arguments("data.n_labels", "model.init_args.num_classes")


if __name__ == "__main__":
    SubclassCLI(SmallNet, BlobData, subclass_mode_model=True, trainer_defaults=TRAINER_DEFAULTS, seed_everything_default=7)
