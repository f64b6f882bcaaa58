"""The image-classification LightningModule: a plain ``nn.Module`` backbone plus loss and metrics."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
import torch
from torch import nn
from torchmetrics import MeanMetric
from torchmetrics.classification import MulticlassAccuracy

from trainer_cli.models.finetune import backbone_modules
from trainer_cli.models.mixing import build_batch_mix, hard_labels
from trainer_cli.models.registry import build_backbone


class MacroAccuracy(MulticlassAccuracy):
    """``MulticlassAccuracy(average="macro")`` kept at most 1: its float32 weighted mean over the classes
    present rounds to 1.0000001 for some perfect predictions (e.g. 23 samples of 10 classes)."""

    def compute(self) -> torch.Tensor:
        return super().compute().clamp(max=1.0)


class ImageClassifier(pl.LightningModule):
    """Image classification with any backbone the registry knows.

    The backbone is a plain ``nn.Module`` (``self.net``): its ``state_dict`` loads into the same
    backbone built outside Lightning. Logged metrics: ``train/loss`` (on the steps the logger
    writes: every ``trainer.log_every_n_steps``), ``train/acc`` (per epoch), ``val/loss``,
    ``val/acc``, ``val/acc_macro``, ``test/loss``, ``test/acc``, ``test/acc_macro`` and, with more
    than 5 classes, ``val/acc_top5`` and ``test/acc_top5``. ``*/acc`` and ``*/acc_top5`` are micro
    accuracies (correct predictions / all samples: the figure papers report); ``*/acc_macro`` is the
    mean of the per-class accuracies (recalls), which weighs rare classes as much as common ones.
    Optimizer and scheduler come from the config's ``optimizer`` and ``lr_scheduler`` sections.

    Args:
        backbone: Backbone name: ``mlp``, ``cnn`` or any torchvision classification model
            (``train ls models``).
        num_classes: Number of classes; linked from the data module, not set by hand.
        in_channels: Image channels; linked from the data module.
        image_size: Image height and width in pixels; linked from the data module.
        cifar_stem: ResNets only: 3x3 stride-1 first convolution and no max-pool (32x32 images).
        weights_path: Optional local file with pretrained torchvision weights (no hub download).
        backbone_kwargs: Extra keyword arguments for the backbone's constructor.
        label_smoothing: Cross-entropy label smoothing in [0, 1).
        mixup_alpha: MixUp on training batches with this Beta(alpha, alpha) (0: off); soft targets.
        cutmix_alpha: CutMix on training batches with this Beta(alpha, alpha) (0: off); with both
            on, each batch gets one of the two. Validation and test batches are never mixed.
        compile: ``torch.compile`` the backbone in place (``nn.Module.compile``: the state_dict
            keys stay plain). Pays a compile time at the first steps; helps on GPUs.
        compile_mode: ``torch.compile`` mode: ``default``, ``reduce-overhead``, ``max-autotune``, ...
        channels_last: Keep the backbone's weights in ``torch.channels_last`` memory format
            (faster convolutions on tensor-core GPUs, especially with bf16/fp16).
    """

    # hyperparameters that do not shape the weights: a checkpoint loads under other values of these
    NON_ARCHITECTURE_HPARAMS = frozenset(
        {"label_smoothing", "mixup_alpha", "cutmix_alpha", "weights_path", "compile", "compile_mode", "channels_last"}
    )

    def __init__(
        self,
        backbone: str = "cnn",
        num_classes: int = 10,
        in_channels: int = 3,
        image_size: int = 32,
        cifar_stem: bool = False,
        weights_path: str | None = None,
        backbone_kwargs: dict[str, Any] | None = None,
        label_smoothing: float = 0.0,
        mixup_alpha: float = 0.0,
        cutmix_alpha: float = 0.0,
        compile: bool = False,
        compile_mode: str | None = None,
        channels_last: bool = False,
    ) -> None:
        super().__init__()
        if not 0.0 <= label_smoothing < 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1), got {label_smoothing}")
        self.save_hyperparameters()
        self.net = build_backbone(
            backbone,
            num_classes=num_classes,
            in_channels=in_channels,
            image_size=image_size,
            cifar_stem=cifar_stem,
            weights_path=weights_path,
            **(backbone_kwargs or {}),
        )
        if channels_last:
            self.net.to(memory_format=torch.channels_last)
        if compile:
            self.net.compile(mode=compile_mode)
        else:  # (a summary forward would compile an extra graph); forward() gives it the weights' dtype
            self.example_input_array = torch.zeros(2, in_channels, image_size, image_size)
        self.criterion = nn.CrossEntropyLoss(label_smoothing=label_smoothing)  # takes soft targets too
        self.batch_mix = build_batch_mix(num_classes, mixup_alpha, cutmix_alpha)
        self._last_mix: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = (
            None  # (images in, images, targets out)
        )
        # training accuracy (micro: correct / samples): the hits are summed on the device each step (one
        # add, no metric bookkeeping per step) and given to the metric once per epoch, weighted by the
        # samples seen, so under DDP its sync gives all ranks' correct / samples
        self.train_acc = MeanMetric(nan_strategy="disable")
        self._train_hits: torch.Tensor | None = None
        self._train_seen = 0
        # micro: correct / samples; macro: mean per-class accuracy (metric states are not in the state_dict)
        self.val_acc = MulticlassAccuracy(num_classes, average="micro")
        self.test_acc = MulticlassAccuracy(num_classes, average="micro")
        self.val_acc_macro = MacroAccuracy(num_classes, average="macro")
        self.test_acc_macro = MacroAccuracy(num_classes, average="macro")
        self.top5 = num_classes > 5
        if self.top5:
            self.val_acc_top5 = MulticlassAccuracy(num_classes, top_k=5, average="micro")
            self.test_acc_top5 = MulticlassAccuracy(num_classes, top_k=5, average="micro")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits ``[b, num_classes]`` for images ``x`` of shape ``[b, c, h, w]``.

        Floating images take the weights' dtype: ``64-true`` converts the weights, but neither the
        model summary's example input nor images a data module makes after the transfer (the
        batched CIFAR-10's float32).
        """
        if x.is_floating_point() and x.dtype != self.dtype and not torch.is_autocast_enabled(x.device.type):
            x = x.to(self.dtype)
        return self.net(x)

    @property
    def backbone(self) -> nn.Module:
        """All of ``self.net`` but its classification head (what ``BackboneFinetuning`` freezes)."""
        return backbone_modules(self.net)

    def mixed(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """MixUp / CutMix of a training batch: labels ``[b]`` become soft targets ``[b, num_classes]``.

        Done in the training step, not in ``on_after_batch_transfer``: Lightning calls only the data
        module's hook when both define one (the batched CIFAR-10 does), and the model summary's
        example input goes through that hook too. Each batch is mixed once: SAM's second pass (the
        closure run again on the same batch) sees the same mix.
        """
        if self.batch_mix is None:
            return x, y
        if self._last_mix is None or self._last_mix[0] is not x:
            self._last_mix = (x, *self.batch_mix(x, y))
        return self._last_mix[1], self._last_mix[2]

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = self.mixed(*batch)
        logits = self(x)
        loss = self.criterion(logits, y)
        # the hits are only summed here: the metric gets them once, at the epoch's end
        hits = (logits.detach().argmax(1) == hard_labels(y)).sum()
        self._train_hits = hits if self._train_hits is None else self._train_hits + hits
        self._train_seen += len(y)
        if self._logs_written_this_step():  # not prog_bar: Lightning turns every progress-bar value into a
            self.log("train/loss", loss)  # Python float after every step, a host sync that stalls a GPU
        return loss

    def _logs_written_this_step(self) -> bool:
        """Whether Lightning writes this training step's logs (every ``trainer.log_every_n_steps``).

        ``self.log`` costs about as much as a whole small-model step (``benchmarks/README.md``),
        and on the other steps its value would only be overwritten: so ``train/loss`` reaches the
        logger exactly as before, and the progress bar shows it refreshed at that rate.
        """
        trainer = self.trainer  # Lightning's rule (its logger connector's should_update_logs), from public counters
        return (trainer.global_step + 1) % trainer.log_every_n_steps == 0 or trainer.should_stop  # type: ignore[attr-defined]

    def on_train_epoch_end(self) -> None:
        if self._train_hits is not None and self._train_seen:  # no batch this epoch: resumed at its end
            self.train_acc.update(self._train_hits.float() / self._train_seen, weight=self._train_seen)
            self._train_hits, self._train_seen = None, 0
            self.log("train/acc", self.train_acc)  # Lightning computes, syncs and resets it

    def _evaluate(self, batch: tuple[torch.Tensor, torch.Tensor], stage: str) -> None:
        x, y = batch
        logits = self(x)
        self.log(f"{stage}/loss", self.criterion(logits, y), sync_dist=True)
        acc = getattr(self, f"{stage}_acc")
        acc(logits, y)
        self.log(f"{stage}/acc", acc, prog_bar=True)
        acc_macro = getattr(self, f"{stage}_acc_macro")
        acc_macro(logits, y)
        self.log(f"{stage}/acc_macro", acc_macro)
        if self.top5:
            top5 = getattr(self, f"{stage}_acc_top5")
            top5(logits, y)
            self.log(f"{stage}/acc_top5", top5)

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        self._evaluate(batch, "val")

    def test_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        self._evaluate(batch, "test")

    def predict_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        """Class probabilities ``[b, num_classes]``."""
        x = batch[0] if isinstance(batch, (tuple, list)) else batch
        return torch.softmax(self(x), dim=-1)
