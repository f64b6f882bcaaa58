"""Load checkpoints as a user would, in a fresh process: ``python checkpoint_loads.py [--block] CLASS=CKPT...``.

``Class.load_from_checkpoint(CKPT)`` with no other argument and ``torch.load(CKPT, weights_only=True)``;
with ``block``, any import of trainer_cli fails (the checkpoint must load where it is not installed).
Prints one JSON line per checkpoint: the optimizer and scheduler classes and lr the restored module's own
``configure_optimizers`` builds (null where the module has none)."""

from __future__ import annotations

import importlib
import importlib.abc
import json
import sys


class _Blocked(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, *args: object) -> None:
        if name == "trainer_cli" or name.startswith("trainer_cli."):
            raise ImportError(f"{name} imported while loading a checkpoint")


def main(class_path: str, ckpt: str) -> dict[str, object]:
    import torch
    from lightning.pytorch import LightningModule

    torch.load(ckpt, weights_only=True, map_location="cpu")
    module_name, _, name = class_path.rpartition(".")
    cls = getattr(importlib.import_module(module_name), name)
    model = cls.load_from_checkpoint(ckpt, map_location="cpu")
    out: dict[str, object] = {"loaded": type(model).__name__, "trainer_cli": "trainer_cli" in sys.modules}
    if type(model).configure_optimizers is not LightningModule.configure_optimizers:
        built = model.configure_optimizers()
        optimizer = built["optimizer"] if isinstance(built, dict) else built
        scheduler = built.get("lr_scheduler") if isinstance(built, dict) else None
        out["optimizer"] = [type(optimizer).__name__, optimizer.defaults["lr"]]
        out["scheduler"] = type(scheduler).__name__ if scheduler is not None else None
    return out


if __name__ == "__main__":
    if sys.argv[1] == "--block":
        sys.meta_path.insert(0, _Blocked())
    for pair in sys.argv[1:]:
        if pair != "--block":
            print(json.dumps(main(*pair.split("=", 1))))
