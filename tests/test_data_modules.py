"""CIFAR-10 and ImageFolder on small data written in the official layouts; missing data errors."""

from __future__ import annotations

from pathlib import Path

import torch
from support import CONFIGS, quiet_args, run_train, write_fake_cifar10, write_image_folder

EXPERIMENTS = CONFIGS / "experiment"


def test_cifar10_resnet18_recipe_runs_on_a_tiny_cifar10(tmp_path: Path) -> None:
    data = write_fake_cifar10(tmp_path / "cifar")
    proc = run_train(
        "fit", "--config", str(EXPERIMENTS / "cifar10_resnet18.yaml"),
        "--data.data_dir", str(data), "--data.val_size", "20", "--data.batch_size", "8", "--data.num_workers", "0",
        "--trainer.accelerator", "cpu", "--trainer.devices", "1",
        "--trainer.limit_train_batches", "2", "--trainer.limit_val_batches", "1",
        *quiet_args(tmp_path / "runs"),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    ckpt = torch.load(tmp_path / "runs" / "cifar10_resnet18" / "version_0" / "checkpoints" / "last.ckpt", weights_only=False)
    assert ckpt["global_step"] == 2
    assert ckpt["hyper_parameters"]["backbone"] == "resnet18" and ckpt["hyper_parameters"]["cifar_stem"]
    conv1 = ckpt["state_dict"]["net.conv1.weight"]
    assert tuple(conv1.shape) == (64, 3, 3, 3)  # the CIFAR stem
    scheduler = ckpt["lr_schedulers"][0]
    assert scheduler["total_steps"] == 2  # OneCycleLR's length came from the trainer (limit_train_batches x epochs)


def test_cifar10_data_module_splits_and_normalises(tmp_path: Path) -> None:
    from trainer_cli.data import CIFAR10DataModule

    dm = CIFAR10DataModule(str(write_fake_cifar10(tmp_path)), batch_size=4, val_size=30, num_workers=0)
    dm.setup("fit")
    assert len(dm.train_set) == 70 and len(dm.val_set) == 30 and len(dm.test_set) == 20
    x, y = next(iter(dm.train_dataloader()))
    assert x.shape == (4, 3, 32, 32) and x.dtype == torch.float32 and y.dtype == torch.int64


def test_image_folder_finetune_learns_the_class_count_from_the_folders(tmp_path: Path) -> None:
    data = write_image_folder(tmp_path / "images")
    proc = run_train(
        "fit", "--config", str(EXPERIMENTS / "imagefolder_finetune.yaml"),
        "--data.data_dir", str(data), "--data.image_size", "32", "--data.batch_size", "4", "--data.num_workers", "0",
        "--trainer.accelerator", "cpu", "--trainer.devices", "1", "--trainer.limit_train_batches", "2",
        *quiet_args(tmp_path / "runs"),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    ckpt = torch.load(tmp_path / "runs" / "imagefolder_finetune" / "version_0" / "checkpoints" / "last.ckpt", weights_only=False)
    assert ckpt["hyper_parameters"]["num_classes"] == 3  # stated once: by the folders
    assert tuple(ckpt["state_dict"]["net.fc.weight"].shape) == (3, 512)


def test_missing_cifar10_says_where_to_put_it(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    proc = run_train("fit", "--config", str(EXPERIMENTS / "cifar10_resnet18.yaml"), "--data.data_dir", str(tmp_path / "nowhere"), *quiet_args(root))
    assert proc.returncode == 2
    assert "CIFAR-10 not found" in proc.stderr and str(tmp_path / "nowhere") in proc.stderr
    assert "download=True" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not list(root.rglob("version_*"))  # a failed start leaves no run directory


def test_missing_image_folder_is_a_clear_error(tmp_path: Path) -> None:
    proc = run_train("fit", "--config", str(EXPERIMENTS / "imagefolder_finetune.yaml"), "--data.data_dir", str(tmp_path / "none"), *quiet_args(tmp_path / "runs"))
    assert proc.returncode == 2
    assert "image folder not found" in proc.stderr and "Traceback" not in proc.stderr


def test_workers_start_as_asked_and_every_dataset_travels_to_forkserver_workers(tmp_path: Path) -> None:
    """``multiprocessing_context``: forkserver workers get each split of CIFAR-10 and ImageFolder
    pickled and deliver batches; the automatic choice (``train``'s own process only, see
    ``tests/test_resume_distributed.py``) leaves a run called from Python at the platform's default."""
    import lightning.pytorch as pl
    import pytest

    from trainer_cli.data import CIFAR10DataModule, DigitsDataModule, ImageFolderDataModule

    cifar = CIFAR10DataModule(data_dir=str(write_fake_cifar10(tmp_path / "cifar")), val_size=20, batch_size=4, num_workers=1,
                              multiprocessing_context="forkserver")
    images = ImageFolderDataModule(data_dir=str(write_image_folder(tmp_path / "images")), image_size=32, batch_size=4, num_workers=1,
                                   multiprocessing_context="forkserver")
    for dm in (cifar, images):
        dm.setup("fit")
        for loader in (dm.train_dataloader(), dm.val_dataloader()):
            assert loader.multiprocessing_context.get_start_method() == "forkserver"
            x, y = next(iter(loader))
            assert x.shape[0] == y.shape[0] == 4 and x.dtype == torch.float32 and x.shape[1:] == (3, 32, 32)

    assert DigitsDataModule(num_workers=0, multiprocessing_context="spawn").worker_start_method() is None  # no workers to start
    with pytest.raises(ValueError, match="multiprocessing_context must be one of fork, spawn, forkserver"):
        DigitsDataModule(num_workers=2, multiprocessing_context="threads")
    digits = DigitsDataModule(num_workers=2)
    digits.trainer = pl.Trainer(accelerator="cpu", devices=2, strategy="ddp", logger=False, enable_checkpointing=False, enable_progress_bar=False)
    assert digits.trainer.world_size == 2 and digits.worker_start_method() is None  # not `train`'s own process
