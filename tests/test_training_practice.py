"""Issue 4: the seeds' training practice as config files, each shown to do what it claims.

Runs are real (digits, CPU, a few batches) and in this process through the real TrainerCLI;
metrics are read back from CSVLogger's metrics.csv and checkpoints are reloaded.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

import forkserver
import pytest
import torch
from practice_support import (
    BatchProbe,
    ClippedGradProbe,
    EpochSnapshots,
    cfg,
    fit,
    metrics,
    per_step,
    short_run,
)
from support import CONFIGS, DIGITS, REPO

from trainer_cli.__main__ import main
from trainer_cli.callbacks.non_finite import NonFiniteLoss
from trainer_cli.config.compose import compose_file
from trainer_cli.config.request import Request
from trainer_cli.optim import SAM
from trainer_cli.optim.schedulers import FlatCosineLR, LinearWarmupCosineLR
from trainer_cli.runtime.verbs import parse_config

NEW_GROUPS = ("averaging", "callbacks", "debug", "finetune", "gradients", "logger", "optimizer", "param_groups",
              "precision", "regularization", "scheduler", "stability", "strategy")


# -- every config file composes and parses ---------------------------------------------------------
@pytest.mark.parametrize("group", NEW_GROUPS)
def test_every_group_file_has_header_and_layers_onto_digits(group: str) -> None:
    layers = []
    for path in sorted((CONFIGS / group).glob("*.yaml")):
        lines = path.read_text().splitlines()
        assert lines[0] == "# @package _global_", path
        assert re.match(r"# \S", lines[1]), f"{path}: second line must be a one-line description"
        layers += ["--config", str(path)]
    # each file is loaded and type-checked as a layer (a bad key or value fails naming it)
    _, config = parse_config("fit", Request.of(["--config", DIGITS, *layers]))
    assert config.trainer is not None


def test_additive_files_compose_next_to_the_default_callbacks(tmp_path: Path) -> None:
    experiment = tmp_path / "exp.yaml"
    experiment.write_text(
        "defaults:\n  - /model: cnn\n  - /data: digits\n  - /optimizer: sam\n  - /scheduler: flat_cos\n"
        "  - /callbacks: [default, early_stopping]\n  - /param_groups: no_decay_bias_norm\n"
        "  - /regularization: mixup\n  - /precision: bf16-mixed\n  - _self_\n"
    )
    composed = compose_file(experiment)
    names = [c["class_path"].rsplit(".", 1)[1] for c in composed["trainer"]["callbacks"]]
    assert names == ["ModelCheckpoint", "LastCheckpoint", "LearningRateMonitor", "ModelSummary", "EarlyStopping"]
    _, config = parse_config("fit", Request.of(["--config", str(experiment), "--config", cfg("averaging/ema.yaml")]))
    names = [c.class_path.rsplit(".", 1)[1] for c in config.trainer.callbacks]
    assert names[-3:] == ["EarlyStopping", "WarmupEMA", "FinalCheckpoint"]
    assert config.optimizer.class_path == "trainer_cli.optim.SAM" and config.param_groups.no_decay_bias_norm


# -- schedules --------------------------------------------------------------------------------------
def onecycle_reference(total: int, max_lr: float) -> list[float]:
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=max_lr)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=max_lr, total_steps=total)
    lrs = []
    for _ in range(total):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return lrs


@pytest.mark.parametrize("schedule", ["warmup_cosine", "flat_cos", "onecycle"])
def test_step_wise_schedule_follows_its_formula_under_accumulation(tmp_path: Path, schedule: str) -> None:
    # 5 batches per epoch (limit_train_batches), accumulate 2 -> 3 optimizer steps per epoch, 2 epochs: T = 6
    lr = 0.01
    cli = fit(*short_run(tmp_path, epochs=2, train_batches=5), "--config", cfg(f"scheduler/{schedule}.yaml"),
              "--config", cfg("model/mlp.yaml"), "--trainer.accumulate_grad_batches", "2", "--optimizer.lr", str(lr),
              *(["--lr_scheduler.warmup_steps", "2"] if schedule == "warmup_cosine" else []),
              *(["--lr_scheduler.max_lr", str(lr)] if schedule == "onecycle" else []))
    total = 6
    assert cli.trainer.global_step == total
    logged = per_step(metrics(cli.run_dir)["lr-AdamW"])
    assert sorted(logged) == list(range(total))
    if schedule == "warmup_cosine":
        expected = [lr * ((s + 1) / 2 if s < 2 else 0.5 * (1 + math.cos(math.pi * (s - 2) / 4))) for s in range(total)]
        assert isinstance(cli.trainer.lr_scheduler_configs[0].scheduler, LinearWarmupCosineLR)
    elif schedule == "flat_cos":
        flat = round(0.72 * total)  # pct_start 0.72 -> 4 flat steps
        expected = [lr * (1.0 if s < flat else 0.5 * (1 + math.cos(math.pi * (s - flat) / (total - flat)))) for s in range(total)]
        assert isinstance(cli.trainer.lr_scheduler_configs[0].scheduler, FlatCosineLR)
    else:
        expected = onecycle_reference(total, lr)
    assert [logged[s] for s in range(total)] == pytest.approx(expected, rel=1e-5, abs=1e-12)


def test_plateau_and_plain_torch_scheduler_by_name(tmp_path: Path) -> None:
    # an abs threshold of 100 makes every epoch after the first "no improvement": x0.1 after patience 0
    cli = fit(*short_run(tmp_path / "p", epochs=3, train_batches=2, val_batches=1), "--config", cfg("scheduler/plateau.yaml"),
              "--config", cfg("model/mlp.yaml"), "--lr_scheduler.patience", "0", "--lr_scheduler.threshold", "100",
              "--lr_scheduler.threshold_mode", "abs")
    lrs = per_step(metrics(cli.run_dir)["lr-AdamW"])
    by_epoch = [lrs[0], lrs[2], lrs[4]]  # 2 steps per epoch
    assert by_epoch == pytest.approx([0.01, 0.01, 0.001])
    cli = fit(*short_run(tmp_path / "s", epochs=3, train_batches=2, val_batches=1), "--config", cfg("model/mlp.yaml"),
              "--lr_scheduler", "StepLR", "--lr_scheduler.step_size", "1", "--lr_scheduler.gamma", "0.5")
    lrs = per_step(metrics(cli.run_dir)["lr-AdamW"])
    assert [lrs[0], lrs[2], lrs[4]] == pytest.approx([0.01, 0.005, 0.0025])


# -- parameter groups ---------------------------------------------------------------------------------
def test_param_groups_no_decay_and_discriminative_lr_scaled_by_the_schedule(tmp_path: Path) -> None:
    cli = fit(*short_run(tmp_path, epochs=1, train_batches=4), "--config", cfg("param_groups/no_decay_bias_norm.yaml"),
              "--config", cfg("param_groups/discriminative_lr.yaml"))
    groups = cli.trainer.optimizers[0].param_groups
    names = {id(p): n for n, p in cli.model.named_parameters()}
    assert len(groups) == 4  # (backbone, head) x (decay, no decay)
    for group in groups:
        group_names = [names[id(p)] for p in group["params"]]
        backbone = all(n.startswith("net.features.") for n in group_names)
        assert backbone or all(n.startswith("net.head.") for n in group_names)
        assert group["lr_mult"] == (0.1 if backbone else 1.0)
        no_decay = all(p.ndim < 2 for p in group["params"])
        assert group["weight_decay"] == (0.0 if no_decay else 0.01)
        assert no_decay or all(p.ndim >= 2 for p in group["params"])
    series = metrics(cli.run_dir)
    backbone_lr, head_lr = per_step(series["lr-AdamW/pg1"]), per_step(series["lr-AdamW/pg3"])
    assert len(set(head_lr.values())) > 1  # OneCycleLR moves the rate ...
    for step in head_lr:  # ... and keeps the backbone at 0.1 x the head at every step
        assert backbone_lr[step] == pytest.approx(0.1 * head_lr[step], rel=1e-6)


def test_lr_multiplier_matching_nothing_is_a_user_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["fit", *short_run(tmp_path, epochs=1), "--param_groups.lr_multipliers", '{"^nope\\\\.": 0.1}'])
    assert code == 2
    assert "match no trainable parameter" in capsys.readouterr().err


# -- SAM ----------------------------------------------------------------------------------------------
def test_sam_step_evaluates_twice_at_distance_rho_and_steps_with_the_perturbed_gradient() -> None:
    target = torch.tensor([3.0, -4.0])
    w = torch.zeros(2, requires_grad=True)
    opt = SAM([w], base_optimizer="SGD", rho=0.5, lr=0.1)
    visited = []

    def closure() -> torch.Tensor:  # loss 0.5 ||w - target||^2, gradient w - target
        opt.zero_grad()
        visited.append(w.detach().clone())
        loss = 0.5 * (w - target).pow(2).sum()
        loss.backward()
        return loss

    opt.step(closure)
    assert len(visited) == 2 and opt.closure_calls == 2
    g = -target
    perturbed = g * 0.5 / g.norm()
    assert torch.allclose(visited[1] - visited[0], perturbed)
    assert (visited[1] - visited[0]).norm().item() == pytest.approx(0.5)
    assert opt.last_perturbation_norm == pytest.approx(0.5)  # kept on the device, read back on demand
    assert torch.allclose(w.detach(), -0.1 * (perturbed - target))  # SGD step with the gradient at w + e(w)


def test_sam_in_training_with_clipping_and_bf16(tmp_path: Path) -> None:
    cli = fit(*short_run(tmp_path, epochs=1, train_batches=3), "--config", cfg("optimizer/sam.yaml"),
              "--config", cfg("gradients/clip_norm.yaml"), "--config", cfg("precision/bf16-mixed.yaml"),
              "--optimizer.rho", "0.1", "--lr_scheduler.max_lr", "0.05")
    opt = cli.trainer.optimizers[0]
    assert isinstance(opt, SAM)
    assert opt.steps == cli.trainer.global_step == 3
    assert opt.closure_calls == 2 * opt.steps  # two forward-backward passes per step
    assert opt.last_perturbation_norm == pytest.approx(0.1, rel=1e-3)  # ||e(w)|| = rho
    ckpt = torch.load(cli.run_dir / "checkpoints" / "last.ckpt", weights_only=False)
    assert ckpt["optimizer_states"][0]["state"]  # the base optimizer's momentum is checkpointed


def test_sam_with_gradient_accumulation_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fit", *short_run(tmp_path, epochs=1), "--config", cfg("optimizer/sam.yaml"),
                 "--trainer.accumulate_grad_batches", "2"]) == 2
    assert "accumulate_grad_batches 1" in capsys.readouterr().err


# -- gradients ------------------------------------------------------------------------------------------
def test_clipping_norm_logging_and_accumulation_schedule(tmp_path: Path) -> None:
    cli = fit(*short_run(tmp_path, epochs=3, train_batches=4), "--config", cfg("gradients/clip_norm.yaml"),
              "--config", cfg("gradients/log_norm.yaml"), "--config", cfg("gradients/accumulate_schedule.yaml"),
              "--trainer.gradient_clip_val", "0.05", "--config", cfg("model/mlp.yaml"))
    # accumulation 1 for epochs 0-1 (4 steps each), 4 from epoch 2 (1 step)
    assert cli.trainer.global_step == 4 + 4 + 1
    logged = [v for _, v in metrics(cli.run_dir)["grad/norm_total"]]
    assert len(logged) == 9 and max(logged) > 0.05  # the raw norms, logged before clipping
    probe_run = fit(*short_run(tmp_path / "c", epochs=1, train_batches=4), "--config", cfg("gradients/clip_norm.yaml"),
                    "--trainer.gradient_clip_val", "0.05", "--config", cfg("model/mlp.yaml"),
                    "--trainer.callbacks+=practice_support.ClippedGradProbe")
    probe = next(c for c in probe_run.trainer.callbacks if isinstance(c, ClippedGradProbe))
    assert probe.norms and max(probe.norms) <= 0.05 * (1 + 1e-4)


# -- MixUp / CutMix ---------------------------------------------------------------------------------------
def test_mixup_cutmix_soft_training_targets_and_unchanged_validation(tmp_path: Path) -> None:
    cli = fit(*short_run(tmp_path, epochs=1, train_batches=3), "--config", cfg("regularization/mixup_cutmix.yaml"),
              "--trainer.callbacks+=practice_support.BatchProbe")
    probe = next(c for c in cli.trainer.callbacks if isinstance(c, BatchProbe))
    for y in probe.train_targets:
        assert y.dtype.is_floating_point and y.shape[1] == 10
        assert torch.allclose(y.sum(1), torch.ones(len(y)))
        assert (y.max(1).values < 1).any()  # mixed: not one-hot
    assert all(y.dtype == torch.int64 and y.ndim == 1 for y in probe.val_targets)
    last = str(cli.run_dir / "checkpoints" / "last.ckpt")
    plain = fit(*short_run(tmp_path / "v1"), "--ckpt_path", last, verb="validate").trainer.callback_metrics
    mixed = fit(*short_run(tmp_path / "v2"), "--config", cfg("regularization/mixup_cutmix.yaml"), "--ckpt_path", last,
                verb="validate").trainer.callback_metrics
    assert plain["val/acc"] == mixed["val/acc"] and plain["val/loss"] == mixed["val/loss"]


# -- weight averaging ----------------------------------------------------------------------------------------
def validate_state(cli, state: dict[str, torch.Tensor]) -> float:  # noqa: ANN001
    import lightning.pytorch as pl

    cli.model.load_state_dict(state)
    trainer = pl.Trainer(accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, limit_val_batches=2)
    return trainer.validate(cli.model, datamodule=cli.datamodule, verbose=False)[0]["val/acc"]


def test_ema_validation_checkpoints_and_final_model_carry_the_average(tmp_path: Path) -> None:
    cli = fit(*short_run(tmp_path, epochs=2, train_batches=5), "--config", cfg("averaging/ema.yaml"),
              "--config", cfg("model/mlp.yaml"))
    final_model = {k: v.clone() for k, v in cli.model.state_dict().items()}
    logged_val_acc = float(cli.trainer.callback_metrics["val/acc"])
    last = torch.load(cli.run_dir / "checkpoints" / "last.ckpt", weights_only=False)
    final = torch.load(cli.run_dir / "checkpoints" / "final.ckpt", weights_only=False)
    for key, value in final_model.items():
        assert torch.equal(last["state_dict"][key], value) and torch.equal(final["state_dict"][key], value)
    assert any(not torch.equal(last["current_model_state"][k], v) for k, v in final_model.items())
    assert validate_state(cli, last["state_dict"]) == pytest.approx(logged_val_acc)  # validation saw the EMA
    assert validate_state(cli, last["current_model_state"]) != pytest.approx(logged_val_acc)


def test_swa_checkpoints_carry_raw_weights_and_final_ckpt_the_average(tmp_path: Path) -> None:
    # mlp (no BatchNorm): 3 epochs, averaging from epoch 2 (0.8 x 3 -> 2, 1-based)
    cli = fit(*short_run(tmp_path, epochs=3, train_batches=4), "--config", cfg("averaging/swa.yaml"),
              "--config", cfg("model/mlp.yaml"))
    logged_val_acc = float(cli.trainer.callback_metrics["val/acc"])
    last = torch.load(cli.run_dir / "checkpoints" / "last.ckpt", weights_only=False)
    final = torch.load(cli.run_dir / "checkpoints" / "final.ckpt", weights_only=False)
    swa_state = next(v for k, v in last["callbacks"].items() if "StochasticWeightAveraging" in k)["average_model_state"]
    params = [n for n, _ in cli.model.named_parameters()]
    for name in params:
        assert torch.equal(final["state_dict"][name], cli.model.state_dict()[name])  # final.ckpt = final model
        assert torch.equal(final["state_dict"][name], swa_state[name])  # = the average
    assert any(not torch.equal(last["state_dict"][n], final["state_dict"][n]) for n in params)  # last.ckpt: raw
    assert validate_state(cli, last["state_dict"]) == pytest.approx(logged_val_acc)  # validation saw raw weights


# -- stability and fine-tuning ---------------------------------------------------------------------------
def test_non_finite_loss_skip_keeps_weights_and_counts(tmp_path: Path) -> None:
    cli = fit(*short_run(tmp_path, epochs=1, train_batches=4), "--config", cfg("stability/nonfinite_skip.yaml"),
              "--model", "practice_support.NaNAtStep", "--model.nan_steps", "[1]")
    assert cli.trainer.global_step == 4
    assert all(torch.isfinite(p).all() for p in cli.model.parameters())
    skipped = metrics(cli.run_dir)["train/skipped_steps"]
    assert skipped[0] == (1, 1.0) and skipped[-1][1] == 1.0  # step 1 skipped, the only one
    assert next(c for c in cli.trainer.callbacks if isinstance(c, NonFiniteLoss)).skipped == 1


def test_non_finite_loss_stop_saves_checkpoint_and_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["fit", *short_run(tmp_path, epochs=1, train_batches=4), "--config", cfg("stability/nonfinite_stop.yaml"),
                 "--model", "practice_support.NaNAtStep", "--model.nan_steps", "[2]"])
    err = capsys.readouterr().err
    assert code == 2 and "error: training stopped: non-finite loss/gradient at step 2" in err
    ckpt_path = Path(re.search(r"weights are in (\S+?\.ckpt)", err).group(1))
    ckpt = torch.load(ckpt_path, weights_only=False)
    assert ckpt["global_step"] == 2 and all(torch.isfinite(v).all() for v in ckpt["state_dict"].values())


def test_backbone_finetuning_freezes_then_unfreezes_at_lower_lr(tmp_path: Path) -> None:
    cli = fit(*short_run(tmp_path, epochs=3, train_batches=3), "--config", cfg("finetune/backbone.yaml"),
              "--lr_scheduler", "null",  # the file unfreezes at epoch 2
              "--trainer.callbacks+=practice_support.EpochSnapshots")
    states = next(c for c in cli.trainer.callbacks if isinstance(c, EpochSnapshots)).states
    convs = [k for k, v in states[0].items() if k.startswith("net.features") and v.ndim == 4]
    head = "net.head.3.weight"
    assert all(torch.equal(states[0][k], states[1][k]) for k in convs)  # frozen in epochs 0-1
    assert not torch.equal(states[0][head], states[1][head])  # while the head trains
    assert all(not torch.equal(states[1][k], states[2][k]) for k in convs)  # unfrozen at epoch 2
    groups = cli.trainer.optimizers[0].param_groups
    assert len(groups) == 2 and groups[1]["lr"] == pytest.approx(0.1 * groups[0]["lr"])


# -- optional extras -----------------------------------------------------------------------------------------
@pytest.mark.parametrize(("flag", "extra"), [(cfg("strategy/deepspeed.yaml"), "deepspeed"), (cfg("logger/wandb.yaml"), "wandb"),
                                             (cfg("logger/mlflow.yaml"), "mlflow")])
def test_missing_optional_extra_is_one_clear_error(tmp_path: Path, flag: str, extra: str) -> None:
    # `train fit` in a process of its own where the package cannot be imported: sys.modules[name] = None is
    # Python's own "no such module" (find_spec gives None, import raises), also where it is installed or
    # imported already (the process is forked from the suite's fork server where it can be)
    blocked = tmp_path / "blocked.py"
    blocked.write_text(f"import sys\nsys.modules[{extra!r}] = None\nfrom trainer_cli.__main__ import main\nsys.exit(main(sys.argv[1:]))\n")
    done = forkserver.run_python([str(blocked), "fit", *short_run(tmp_path, epochs=1), "--config", flag], cwd=REPO,
                                 env=dict(os.environ), timeout=300)
    assert done.returncode == 2, done.stderr[-2000:]
    assert f"pip install 'trainer-cli[{extra}]'" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "digits").exists() or not any((tmp_path / "digits").iterdir())


# -- callbacks and debug presets ---------------------------------------------------------------------------
def test_monitoring_callbacks_profiler_and_early_stopping(tmp_path: Path) -> None:
    cli = fit(*short_run(tmp_path, epochs=4, train_batches=6, val_batches=1), "--config", cfg("callbacks/throughput.yaml"),
              "--config", cfg("callbacks/device_stats.yaml"), "--config", cfg("debug/profiler_simple.yaml"),
              "--config", cfg("callbacks/early_stopping.yaml"),
              # the last listed callback is EarlyStopping: no epoch after the first can improve by 100
              "--trainer.callbacks.patience", "0", "--trainer.callbacks.min_delta", "100")
    assert cli.trainer.current_epoch == 2 and cli.trainer.global_step == 12  # stopped after 2 of 4 epochs
    columns = set(metrics(cli.run_dir))
    assert "train/device/samples_per_sec" in columns  # ThroughputMonitor
    assert any(c.startswith("DeviceStatsMonitor.") and c.endswith("cpu_percent") for c in columns)
    assert "run_training_epoch" in (cli.run_dir / "fit-profile.txt").read_text()  # SimpleProfiler in the run dir
