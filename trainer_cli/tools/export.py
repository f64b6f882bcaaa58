"""``train export``: a checkpoint's plain ``nn.Module`` for deployment, without Lightning.

Writes into ``--out`` (default ``<run directory>/export``):

- ``weights.pt``: the backbone's ``state_dict`` (``model.net``, no Lightning wrapper; ``torch.save``);
- ``module.json``: how to rebuild the backbone: the keyword arguments of
  :func:`trainer_cli.models.registry.build_backbone` (imports only torch and torchvision), its class path,
  the input and output shapes, and ``input_transform``: how raw images become the model's input (the
  data module's scale and per-channel mean and std, saved in the checkpoint by the data module;
  ``images = (raw * scale - mean) / std``);
- with ``--torch_export``: ``program.pt2``, a ``torch.export`` program (``torch.export.save``) with
  a dynamic batch dimension, which needs no Python model code at all to run;
- with ``--onnx``: ``model.onnx`` (``torch.onnx.export``; needs the optional extra ``onnx``).

Rebuilding in plain PyTorch (no Lightning import)::

    import json, torch
    from trainer_cli.models.registry import build_backbone

    spec = json.load(open("export/module.json"))
    net = build_backbone(**spec["build_backbone"]).eval()
    net.load_state_dict(torch.load("export/weights.pt", weights_only=True))
    t = spec["input_transform"]  # the data module's normalisation (None: not recorded)
    mean, std = (torch.tensor(t[k]).view(1, -1, 1, 1) for k in ("mean", "std"))
    logits = net((raw * t["scale"] - mean) / std)  # raw [b, c, h, w] pixels as the data set stores them

or, from the program alone: ``torch.export.load("export/program.pt2").module()(images)``.

The checkpoint is read with torch's safe loader (``torch.load(weights_only=True)``: tensors and plain
values only), so a crafted file cannot run code; ``--trust_checkpoint`` lifts that for a file the user
trusts that holds other objects.
"""

from __future__ import annotations

import importlib.util
import json
import pickle
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainer_cli.config.after_parse import first_line, refused_object
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
  train export --run_dir runs/digits/version_0    # the run's best checkpoint (else its last.ckpt)

load it in plain PyTorch (no Lightning):
  import json, torch
  from trainer_cli.models.registry import build_backbone
  spec = json.load(open("runs/digits/version_0/export/{SPEC_FILE}"))
  net = build_backbone(**spec["build_backbone"]).eval()
  net.load_state_dict(torch.load("runs/digits/version_0/export/{WEIGHTS_FILE}", weights_only=True))
  t = spec["input_transform"]   # feed (raw * t["scale"] - t["mean"][c]) / t["std"][c], per channel c

