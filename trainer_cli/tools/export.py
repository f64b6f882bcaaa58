"""``train export``: a checkpoint's plain ``nn.Module`` for deployment, without Lightning.

Writes into ``--out`` (default ``<run directory>/export``):

- ``weights.pt``: the backbone's ``state_dict`` (``model.net``, no Lightning wrapper; ``torch.save``);
- ``module.json``: how to rebuild the backbone: the keyword arguments of
  :func:`trainer_cli.models.registry.build_backbone` (imports only torch and torchvision), its class path,
  and the input and output shapes;
- with ``--torch_export``: ``program.pt2``, a ``torch.export`` program (``torch.export.save``) with
  a dynamic batch dimension, which needs no Python model code at all to run;
- with ``--onnx``: ``model.onnx`` (``torch.onnx.export``; needs the optional extra ``onnx``).

Rebuilding in plain PyTorch (no Lightning import)::

    import json, torch
    from trainer_cli.models.registry import build_backbone

    spec = json.load(open("export/module.json"))
    net = build_backbone(**spec["build_backbone"]).eval()
    net.load_state_dict(torch.load("export/weights.pt", weights_only=True))
    logits = net(images)  # images [b, c, h, w] float32, normalised as in training

or, from the program alone: ``torch.export.load("export/program.pt2").module()(images)``.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainer_cli.errors import UserError
from trainer_cli.imports import import_class
from trainer_cli.runtime.configured_run import parse_verb_args, verb_parser

WEIGHTS_FILE = "weights.pt"
SPEC_FILE = "module.json"
PROGRAM_FILE = "program.pt2"
ONNX_FILE = "model.onnx"
FORMAT = "trainer-cli-export/1"
# hyperparameters of trainer_cli.models.ImageClassifier that build_backbone takes by name
BACKBONE_HPARAMS = ("num_classes", "in_channels", "image_size", "cifar_stem")

EPILOG = f"""\
example:
  train export --ckpt runs/digits/version_0/checkpoints/last.ckpt --torch_export
  # writes runs/digits/version_0/export/{{{WEIGHTS_FILE},{SPEC_FILE},{PROGRAM_FILE}}}

load it in plain PyTorch (no Lightning):
  import json, torch
  from trainer_cli.models.registry import build_backbone
  spec = json.load(open("runs/digits/version_0/export/{SPEC_FILE}"))
  net = build_backbone(**spec["build_backbone"]).eval()
  net.load_state_dict(torch.load("runs/digits/version_0/export/{WEIGHTS_FILE}", weights_only=True))
