"""Sharpness-Aware Minimization as a wrapper around any base optimizer.

Foret, Kleiner, Mobahi, Neyshabur, "Sharpness-Aware Minimization for Efficiently Improving
Generalization", ICLR 2021, arXiv 2010.01412; adaptive variant: Kwon et al. 2021 (ASAM),
arXiv 2102.11600. Follows the reference PyTorch implementation davda54/sam (``sam.py``).

With Lightning's automatic optimization, ``step(closure)`` runs the closure (forward,
backward, gradient clipping) at ``w``, moves to ``w + e(w)`` with
``e(w) = rho * g / ||g||_2`` (adaptive: ``rho * |w|^2 * g / ||(|w| * g)||_2``), zeroes the
gradients, runs the closure again at the perturbed point, goes back to ``w`` and lets the base
optimizer step with the gradient taken at ``w + e(w)``. Under DDP both backward passes
all-reduce, so every process uses the same perturbation.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch.optim import Optimizer

from trainer_cli.errors import UserError, did_you_mean
from trainer_cli.imports import import_class

EPS = 1e-12


def global_norm(norms: list[torch.Tensor]) -> torch.Tensor:
    """The 2-norm of per-tensor 2-norms, as one reduction on the first one's device (no host sync)."""
    if not norms:
        return torch.tensor(0.0)
    device = norms[0].device
    return torch.linalg.vector_norm(torch.stack([n.to(device) for n in norms]))


def _grad(p: torch.Tensor) -> torch.Tensor:
    """``p.grad`` of a parameter that has one (:meth:`SAM._params_with_grad`)."""
    assert p.grad is not None
    return p.grad


def resolve_optimizer_class(name: str) -> type[Optimizer]:
    """``torch.optim`` short names (``SGD``, ``AdamW``) or a dotted class path.

    Raises:
        UserError: when ``name`` names no optimizer class.
    """
    try:
        cls = import_class(name) if "." in name else getattr(torch.optim, name)
    except (ImportError, AttributeError):
        cls = None
    if not (isinstance(cls, type) and issubclass(cls, Optimizer)) or cls is SAM:
        known = [n for n, c in vars(torch.optim).items() if isinstance(c, type) and issubclass(c, Optimizer)]
        raise UserError(
            f"SAM base_optimizer {name!r} is not an optimizer class.{did_you_mean(name, known)} "
            "Use a torch.optim name (SGD, AdamW) or a class path."
        )
    return cls


