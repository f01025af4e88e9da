"""The Learner interface, and the pieces every learner shares.

A learner owns a model and its optimizer(s) and turns one batch into one update::

    metrics = learner.update(batch)      # floats keyed losses/..., charts/...

What a batch is depends on the algorithm: a time-major ``Rollout`` ``[T, B, ...]`` (A2C, PPO), a
dict of unrolls ``[T + 1, B, ...]`` (IMPALA), of n-step transitions ``[N, ...]`` (DQN, C51, DDPG)
or of sequences ``[L, B, ...]`` (R2D2). Every learner has the same small surface (``Learner``):

* ``model``: the ``nn.Module`` that samplers, actors or an inference server act with;
* ``device``, and ``to(device)``, which moves the networks and the optimizer state;
* ``update(batch) -> metrics``, one learner update;
* ``state_dict()`` / ``load_state_dict(state)``: everything ``update`` depends on;
* ``reduction``: how the update reduces over its batch (below);
* ``batch_axis``: the axis along which a batch splits between data-parallel learners (0: one row
  per sample, ``[N, ...]``; 1: time-major, ``[T, B, ...]``, split along B).

Learners trained from a prioritized replay (DQN, DDPG, R2D2) also keep ``priorities``: the new
priority of each sample of their last update, in batch order, for ``update_priorities``; a batch
may carry ``"weights"``, the importance-sampling weights of a prioritized sample.

**The reduction seam.** Every quantity an update takes over its batch (the mean of a loss, the
mean and standard deviation that normalise advantages, a metric) goes through
``learner.reduction``. A lone learner's ``Reduction`` computes them over its batch, exactly as the
formulas read. A data-parallel learner (``learners.data_parallel``) gives each of N processes a
shard of the batch and an ``AllReduce``, which sums the same quantities over the processes, and
the gradients before each optimizer step: N processes then make the update one learner makes on
the joined batch (Stooke & Abbeel 2018, Sec. 3.2), with nothing else changed.

``GradientStep`` is the one optimizer step every learner takes: backward (scaled under float16),
the reduction's gradient sum, global-norm clipping, and the optimizer's step under an optional
lock (an inference server reading the same parameters holds it). ``Precision`` is how a learner
computes its forward passes (bfloat16 / float16 autocast, channels-last convolutions).
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

import torch
from torch import nn

from workbench.kernels import explained_variance, normalize_advantages

__all__ = [
    "GradientStep",
    "Learner",
    "Precision",
    "Reduction",
    "check_precision",
    "compiled",
    "missing_members",
    "move_optimizer_state",
]

PrecisionName = Literal["bfloat16", "float16"]
AUTOCAST_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}


@runtime_checkable
class Learner(Protocol):
    """What every learner offers (module docstring); checked structurally, never inherited."""

    model: nn.Module
    device: torch.device
    reduction: "Reduction"
    batch_axis: int

    def update(self, batch: Any) -> dict[str, float]: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...

    def to(self, device: "str | torch.device") -> None: ...


def missing_members(obj: Any, protocol: type = Learner) -> list[str]:
    """The members of ``protocol`` (its annotated attributes and its methods) that ``obj`` lacks:
    what a run or a data-parallel learner names when it is handed something else."""
    declared = [
        *getattr(protocol, "__annotations__", {}),
        *(name for name, value in vars(protocol).items() if callable(value)),
    ]
    return [
        name
        for name in dict.fromkeys(declared)
        if not name.startswith("_") and not hasattr(obj, name)
    ]


# --------------------------------------------------------------------------------------------------
# The reduction seam


class Reduction:
    """Reductions over one learner's batch: the formulas as they read.

    A data-parallel learner replaces it with ``data_parallel.AllReduce``, which sums over every
    learner's shard; a learner calls these in the same order whatever its shard holds, so that the
    processes meet at each collective.
    """

    rank = 0
    world_size = 1

    def sum(self, values: torch.Tensor) -> torch.Tensor:
        """``values`` summed over the learners (here: one). Not differentiable; for statistics."""
        return values

    def count(self, n: int) -> int:
        """Samples in the joined batch, given the ``n`` this learner holds."""
        return n

    def mean(self, values: torch.Tensor) -> torch.Tensor:
        """The mean of ``values`` over the joined batch, differentiable: the learner's loss."""
        return values.mean()

    def normalize(self, advantages: torch.Tensor) -> torch.Tensor:
        """``(A - mean(A)) / (std(A) + 1e-8)`` over the joined batch (``normalize_advantages``)."""
        return normalize_advantages(advantages)

    def explained_variance(self, values: torch.Tensor, returns: torch.Tensor) -> float:
        """``1 - Var(R - V) / Var(R)`` over the joined batch (``kernels.explained_variance``)."""
        return explained_variance(values, returns)

    def local_samples(self, indices: torch.Tensor, horizon: int, num_envs: int) -> torch.Tensor:
        """Of ``indices`` into the joined ``[T * B]`` samples (``t * B + b``, flattened time-major),
        those in this learner's part, as indices into its own ``[T * num_envs]`` samples."""
        return indices

    def gradients(self, parameters: list[nn.Parameter]) -> None:
        """Sum the gradients over the learners before the optimizer steps (here: nothing to do)."""


