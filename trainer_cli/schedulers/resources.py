"""A job's resources derived from the trainer, and the mismatches Lightning would only find at run time
(every engine: a Slurm job's tasks, a Ray job's workers).

One task (process) per device: nodes = ``trainer.num_nodes``, tasks per node = ``trainer.devices``, GPUs per
node = ``trainer.devices`` on a GPU. Under ``srun`` Lightning's ``SLURMEnvironment`` takes ranks from
``SLURM_PROCID``/``SLURM_LOCALID`` and requires ``SLURM_NTASKS == devices x num_nodes`` (see
``lightning.fabric.plugins.environments.slurm``); a Ray job starts the same number of workers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainer_cli.errors import UserError
from trainer_cli.imports import import_class

GPU_ACCELERATORS = {"gpu", "cuda"}
CPU_ACCELERATORS = {"cpu"}
# strategies that run one process per task the scheduler starts (Slurm's srun, Ray's workers), not launched by Lightning
TASK_PER_DEVICE_STRATEGIES = ("ddp", "fsdp", "deepspeed")
LAUNCHING_STRATEGIES = ("spawn", "fork", "notebook")  # ddp_spawn & co start processes themselves


@dataclass(frozen=True)
class Resources:
    """What the job asks its scheduler for (Slurm: nodes, tasks and GPUs; Ray: workers)."""

    nodes: int
    """Nodes (trainer.num_nodes)."""
    ntasks_per_node: int
    """Tasks per node: one per device (trainer.devices)."""
    gpus_per_node: int
    """GPUs per node: devices on a GPU, else 0."""
    accelerator: str
    """The trainer's accelerator name (cpu or gpu)."""

    @property
    def world_size(self) -> int:
        """Processes in the DDP group: nodes x tasks per node."""
        return self.nodes * self.ntasks_per_node


def _name(value: Any) -> str:
    """A trainer value given as a string or as ``{class_path: ...}``, as one lower-case name."""
    if isinstance(value, str):
        return value.lower()
    class_path = value.get("class_path") if hasattr(value, "get") else None
    return str(class_path or type(value).__name__)


def _devices_count(devices: Any, num_nodes: int, problems: list[str]) -> int | None:
    if isinstance(devices, bool):
        devices = None
    if isinstance(devices, str) and devices.strip().lstrip("-").isdigit():
        devices = int(devices)
    if isinstance(devices, str) and "," in devices:  # "0,1" is a list of device indices
        devices = [d for d in devices.split(",") if d.strip()]
    if isinstance(devices, int) and devices >= 1:
        return devices
    if isinstance(devices, (list, tuple)):
        if num_nodes > 1:
            problems.append(
                f"--trainer.devices {list(devices)} (a list of device indices) with --trainer.num_nodes {num_nodes}: "
                f"each node's devices are its own; say how many per node, e.g. --trainer.devices {len(devices)}"
            )
            return None
        return len(devices)
    problems.append(
        f"--trainer.devices {devices!r} with --trainer.num_nodes {num_nodes}: a submitted job needs the number of "
        "devices (tasks) per node, e.g. --trainer.devices 8"
    )
    return None


def _check_strategy(strategy: Any, num_nodes: int, devices: int, problems: list[str]) -> None:
    world_size = num_nodes * devices
    if world_size <= 1:
        return
    name = _name(strategy)
    if name == "auto":
        return
    if "." in name:  # a class path: judge the class
        try:
            cls = import_class(name)
        except Exception:  # the fit parser already checked it imports; be lenient here
            return
        from lightning.pytorch.strategies import DDPStrategy, DeepSpeedStrategy, FSDPStrategy

        start = (strategy.get("init_args") or {}).get("start_method", "popen") if hasattr(strategy, "get") else "popen"
        if (
            isinstance(cls, type)
            and issubclass(cls, (DDPStrategy, FSDPStrategy, DeepSpeedStrategy))
            and start == "popen"
        ):
            return
    elif name.startswith(TASK_PER_DEVICE_STRATEGIES) and not any(word in name for word in LAUNCHING_STRATEGIES):
        return
    problems.append(
        f"--trainer.strategy {name} with {world_size} processes (--trainer.num_nodes {num_nodes} x --trainer.devices "
        f"{devices}): the scheduler starts one process per device (Slurm's srun, Ray's workers), which needs a "
        "DDP-family strategy: use --trainer.strategy ddp"
    )


def derive(trainer: Any, slurm: Any = None) -> Resources:
    """Resources of the job from the parsed ``trainer`` config, checked against ``slurm``.

    Args:
        trainer: the ``trainer`` section of the parsed fit config (a jsonargparse Namespace).
        slurm: a Slurm job's options (:class:`trainer_cli.schedulers.slurm.options.SlurmOptions`); their
            ``nodes``/``ntasks_per_node``/``gpus_per_node``, when set, must agree with the trainer. None
            for an engine whose options give no counts (Ray).

    Raises:
        UserError: naming both values, for every mismatch found (all reported at once): devices
            given as a list or ``auto`` where a count is needed, an ``auto`` accelerator, a strategy
            that is not DDP-family with several tasks, an explicit ``--slurm`` value contradicting
            the trainer.
    """
    problems: list[str] = []
    num_nodes = trainer.get("num_nodes")
    num_nodes = 1 if num_nodes is None else num_nodes
    if not isinstance(num_nodes, int) or isinstance(num_nodes, bool) or num_nodes < 1:
        problems.append(f"--trainer.num_nodes {num_nodes!r}: must be a whole number of nodes, 1 or more")
        num_nodes = 1
    devices = _devices_count(trainer.get("devices"), num_nodes, problems)
    accelerator = _name(trainer.get("accelerator") or "auto")
    if accelerator in GPU_ACCELERATORS:
        accelerator = "gpu"
    elif accelerator not in CPU_ACCELERATORS:
        if accelerator == "auto" and slurm is not None and slurm.gpus_per_node is not None:
            accelerator = "gpu" if slurm.gpus_per_node > 0 else "cpu"
        else:
            problems.append(
                f"--trainer.accelerator {accelerator}: a submitted job must know whether to ask for GPUs; "
                "use --trainer.accelerator gpu or cpu (a site profile under configs/slurm/ can set it)"
            )
    if devices is not None:
        _check_strategy(trainer.get("strategy") or "auto", num_nodes, devices, problems)
    gpus = devices if (accelerator == "gpu" and devices is not None) else 0
    for key, derived, source in (
        ("nodes", num_nodes, f"--trainer.num_nodes {num_nodes}"),
        ("ntasks_per_node", devices, f"--trainer.devices {devices}"),
        ("gpus_per_node", gpus, f"--trainer.devices {devices} on accelerator {accelerator}"),
    ):
        given = getattr(slurm, key, None)
        if given is not None and derived is not None and given != derived:
            problems.append(
                f"--slurm.{key} {given} contradicts {source}: drop --slurm.{key} (it is derived) or change the trainer"
            )
    if problems:
        raise UserError("the job cannot run as configured:\n  " + "\n  ".join(problems))
    assert devices is not None
    return Resources(nodes=num_nodes, ntasks_per_node=devices, gpus_per_node=gpus, accelerator=accelerator)
