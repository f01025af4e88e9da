"""What A2C and PPO share: an ``ActorCritic``, GAE over a rollout, the learning-rate rule,
precision.

Both read a time-major ``Rollout`` ``[T, B, ...]`` (``workbench.rollout``): the behaviour ``logp``
and ``value`` the sampler stored in ``rollout.policy_outputs`` (what ``ActorCritic.act`` returns),
and bootstrap from ``V(rollout.next_obs)`` under the current model. Advantages come from
``kernels.gae_from_rollout``, which cuts returns at every episode end and bootstraps truncated
episodes from ``rollout.truncation_values``. Everything stays ``[T, B]`` until PPO flattens to
``[T * B]`` to draw minibatches.

The learning rate applied at an update is, in this order (``learning_rate_for``): ``base``
(``config.learning_rate``, or what ``set_learning_rate`` set), scaled with the batch size ``T * B``
when ``config.scale_learning_rate`` is set (``kernels.scaled_learning_rate``, Stooke & Abbeel 2018),
then multiplied by ``1 - progress`` when ``config.anneal_lr`` is on (``set_progress``).

Two options make an update cheaper without changing what it computes beyond rounding
(``base.Precision``): ``autocast`` runs the model's forward passes in bfloat16 (CPU or CUDA) or
float16 (CUDA, with a ``GradScaler``) under ``torch.autocast``, while parameters, Adam's state,
log-probabilities, entropies, values and every loss stay float32; ``channels_last`` keeps the
convolution weights in NHWC memory order, which oneDNN and cuDNN convolve faster. Under autocast,
uint8 frames are also scaled to [0, 1] once per update in 16 bits rather than in every minibatch
(``forward_obs``). Measured on a 2-core avx512_bf16 CPU, idle, 2 torch threads: a PPO minibatch
step of NatureCNN at 256 samples costs 0.12-0.14 s in float32, 0.06 s under bfloat16, 0.09 s with
channels_last alone; a whole Pong update (1024 samples, 4 epochs x 4 minibatches) 2.4 s in
float32, 1.0 s under bfloat16 (1.6 s with 1 thread). Which wins depends on the CPU: on an Intel
Xeon with avx512_bf16 bfloat16 bought almost nothing and channels_last 1.6x. Caveat: when other
processes hold the cores, a bfloat16 update with 2 threads can take 10x longer than with 1.
Neither option changes what the sampler acts with: its forward passes stay float32. A third,
``compile``, runs the update's forward pass through ``torch.compile`` (the first update compiles).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from workbench.kernels import gae_from_rollout, scaled_learning_rate
from workbench.learners.base import (
    AUTOCAST_DTYPES,
    GradientStep,
    Reduction,
    check_precision,
    compiled,
    move_optimizer_state,
)
from workbench.models import ActorCritic, NatureCNN
from workbench.rollout import Rollout

__all__ = ["PolicyGradientLearner", "check_policy_gradient_config"]


def check_policy_gradient_config(config: Any) -> None:
    """Raise ValueError, naming the field, for values a PPO or A2C config cannot take."""
    name = type(config).__name__
    for field_name in ("gamma", "gae_lambda"):
        value = getattr(config, field_name)
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"{name}.{field_name} must be in [0, 1], got {value}")
    if not config.learning_rate > 0:
        raise ValueError(f"{name}.learning_rate must be positive")
    if config.max_grad_norm is not None and not config.max_grad_norm > 0:
        raise ValueError(f"{name}.max_grad_norm must be positive or None")
    if config.scale_learning_rate not in (None, "linear", "sqrt"):
        raise ValueError(
            f"{name}.scale_learning_rate must be None, 'linear' or 'sqrt', "
            f"got {config.scale_learning_rate!r}"
        )
    if config.scale_learning_rate is not None and config.reference_batch_size is None:
        raise ValueError(
            f"{name}.scale_learning_rate={config.scale_learning_rate!r} needs "
            "reference_batch_size: the T * B at which learning_rate was tuned"
        )
    config.check_fields()


class PolicyGradientLearner:
    """The shared half of ``A2C`` and ``PPO``: model and optimizer, learning-rate rule, GAE over a
    rollout, the forward pass under the configured precision, checkpoints and device moves.

    A subclass provides ``make_optimizer()`` and ``update(rollout)``.
    """

    batch_axis = 1  # time-major rollouts split along B between data-parallel learners

    def __init__(self, model: ActorCritic, config: Any, *, device: "str | torch.device") -> None:
        if not isinstance(model, ActorCritic):
            raise TypeError(
                f"{type(self).__name__} trains a workbench.models.ActorCritic, got "
                f"{type(model).__name__}"
            )
        self.device = torch.device(device)
        self.config = config
        self.model = model.to(self.device)
        if config.channels_last:  # before the optimizer: it must hold the converted parameters
            self.model.to(memory_format=torch.channels_last)
        self.reduction = Reduction()
        self.optimizer = self.make_optimizer()
        self.gradient_step = GradientStep(
            self.optimizer,
            max_grad_norm=config.max_grad_norm,
            float16=config.autocast == "float16",
        )
        self.base_learning_rate = float(config.learning_rate)
        self.progress = 0.0
        self.learning_rate = self.base_learning_rate  # the rate applied at the last update
        self.num_updates = 0
        self.num_gradient_steps = 0
        self._compiled_evaluate = None  # made at the first update when config.compile is on

    def make_optimizer(self) -> torch.optim.Optimizer:
        raise NotImplementedError(f"{type(self).__name__} must define make_optimizer()")

    def update(self, rollout: Rollout) -> dict[str, float]:
        raise NotImplementedError(f"{type(self).__name__} must define update(rollout)")

    # --- learning rate ------------------------------------------------------------------------

    def set_learning_rate(self, learning_rate: float) -> None:
        """Replace the base learning rate (before batch-size scaling and annealing)."""
        if not learning_rate > 0:
            raise ValueError(f"learning_rate must be positive, got {learning_rate}")
        self.base_learning_rate = float(learning_rate)

    def set_progress(self, progress: float) -> None:
        """Fraction of training done, in [0, 1]; with ``anneal_lr`` the rate is ``(1 - progress)``
        times the base (CleanRL anneals linearly to 0 over the run)."""
        self.progress = min(max(float(progress), 0.0), 1.0)

    def learning_rate_for(self, batch_size: int) -> float:
        """The rate an update on ``batch_size = T * B`` samples uses: base, scaled, annealed."""
        c = self.config
        lr = self.base_learning_rate
        if c.scale_learning_rate is not None:
            lr = scaled_learning_rate(
                lr,
                batch_size,
                c.reference_batch_size,
                c.scale_learning_rate,
                max_lr=c.max_learning_rate,
            )
        if c.anneal_lr:
            lr *= 1.0 - self.progress
        return lr

    def apply_learning_rate(self, batch_size: int) -> None:
        """Set the optimizer's rate for an update on ``batch_size`` samples (the joined batch)."""
        self.learning_rate = self.learning_rate_for(batch_size)
        for group in self.optimizer.param_groups:
            group["lr"] = self.learning_rate

    # --- forward passes under the configured precision -----------------------------------------

    def evaluate(
        self,
        obs: torch.Tensor,
        actions: torch.Tensor,
        evaluate: Callable[[torch.Tensor, torch.Tensor], dict[str, torch.Tensor]] | None = None,
    ) -> dict[str, torch.Tensor]:
        """``model.evaluate(obs, actions)`` under the configured autocast, its ``logp``,
        ``entropy`` and ``value`` cast to float32: the losses and their reductions are never
        computed in 16 bits. Shapes as ``ActorCritic.evaluate``."""
        if evaluate is None:
            evaluate = self.model.evaluate
            if self.config.compile:
                if self._compiled_evaluate is None:
                    self._compiled_evaluate = compiled(self.model.evaluate)
                evaluate = self._compiled_evaluate
        with self.config.autocast_context(self.device):
            out = evaluate(obs, actions)
        return {key: value.float() for key, value in out.items()}

    def forward_obs(self, obs: torch.Tensor) -> torch.Tensor:
        """The update's observations as its forward passes take them.

        Under autocast, uint8 frames for a ``NatureCNN`` trunk are scaled to [0, 1] here, once per
        update and directly in the autocast dtype, instead of in every minibatch of every epoch in
        float32 (the trunk takes floating-point input as already scaled): PPO converts each frame
        once instead of ``num_epochs`` times, and gathers 16-bit minibatches. The values are those
        autocast would give the first convolution anyway (``k / 255`` rounded to 16 bits). Other
        observations, and every observation without autocast, pass unchanged.
        """
        if (
            self.config.autocast is None
            or obs.dtype != torch.uint8
            or not isinstance(getattr(self.model, "trunk", None), NatureCNN)
        ):
            return obs
        return obs.to(AUTOCAST_DTYPES[self.config.autocast]).div_(255.0)

    # --- the shared start of an update ---------------------------------------------------------

    def prepare(self, rollout: Rollout) -> tuple[Rollout, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Rollout on the device, behaviour ``value`` ``[T, B]``, GAE advantages and returns
        ``[T, B]`` (bootstrapped from ``V(next_obs)`` under the current model)."""
        missing = [k for k in ("logp", "value") if k not in rollout.policy_outputs]
        if missing:
            raise ValueError(
                f"{type(self).__name__}.update: rollout.policy_outputs lacks {missing}; collect "
                "with a policy whose act() returns 'logp' and 'value' (ActorCritic.act does)"
            )
        check_precision(self.config.autocast, self.device, type(self).__name__)
        rollout = rollout.to(self.device)
        T, B = rollout.horizon, rollout.num_envs
        behaviour_values = rollout.policy_outputs["value"].float()
        if behaviour_values.shape != (T, B) or rollout.policy_outputs["logp"].shape != (T, B):
            raise ValueError(
                f"{type(self).__name__}.update: policy_outputs 'logp' and 'value' must be [T, B] = "
                f"{[T, B]}, got {list(rollout.policy_outputs['logp'].shape)} and "
                f"{list(behaviour_values.shape)}"
            )
        with torch.no_grad():
            _, bootstrap_value = self.model(rollout.next_obs)
            advantages, returns = gae_from_rollout(
                rollout,
                behaviour_values,
                bootstrap_value.float(),
                self.config.gamma,
                self.config.gae_lambda,
            )
        return rollout, behaviour_values, advantages, returns

    def step(self, loss: torch.Tensor) -> float:
        """One gradient step (``base.GradientStep``); returns the global norm before clipping."""
        self.num_gradient_steps += 1
        return self.gradient_step.step(loss, self.reduction)

    # --- checkpoints and devices -----------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Model, optimizer, learning-rate state and counters (everything ``update`` depends on)."""
        state = {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "base_learning_rate": self.base_learning_rate,
            "progress": self.progress,
            "num_updates": self.num_updates,
            "num_gradient_steps": self.num_gradient_steps,
        }
        scaler_state = self.gradient_step.state_dict().get("grad_scaler")
        if scaler_state:  # float16: the loss scale it has found
            state["grad_scaler"] = scaler_state
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.gradient_step.load_state_dict(
            {"optimizer": state["optimizer"], "grad_scaler": state.get("grad_scaler")}
        )
        self.base_learning_rate = float(state["base_learning_rate"])
        self.progress = float(state["progress"])
        self.num_updates = int(state["num_updates"])
        self.num_gradient_steps = int(state["num_gradient_steps"])

    def to(self, device: "str | torch.device") -> None:
        """Move the model and the optimizer's state to ``device``."""
        self.device = torch.device(device)
        self.model.to(self.device)
        move_optimizer_state(self.optimizer, self.device)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.config}, device={self.device})"
