"""Issue 4 under real DDP: 2 CPU processes (gloo) through the real ``train`` entry point, with
SAM, EMA and a step-wise schedule whose total steps come from the distributed trainer."""

from __future__ import annotations

import math
from pathlib import Path

import torch
from practice_support import cfg, metrics, per_step, short_run
from support import run_train


def test_sam_ema_and_warmup_cosine_under_cpu_ddp(tmp_path: Path) -> None:
    # digits: 1,257 training images / 64 per batch = 20 batches, 10 per process; limited to 3 -> T = 3 x 2 epochs
    proc = run_train(
        "fit", *short_run(tmp_path, epochs=2, train_batches=3, val_batches=1),
        "--config", cfg("strategy/ddp_cpu_sim.yaml"), "--config", cfg("optimizer/sam.yaml"),
        "--config", cfg("averaging/ema.yaml"), "--config", cfg("scheduler/warmup_cosine.yaml"),
        "--lr_scheduler.warmup_steps", "2", "--optimizer.lr", "0.05", timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "world size             2 = 2 devices x 1 nodes" in proc.stdout
    run_dir = next((tmp_path / "digits").iterdir())
    total, lr = 6, 0.05
    logged = per_step(metrics(run_dir)["lr-SAM"])
    expected = [lr * ((s + 1) / 2 if s < 2 else 0.5 * (1 + math.cos(math.pi * (s - 2) / (total - 2)))) for s in range(total)]
    assert all(math.isclose(logged[s], expected[s], rel_tol=1e-5, abs_tol=1e-12) for s in range(total)), logged
    last = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=False)
    assert last["optimizer_states"][0]["state"]  # SGD momentum of the base optimizer inside SAM
    assert any(not torch.equal(last["state_dict"][k], v) for k, v in last["current_model_state"].items())  # EMA
    final = torch.load(run_dir / "checkpoints" / "final.ckpt", weights_only=False)
    assert final["global_step"] == total
    # after fit the model holds the EMA weights: the raw state saved next to them is the same
    assert all(torch.equal(final["current_model_state"][k], v) for k, v in final["state_dict"].items())
