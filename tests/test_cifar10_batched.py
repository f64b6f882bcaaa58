"""CIFAR-10's two data paths (per-sample PIL transforms, batched on-device augmentation) on a tiny fake CIFAR-10."""

from __future__ import annotations

import torch

from tests.support import CONFIGS, run_train, write_fake_cifar10
from trainer_cli.data.batch_augment import crop_flip_normalize, random_crop, random_flip
from trainer_cli.data.cifar10 import CIFAR10_MEAN, CIFAR10_STD, CIFAR10DataModule
from trainer_cli.models.registry import build_backbone
from trainer_cli.rundir import record

FAST = str(CONFIGS / "experiment" / "cifar10_fast.yaml")


def test_random_crop_matches_a_shifted_window_of_the_padded_image() -> None:
    x = torch.arange(2 * 3 * 8 * 8, dtype=torch.int64).reshape(2, 3, 8, 8).to(torch.uint8)
    out = random_crop(x, padding=2, generator=torch.Generator().manual_seed(0))
    assert out.shape == x.shape and out.dtype == torch.uint8
    padded = torch.nn.functional.pad(x, (2, 2, 2, 2))
    for i in range(2):  # each sample is some 8x8 window of its own padded image
        windows = [padded[i, :, dy : dy + 8, dx : dx + 8] for dy in range(5) for dx in range(5)]
        assert any(torch.equal(out[i], w) for w in windows)


def test_random_flip_mirrors_about_half_and_keeps_the_rest() -> None:
    x = torch.randint(0, 256, (400, 1, 2, 3), dtype=torch.uint8)
    out = random_flip(x, generator=torch.Generator().manual_seed(0))
    flipped = torch.tensor([torch.equal(o, i.flip(2)) and not torch.equal(o, i) for o, i in zip(out, x)])
    kept = torch.tensor([torch.equal(o, i) for o, i in zip(out, x)])
    assert bool((flipped | kept).all()) and 150 < int(flipped.sum()) < 250


def test_normalize_matches_torchvision() -> None:
    from torchvision.transforms import v2

    x = torch.randint(0, 256, (4, 3, 32, 32), dtype=torch.uint8)
    ours = crop_flip_normalize(x, CIFAR10_MEAN, CIFAR10_STD, augment=False, channels_last=True)
    ref = v2.Normalize(CIFAR10_MEAN, CIFAR10_STD)(x.float() / 255)
    assert ours.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(ours, ref, atol=1e-5, rtol=1e-5)


def test_both_paths_read_the_same_images(tmp_path) -> None:
    root = write_fake_cifar10(tmp_path, n_train=40, n_test=12)
    per_sample = CIFAR10DataModule(str(root), batch_size=8, val_size=10, num_workers=0)
    batched = CIFAR10DataModule(str(root), batch_size=8, val_size=10, batched=True)
    for dm in (per_sample, batched):
        dm.setup("fit")
    assert len(batched.train_set) == len(per_sample.train_set) == 30 and len(batched.test_set) == 12
    x_ref, y_ref = next(iter(per_sample.val_dataloader()))
    x_u8, y = next(iter(batched.val_dataloader()))
    assert x_u8.dtype == torch.uint8 and x_u8.shape == (8, 3, 32, 32)
    x = batched.on_after_batch_transfer((x_u8, y), 0)[0]  # no trainer attached: evaluation transform
    assert torch.equal(y, y_ref)
    torch.testing.assert_close(x, x_ref, atol=1e-5, rtol=1e-5)


def test_cifar10_fast_trains_and_its_checkpoint_loads_into_a_plain_backbone(tmp_path) -> None:
    data = write_fake_cifar10(tmp_path / "data", n_train=48, n_test=16)
    done = run_train(
        "fit", "--config", FAST, "--data.data_dir", str(data), "--data.val_size", "16", "--data.batch_size", "16",
        "--model.init_args.backbone", "cnn", "--model.init_args.cifar_stem", "false", "--model.init_args.compile", "false",
        "--trainer.accelerator", "cpu", "--trainer.devices", "1", "--trainer.precision", "32-true",
        "--trainer.default_root_dir", str(tmp_path / "runs"), "--trainer.max_epochs", "1",
        "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false",
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    run = next((tmp_path / "runs").glob("*/version_0"))
    config = record.read(run / "config.yaml")  # with the launcher's settings beside it (launcher.yaml)
    assert config["data"]["init_args"]["batched"] is True and config["model"]["init_args"]["channels_last"] is True
    assert config["float32_matmul_precision"] == "high" and config["trainer"]["benchmark"] is True
    ckpt = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert ckpt["global_step"] == 2  # 32 training images / 16
    backbone = {k.removeprefix("net."): v for k, v in ckpt["state_dict"].items() if k.startswith("net.")}
    plain = build_backbone("cnn", num_classes=10, in_channels=3, image_size=32)
    plain.load_state_dict(backbone)  # plain keys, no torch.compile or channels_last residue
    assert plain(torch.zeros(2, 3, 32, 32)).shape == (2, 10)


def test_pin_memory_and_persistent_workers_follow_the_setup(tmp_path) -> None:
    root = write_fake_cifar10(tmp_path, n_train=20, n_test=4)
    auto = CIFAR10DataModule(str(root), batch_size=4, val_size=4, num_workers=2)
    assert auto.use_pin_memory() is False  # no trainer on a GPU attached: pinning would only cost
    assert auto.persistent_workers is True
    fixed = CIFAR10DataModule(str(root), batch_size=4, val_size=4, num_workers=0, pin_memory=True, persistent_workers=True)
    assert fixed.use_pin_memory() is True and fixed.persistent_workers is False  # no workers to keep
    batched = CIFAR10DataModule(str(root), batch_size=4, val_size=4, num_workers=4, batched=True)
    assert batched.num_workers == 0  # batches are slices of one in-memory tensor