"""


def main(args: Sequence[str]) -> int:
    """``train export --ckpt FILE [--out DIR] [--torch_export] [--onnx]``.

    Raises:
        UserError: for a missing or foreign checkpoint, an existing non-empty ``--out``, or ``--onnx``
            without the ``onnx`` extra installed.
    """
    parser = verb_parser("export", "Export a checkpoint's plain nn.Module (state_dict + how to rebuild it).", EPILOG)
    parser.add_argument("--ckpt", required=True, help="Lightning checkpoint (.ckpt) written by `train fit`.")
    parser.add_argument(
        "--out", default=None, help="Output folder; must be new or empty (default: <run directory>/export)."
    )
    parser.add_argument(
        "--torch_export", action="store_true", help=f"Also write a torch.export program ({PROGRAM_FILE})."
    )
    parser.add_argument(
        "--onnx", action="store_true", help=f"Also write ONNX ({ONNX_FILE}); needs `pip install 'trainer-cli[onnx]'`."
    )
    opts, rest = parse_verb_args(parser, args)
    if rest:
        raise UserError(
            f"train export takes no training options, got {' '.join(rest)}: it reads everything from --ckpt"
        )
    if opts.onnx:
        require_onnx()
    ckpt = Path(opts.ckpt).expanduser()
    out = Path(opts.out).expanduser() if opts.out else default_out_dir(ckpt)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(
            f"--out {out} already exists and is not empty: choose another --out or remove it (nothing is overwritten)"
        )

    module, class_path = load_lightning_module(ckpt)
    net, spec = backbone_and_spec(module, ckpt)
    spec["lightning_module"] = class_path
    example = torch.zeros(2, *spec["input_shape"])
    out.mkdir(parents=True, exist_ok=True)
    torch.save(net.state_dict(), out / WEIGHTS_FILE)
    written = [WEIGHTS_FILE, SPEC_FILE]
    if opts.torch_export:
        torch.export.save(export_program(net, example), out / PROGRAM_FILE)
        written.append(PROGRAM_FILE)
    if opts.onnx:
        export_onnx(net, example, out / ONNX_FILE)
        written.append(ONNX_FILE)
    spec["files"] = written
    (out / SPEC_FILE).write_text(json.dumps(spec, indent=2) + "\n")
    print(f"Exported {spec['class_path']} from {ckpt} to {out}: {', '.join(written)}")
    print(
        f"Load without Lightning: build_backbone(**json.load(open('{out / SPEC_FILE}'))['build_backbone']) "
        f"then load_state_dict(torch.load('{out / WEIGHTS_FILE}', weights_only=True))"
    )
    return 0


def default_out_dir(ckpt: Path) -> Path:
    """``<run directory>/export`` for ``<run directory>/checkpoints/x.ckpt``; else ``export`` next to the file."""
    parent = ckpt.parent
    return (parent.parent if parent.name == "checkpoints" else parent) / "export"


def load_lightning_module(ckpt: Path) -> tuple[Any, str]:
    """The LightningModule saved in ``ckpt`` (on the CPU, in eval mode) and its class path (the
    checkpoint's ``hyper_parameters._class_path``, written by LightningCLI).

    Raises:
        UserError: for a missing file or a checkpoint that does not name its LightningModule.
    """
    if not ckpt.is_file():
        raise UserError(f"--ckpt {ckpt}: file not found (checkpoints are in <run directory>/checkpoints/)")
    try:
        raw = torch.load(ckpt, map_location="cpu", weights_only=False)
    except Exception as err:  # noqa: BLE001 - any unreadable file is the user's input
        raise UserError(f"--ckpt {ckpt} is not a readable PyTorch checkpoint: {str(err).splitlines()[0]}") from None
    hparams = raw.get("hyper_parameters") if isinstance(raw, dict) else None
    if not hparams or "_class_path" not in hparams:
        raise UserError(
            f"--ckpt {ckpt} does not name its LightningModule (no hyper_parameters._class_path): "
            "export reads checkpoints written by `train fit`"
        )
    cls: Any = import_class(hparams["_class_path"])  # a LightningModule class (Lightning not imported here)
    # pretrained weights are in the checkpoint already: don't look for the original weights file
    overrides = {"weights_path": None} if "weights_path" in hparams else {}
    module = cls.load_from_checkpoint(ckpt, map_location="cpu", **overrides)
    return module.eval(), hparams["_class_path"]


def backbone_and_spec(module: Any, ckpt: Path) -> tuple[nn.Module, dict[str, Any]]:
    """The module's plain backbone ``module.net`` and the JSON-able recipe to rebuild it.

    Raises:
        UserError: when the module has no ``net`` backbone built from a ``backbone`` name.
    """
    hparams = dict(module.hparams)
    net = getattr(module, "net", None)
    if not isinstance(net, nn.Module) or "backbone" not in hparams:
        raise UserError(
            f"{type(module).__name__} has no `net` backbone built by name (`backbone` hyperparameter): "
            "export handles modules like trainer_cli.models.ImageClassifier"
        )
    build = {"name": hparams["backbone"], **{k: hparams[k] for k in BACKBONE_HPARAMS if k in hparams}}
    build.update(hparams.get("backbone_kwargs") or {})
    net_cls = type(net)
    return net.eval(), {
        "format": FORMAT,
        "class_path": f"{net_cls.__module__}.{net_cls.__qualname__}",
        "build_backbone": build,
        "input_shape": [hparams["in_channels"], hparams["image_size"], hparams["image_size"]],
        "input": "float32 images [batch, channels, height, width], normalised as the data module does",
        "output": f"logits [batch, {hparams.get('num_classes')}]",
        "checkpoint": str(ckpt.resolve()),
        "torch_version": torch.__version__,
    }


def export_program(net: nn.Module, example: torch.Tensor) -> Any:
    """``torch.export.export`` of ``net`` in eval mode with a dynamic batch dimension.

    Args:
        net: The backbone, mapping ``[b, c, h, w]`` to ``[b, num_classes]``.
        example: An input of shape ``[b, c, h, w]`` with ``b >= 2`` (batch 1 would be specialised).
    """
    batch = torch.export.Dim("batch")
    return torch.export.export(net.eval(), (example,), dynamic_shapes=({0: batch},))


def require_onnx() -> None:
    """Raises:
    UserError: naming the optional extra when ``onnx`` or ``onnxscript`` is not installed."""
    missing = [name for name in ("onnx", "onnxscript") if importlib.util.find_spec(name) is None]
    if missing:
        raise UserError(
            f"--onnx needs the optional extra `onnx` ({', '.join(missing)} not installed): "
            "pip install 'trainer-cli[onnx]', or leave out --onnx"
        )


def export_onnx(net: nn.Module, example: torch.Tensor, path: Path) -> None:
    """Write ``net`` as ONNX (input ``images`` [batch, c, h, w], output ``logits``; dynamic batch)."""
    torch.onnx.export(
        net.eval(),
        (example,),
        str(path),
        input_names=["images"],
        output_names=["logits"],
        dynamic_shapes=({0: torch.export.Dim("batch")},),
        dynamo=True,
    )