# --------------------------------------------------------------------------------------------------
# Precision


@dataclass
class Precision:
    """How a learner computes its forward passes (the speed-ups of
    ``benchmarks/training_throughput.py``); shared by ``PPOConfig``, ``A2CConfig``, ``DQNConfig``,
    ``IMPALAConfig`` and ``R2D2Config``."""

    autocast: PrecisionName | None = None
    """Mixed precision for the update's forward passes: None (float32), ``"bfloat16"`` (CPU with
    bf16 support, or CUDA) or ``"float16"`` (CUDA only: gradients are scaled with a
    ``torch.amp.GradScaler``). Log-probabilities, entropies and values are cast to float32 before
    the losses; parameters and optimizer state stay float32. About 2x cheaper on a bf16 CPU."""
    channels_last: bool = False
    """Convert the model's 4-D (convolution) weights to channels-last memory format (NHWC), which
    oneDNN and cuDNN convolve faster; same values, other strides. No effect on MLPs. The model is
    converted in place when the learner is made (the sampler acting with it then uses NHWC too)."""
    compile: bool = False
    """``torch.compile`` the forward pass of the update (Inductor fuses the elementwise work
    around the convolutions; same values up to rounding). The first update pays the compiling
    (10-20 s on 2 cores). Measured for one minibatch step of the universe-starter-agent CNN at
    42x42: 1.57x on an AVX2-only CPU (float32), 1.16x on the AVX-512 bf16 EPYC; NatureCNN at
    84x84, conv-bound, 1.06x. Compiled in this process on one thread (no compile workers)."""

    def check_fields(self) -> None:
        name = type(self).__name__
        if self.autocast not in (None, *AUTOCAST_DTYPES):
            raise ValueError(
                f"{name}.autocast must be None (float32), 'bfloat16' (CPU or CUDA) or "
                f"'float16' (CUDA only), got {self.autocast!r}"
            )
        for flag in ("channels_last", "compile"):
            value = getattr(self, flag)
            if not isinstance(value, bool):
                raise ValueError(f"{name}.{flag} must be True or False, got {value!r}")

    def refuse_float16(self) -> None:
        """For learners without a gradient scaler (IMPALA): ValueError naming the fix when
        ``autocast='float16'``."""
        if self.autocast == "float16":
            raise ValueError(
                f"{type(self).__name__}: autocast='float16' is not supported (float16 needs "
                "gradient scaling); use autocast='bfloat16' or None."
            )

    def refuse_float16_and_compile(self) -> None:
        """For learners without a gradient scaler or a compiled update (R2D2):
        ValueError naming the fix when ``autocast='float16'`` or ``compile=True``."""
        if self.autocast == "float16" or self.compile:
            raise ValueError(
                f"{type(self).__name__}: autocast='float16' and compile=True are not supported "
                "(float16 needs gradient scaling); use autocast='bfloat16' or None, and "
                "compile=False."
            )

    def autocast_context(self, device: torch.device) -> contextlib.AbstractContextManager:
        """``torch.autocast`` for ``autocast`` on ``device`` (a no-op for None)."""
        if self.autocast is None:
            return contextlib.nullcontext()
        return torch.autocast(device.type, dtype=AUTOCAST_DTYPES[self.autocast])


def compiled(fn: Any) -> Any:
    """``torch.compile(fn)``, compiled in this process: Inductor's default pool of compile
    worker processes would outlive an interrupted kernel and compete with the env threads."""
    import torch._inductor.config as inductor

    inductor.compile_threads = 1
    return torch.compile(fn)