class SAM(Optimizer):
    """Sharpness-Aware Minimization (SAM) around a base optimizer: two forward-backward passes
    per step.

    Config: ``optimizer: {class_path: trainer_cli.optim.SAM, init_args: {base_optimizer: SGD,
    rho: 0.05, lr: 0.1, base_kwargs: {momentum: 0.9}}}``. Works with gradient clipping (applied
    to both passes), ``bf16-mixed`` and DDP; not with ``16-mixed`` (its GradScaler steps without
    a closure) nor with ``accumulate_grad_batches > 1`` (the second pass would see only the
    last micro-batch). The per-step metrics that ``training_step`` logs are those of the
    second (perturbed) pass.

    Args:
        params: Parameters or parameter groups (groups may set their own ``lr``, ``weight_decay``).
        base_optimizer: The optimizer that takes the step: a ``torch.optim`` name or a class path.
        rho: Radius of the perturbation ``||e(w)||_2`` (Foret et al. use 0.05; ASAM 0.5-2.0).
        adaptive: Adaptive SAM (ASAM): the perturbation is scaled by ``|w|`` element-wise.
        lr: Learning rate of the base optimizer.
        weight_decay: Weight decay of the base optimizer.
        base_kwargs: Any other keyword arguments of the base optimizer (``momentum``, ``betas``...).

    Attributes:
        steps: Optimizer steps taken.
        closure_calls: Forward-backward passes run through ``step`` (2 per step).
        last_perturbation_norm: ``||e(w)||_2`` of the last step (equals ``rho`` unless adaptive);
            kept on the device during training, so only reading it waits for the device.

    Raises:
        ValueError: for a negative ``rho``.
        UserError: for an unknown ``base_optimizer``.
    """

    def __init__(
        self,
        params: Iterable[Any],
        base_optimizer: str = "SGD",
        rho: float = 0.05,
        adaptive: bool = False,
        lr: float = 0.1,
        weight_decay: float = 0.0,
        base_kwargs: dict[str, Any] | None = None,
    ) -> None:
        if rho < 0.0:
            raise ValueError(f"SAM rho must be >= 0, got {rho}")
        base_cls = resolve_optimizer_class(base_optimizer)
        self.rho = rho
        self.adaptive = adaptive
        kwargs = {"lr": lr, "weight_decay": weight_decay, **(base_kwargs or {})}
        super().__init__(params, dict(kwargs))
        self.base_optimizer = base_cls(self.param_groups, **kwargs)
        # one set of groups and state: schedulers, LR monitors and checkpoints see the base optimizer's
        self.param_groups = self.base_optimizer.param_groups
        self.state = self.base_optimizer.state
        self.defaults.update(self.base_optimizer.defaults)
        self._origin: dict[torch.Tensor, torch.Tensor] = {}
        self.steps = 0
        self.closure_calls = 0
        self._perturbation_norm = torch.tensor(float("nan"))

    def _params_with_grad(self) -> list[torch.Tensor]:
        return [p for group in self.param_groups for p in group["params"] if p.grad is not None]

    @property
    def last_perturbation_norm(self) -> float:
        """``||e(w)||_2`` of the last step, as a Python float (NaN before the first step)."""
        return float(self._perturbation_norm)

    @torch.no_grad()
    def _grad_norm(self, params: list[torch.Tensor]) -> torch.Tensor:
        return global_norm([torch.linalg.vector_norm((p.abs() if self.adaptive else 1.0) * _grad(p)) for p in params])

    @torch.no_grad()
    def first_step(self) -> None:
        """Move every parameter to ``w + e(w)`` and remember ``w``."""
        params = self._params_with_grad()
        scale = self.rho / (self._grad_norm(params) + EPS)
        norms = []
        for p in params:
            self._origin[p] = p.detach().clone()
            e_w = (p.pow(2) if self.adaptive else 1.0) * _grad(p) * scale.to(p)
            p.add_(e_w)
            norms.append(torch.linalg.vector_norm(e_w, dtype=torch.float32))
        self._perturbation_norm = global_norm(norms)

    @torch.no_grad()
    def second_step(self) -> None:
        """Go back to ``w`` and let the base optimizer step with the perturbed gradient."""
        for p, origin in self._origin.items():
            p.copy_(origin)
        self._origin.clear()
        self.base_optimizer.step()
        self.steps += 1

    def step(self, closure: Callable[[], Any] | None = None) -> Any:  # type: ignore[override]
        """One SAM step; ``closure`` recomputes the loss and gradients (Lightning passes it).

        Returns:
            The closure's loss at the unperturbed point ``w``.

        Raises:
            UserError: when called without a closure (e.g. under ``16-mixed`` precision).
        """
        if closure is None:
            raise UserError(
                "SAM needs the step closure to run a second forward-backward pass, but the optimizer was "
                "stepped without one (precision 16-mixed does that): use --trainer.precision bf16-mixed or 32-true"
            )
        closure = torch.enable_grad()(closure)
        loss = closure()
        self.closure_calls += 1
        self.first_step()
        self.zero_grad(set_to_none=True)
        closure()
        self.closure_calls += 1
        self.second_step()
        return loss

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load the base optimizer's state (what :meth:`state_dict` saved) and keep sharing it."""
        self.base_optimizer.load_state_dict(state_dict)
        self.param_groups = self.base_optimizer.param_groups
        self.state = self.base_optimizer.state