checkpoints are read with torch's safe loader (weights_only=True): a file that holds other objects
is refused, and nothing in it runs; --trust_checkpoint loads such a file when you trust its source.
"""


def main(args: Sequence[str]) -> int:
    """``train export (--ckpt FILE | --run_dir DIR) [--out DIR] [--torch_export] [--onnx] [--trust_checkpoint]``.

    Raises:
        UserError: for a missing, foreign or unsafe checkpoint, an existing non-empty ``--out``, or ``--onnx``
            without the ``onnx`` extra installed.
    """
    parser = verb_parser("export", "Export a checkpoint's plain nn.Module (state_dict + how to rebuild it).", EPILOG)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--ckpt", help="Lightning checkpoint (.ckpt) written by `train fit`.")
    source.add_argument(
        "--run_dir", help="A run directory of `train fit`: export its best checkpoint (else its last.ckpt)."
    )
    parser.add_argument(
        "--trust_checkpoint",
        action="store_true",
        help="Load the checkpoint with torch's full unpickler (weights_only=False), which can run code stored "
        "in the file: only for a file from a source you trust that the safe loader refuses.",
    )
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
    ckpt = Path(opts.ckpt).expanduser() if opts.ckpt else run_checkpoint(Path(opts.run_dir).expanduser())
    out = Path(opts.out).expanduser() if opts.out else default_out_dir(ckpt)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(
            f"--out {out} already exists and is not empty: choose another --out or remove it (nothing is overwritten)"
        )

    module, class_path, raw = load_lightning_module(ckpt, trust=opts.trust_checkpoint)
    net, spec = backbone_and_spec(module, ckpt)
    spec["lightning_module"] = class_path
    spec["input_transform"] = recorded_input_transform(raw)
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
    transform = spec["input_transform"]
    if transform:
        print(
            f"Input: (raw * {transform['scale']:.6g} - mean) / std per channel, mean "
            f"{[round(v, 4) for v in transform['mean']]}, std {[round(v, 4) for v in transform['std']]} "
            f"({SPEC_FILE}: input_transform)"
        )
    else:
        print(f"Input: not recorded in the checkpoint; normalise as the data module did ({SPEC_FILE}: input_transform)")
    return 0


def run_checkpoint(run_dir: Path) -> Path:
    """The checkpoint ``--run_dir`` exports: the run's best (by its monitored score), else its ``last.ckpt``.

    Raises:
        UserError: when ``run_dir`` is not a directory or holds no checkpoint.
    """
    from trainer_cli.rundir.layout import best_checkpoint

    if not run_dir.is_dir():
        raise UserError(f"--run_dir {run_dir}: not a directory (run directories are <root>/<name>/version_<N>)")
    last = run_dir / "checkpoints" / "last.ckpt"
    chosen = best_checkpoint(run_dir) or (last if last.is_file() else None)
    if chosen is None:
        raise UserError(f"--run_dir {run_dir} holds no checkpoint (checkpoints/best*.ckpt or checkpoints/last.ckpt)")
    print(f"Exporting {chosen.relative_to(run_dir) if chosen.is_relative_to(run_dir) else chosen} of {run_dir}")
    return chosen


def recorded_input_transform(raw: Any) -> dict[str, Any] | None:
    """The input transform a data module of :mod:`trainer_cli.data` saved in the checkpoint
    (``ClassificationDataModule.state_dict``), or None when the checkpoint holds none."""
    from trainer_cli.data.base import INPUT_TRANSFORM_KEY

    for value in raw.values() if isinstance(raw, dict) else ():
        if isinstance(value, dict) and isinstance(value.get(INPUT_TRANSFORM_KEY), dict):
            return dict(value[INPUT_TRANSFORM_KEY])
    return None


def default_out_dir(ckpt: Path) -> Path:
    """``<run directory>/export`` for ``<run directory>/checkpoints/x.ckpt``; else ``export`` next to the file."""
    parent = ckpt.parent
    return (parent.parent if parent.name == "checkpoints" else parent) / "export"


def load_lightning_module(ckpt: Path, trust: bool = False) -> tuple[Any, str, dict[str, Any]]:
    """The LightningModule saved in ``ckpt`` (on the CPU, in eval mode), its class path (the
    checkpoint's ``hyper_parameters._class_path``, written by LightningCLI) and the checkpoint itself.

    The file is read with torch's safe loader (``weights_only=True``: nothing in it is run) unless
    ``trust`` (``--trust_checkpoint``).

    Raises:
        UserError: for a missing file, one the safe loader refuses, or a checkpoint that does not name
            its LightningModule.
    """
    if not ckpt.is_file():
        raise UserError(f"--ckpt {ckpt}: file not found (checkpoints are in <run directory>/checkpoints/)")
    if not trust and not zipfile.is_zipfile(ckpt):
        raise UserError(f"--ckpt {ckpt} is not a readable PyTorch checkpoint (truncated, corrupt, or not torch.save)")
    try:
        raw = torch.load(ckpt, map_location="cpu", weights_only=not trust)
    except pickle.UnpicklingError as err:
        if trust:
            raise UserError(f"--ckpt {ckpt} is not a readable PyTorch checkpoint: {first_line(err)}") from None
        raise UserError(
            f"--ckpt {ckpt}: refused by torch's safe loader (weights_only=True; nothing in it was run): "
            f"{refused_object(err)}; if you trust the file's source, add --trust_checkpoint"
        ) from None
    except Exception as err:  # noqa: BLE001 - any unreadable file is the user's input
        raise UserError(f"--ckpt {ckpt} is not a readable PyTorch checkpoint: {first_line(err)}") from None
    hparams = raw.get("hyper_parameters") if isinstance(raw, dict) else None
    if not hparams or "_class_path" not in hparams:
        raise UserError(
            f"--ckpt {ckpt} does not name its LightningModule (no hyper_parameters._class_path): "
            "export reads checkpoints written by `train fit`"
        )
    cls: Any = import_class(hparams["_class_path"])  # a LightningModule class (Lightning not imported here)
    # pretrained weights are in the checkpoint already: don't look for the original weights file
    overrides = {"weights_path": None} if "weights_path" in hparams else {}
    module = cls.load_from_checkpoint(ckpt, map_location="cpu", weights_only=not trust, **overrides)
    return module.eval(), hparams["_class_path"], raw


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
        "input": "float32 images [batch, channels, height, width], normalised as input_transform says",
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