def check_precision(precision: PrecisionName | None, device: torch.device, who: str) -> None:
    """Raise ValueError, naming the fix, when ``precision`` cannot run on ``device``.

    Checked at every update, not when the learner is made: a learner may be made on the CPU and
    moved to its GPU afterwards (a run's learner devices, a data-parallel learner's CPU copy)."""
    if precision == "float16" and device.type != "cuda":
        raise ValueError(
            f"{who}: autocast='float16' needs a CUDA device (its gradients are scaled by a CUDA "
            f"GradScaler), but the learner is on {device}. On the CPU use autocast='bfloat16', or "
            "None for float32."
        )
    if precision == "bfloat16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise ValueError(
            f"{who}: autocast='bfloat16' is not supported by {torch.cuda.get_device_name(device)}; "
            "use autocast='float16' on this GPU, or None for float32."
        )
    if precision is not None and device.type not in ("cpu", "cuda"):
        raise ValueError(
            f"{who}: autocast={precision!r} is supported here on 'cpu' and 'cuda' learners, not "
            f"{device.type!r}; use autocast=None."
        )


# --------------------------------------------------------------------------------------------------
# One gradient step


class GradientStep:
    """Backward, the gradient sum over learners, global-norm clipping and the optimizer's step.

    Args:
        optimizer: the optimizer over ``parameters``.
        max_grad_norm: clip the global norm of the gradients to this (None: no clipping; the
            norm is still measured).
        lock: held around ``optimizer.step()`` (an inference server that acts with the same
            parameters holds it around its forward passes, so none sees half an update).
        float16: scale the loss with a ``torch.amp.GradScaler`` (float16 autocast, CUDA only); a
            step whose gradients overflowed is skipped and the scale lowered.

    ``step(loss, reduction)`` returns the global gradient norm *before* clipping, summed over the
    learners (the same on every data-parallel learner).
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        *,
        max_grad_norm: float | None,
        lock: Any = None,
        float16: bool = False,
    ) -> None:
        self.optimizer = optimizer
        self.max_grad_norm = max_grad_norm
        self.lock = lock
        self.float16 = float16
        self.scaler: torch.amp.GradScaler | None = None  # made at the first float16 step

    @property
    def parameters(self) -> list[nn.Parameter]:
        return [p for group in self.optimizer.param_groups for p in group["params"]]

    def step(self, loss: torch.Tensor, reduction: Reduction) -> float:
        self.optimizer.zero_grad(set_to_none=True)
        parameters = self.parameters
        scaler = None
        if self.float16:
            if self.scaler is None:
                self.scaler = torch.amp.GradScaler(parameters[0].device.type)
            scaler = self.scaler
            scaler.scale(loss).backward()
            reduction.gradients(parameters)
            scaler.unscale_(self.optimizer)
        else:
            loss.backward()
            reduction.gradients(parameters)
        max_norm = math.inf if self.max_grad_norm is None else self.max_grad_norm
        grad_norm = nn.utils.clip_grad_norm_(parameters, max_norm)
        with self.lock if self.lock is not None else contextlib.nullcontext():
            if scaler is None:
                self.optimizer.step()
            else:
                scaler.step(self.optimizer)
                scaler.update()
        return float(grad_norm)

    def state_dict(self) -> dict[str, Any]:
        """The optimizer's state and, under float16, the loss scale found so far."""
        state = {"optimizer": self.optimizer.state_dict()}
        if self.scaler is not None:
            state["grad_scaler"] = self.scaler.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        if state.get("grad_scaler") and self.float16:
            self.scaler = torch.amp.GradScaler(self.parameters[0].device.type)
            self.scaler.load_state_dict(state["grad_scaler"])

    def to(self, device: "str | torch.device") -> None:
        """Move the optimizer's state after its parameters moved (``move_optimizer_state``)."""
        move_optimizer_state(self.optimizer, device)


def move_optimizer_state(optimizer: torch.optim.Optimizer, device: "str | torch.device") -> None:
    """Move an optimizer's per-parameter state (Adam's moments, RMSProp's averages) to ``device``,
    after its parameters were moved there (``model.to(device)`` keeps the same Parameter objects,
    so the optimizer still refers to them; only its state stays behind).

    Follows torch's own rule (``Optimizer.load_state_dict``): a scalar ``step`` stays on the CPU
    unless its group is ``capturable`` or ``fused``.
    """
    device = torch.device(device)
    for group in optimizer.param_groups:
        step_on_cpu = not (group.get("capturable") or group.get("fused"))
        for param in group["params"]:
            state = optimizer.state.get(param)
            for key, value in (state or {}).items():
                if isinstance(value, torch.Tensor) and not (key == "step" and step_on_cpu):
                    state[key] = value.to(device)
