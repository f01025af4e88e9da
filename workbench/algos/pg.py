"""Policy-gradient learners: A2C and PPO on an ``ActorCritic``, one ``update(rollout)`` each.

* ``A2C``: synchronous advantage actor-critic (Mnih et al. 2016, *Asynchronous Methods for Deep
  Reinforcement Learning*, https://arxiv.org/abs/1602.01783, Algorithm S3, made synchronous as in
  OpenAI baselines): one gradient step per rollout on the n-step advantages.
* ``PPO``: proximal policy optimisation with the clipped surrogate (Schulman et al. 2017,
  https://arxiv.org/abs/1707.06347, Eq. 7 and 9): several epochs of minibatch steps per rollout.
  The details follow CleanRL's ``ppo.py`` and Huang et al. 2022, *The 37 Implementation Details of
  PPO* (https://iclr-blog-track.github.io/2022/03/25/ppo-implementation-details/).

Both read a time-major ``Rollout`` ``[T, B, ...]`` (``workbench.rollout``): the behaviour ``logp``
and ``value`` the sampler stored in ``rollout.policy_outputs`` (what ``ActorCritic.act`` returns),
and bootstrap from ``V(rollout.next_obs)`` under the current model. Advantages come from
``gae_from_rollout``, which cuts returns at every episode end and bootstraps truncated episodes
from ``rollout.truncation_values``. Everything stays ``[T, B]`` until PPO flattens to ``[T * B]``
to draw minibatches.

The learning rate applied at an update is, in this order (``learning_rate_for`` on a learner):
``base`` (``config.learning_rate``, or what ``set_learning_rate`` set), scaled with the batch size
``T * B`` when ``config.scale_learning_rate`` is set (``scaled_learning_rate``, Stooke & Abbeel
2018), then multiplied by ``1 - progress`` when ``config.anneal_lr`` is on (``set_progress``).

Two options make an update cheaper without changing what it computes beyond rounding
(``PPOConfig`` / ``A2CConfig``): ``autocast`` runs the model's forward passes in bfloat16 (CPU or
CUDA) or float16 (CUDA, with a ``GradScaler``) under ``torch.autocast``, while parameters, Adam's
state, log-probabilities, entropies, values and every loss stay float32; ``channels_last`` keeps
the convolution weights in NHWC memory order, which oneDNN and cuDNN convolve faster. Under
autocast, uint8 frames are also scaled to [0, 1] once per update in 16 bits rather than in every
minibatch (``_forward_obs``). Measured on the 2-core avx512_bf16 CPU (NOTES.md), idle, 2 torch
threads: a PPO minibatch step of NatureCNN at 256 samples costs 0.12-0.14 s in float32, 0.06 s
under bfloat16, 0.09 s with channels_last alone, and bfloat16 with channels_last no less than
bfloat16 alone; a whole Pong update (1024 samples, 4 epochs x 4 minibatches) 2.4 s in float32,
1.0 s under bfloat16 (1.6 s with 1 thread). Caveat: when other processes hold the cores, a
bfloat16 update with 2 threads can take 10x longer than with 1 (its many small parallel regions
each wait for a sleeping OpenMP thread, ``OMP_WAIT_POLICY=PASSIVE``); float32 suffers far less.
Neither option changes what the sampler acts with: its forward passes stay float32.

The pure loss functions (``clipped_policy_loss``, ``value_loss``, ``normalize_advantages``,
``explained_variance``) are module-level so tests and notebooks can check them against the papers.
``train(algo, sampler, total_steps)`` is the plain collect -> update loop for tests and quick demos;
the runner with threads, widgets and metrics files lives elsewhere.
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Literal

import torch
from torch import nn

from workbench.algos.returns import gae_from_rollout
from workbench.models import ActorCritic, NatureCNN
from workbench.rollout import Rollout

__all__ = [
    "A2C",
    "A2CConfig",
    "PPO",
    "PPOConfig",
    "clipped_policy_loss",
    "explained_variance",
    "normalize_advantages",
    "scaled_learning_rate",
    "train",
    "value_loss",
]

ScaleRule = Literal["linear", "sqrt"]
Precision = Literal["bfloat16", "float16"]
_AUTOCAST_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}


# --------------------------------------------------------------------------------------------------
# Learning rate and batch size


def scaled_learning_rate(
    base_lr: float,
    batch_size: int,
    reference_batch_size: int,
    rule: ScaleRule = "linear",
    *,
    max_lr: float | None = None,
) -> float:
    """The learning rate for ``batch_size`` samples per update, from one tuned at another size.

    Stooke & Abbeel 2018, *Accelerated Methods for Deep Reinforcement Learning*,
    https://arxiv.org/abs/1803.02811, Section 4 ("Large batch training"): A2C and PPO keep their
    sample complexity at batch sizes far beyond the standard ones when the learning rate is raised
    with the batch, which is what makes many simulators per learner (and many GPUs) pay off. Two
    rules, with ``k = batch_size / reference_batch_size``::

        linear:  lr = base_lr * k          (Goyal et al. 2017, https://arxiv.org/abs/1706.02677)
        sqrt:    lr = base_lr * sqrt(k)    (Krizhevsky 2014, https://arxiv.org/abs/1404.5997;
                                            Hoffer et al. 2017, https://arxiv.org/abs/1705.08741)

    then ``lr = min(lr, max_lr)`` when ``max_lr`` is given.

    Why two: a k-times larger batch averages k times as many samples, so one step carries the
    information of k small steps. For plain SGD the linear rule keeps the distance moved per sample
    the same (k small steps ~ one step k times longer, while the gradient changes slowly). The
    square-root rule keeps the *variance* of the update the same instead (the gradient noise falls
    as 1/k). Adam and RMSProp divide by a running gradient scale, so their step is already
    insensitive to the gradient's size; the linear rule then overshoots sooner, and the sqrt rule
    is the conservative choice for them. Both rules break down beyond some batch size (Goyal et
    al.; Stooke & Abbeel observe the same for the largest batches), hence ``max_lr``.

    Args:
        base_lr: the learning rate tuned at ``reference_batch_size``.
        batch_size: samples per update now (``T * B`` of the rollout).
        reference_batch_size: samples per update at which ``base_lr`` was tuned.
        rule: ``"linear"`` or ``"sqrt"``.
        max_lr: optional cap on the result.

    Returns:
        The scaled learning rate (``base_lr`` when ``batch_size == reference_batch_size``).
    """
    if rule not in ("linear", "sqrt"):
        raise ValueError(f"scaled_learning_rate: rule must be 'linear' or 'sqrt', got {rule!r}")
    for name, value in (("batch_size", batch_size), ("reference_batch_size", reference_batch_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"scaled_learning_rate: {name} must be a positive int, got {value!r}")
    if not base_lr > 0:
        raise ValueError(f"scaled_learning_rate: base_lr must be positive, got {base_lr}")
    k = batch_size / reference_batch_size
    lr = base_lr * (k if rule == "linear" else math.sqrt(k))
    if max_lr is not None:
        lr = min(lr, max_lr)
    return lr


# --------------------------------------------------------------------------------------------------
# Losses and statistics (pure tensor functions; any shape, all inputs the same shape)


def normalize_advantages(advantages: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """``(A - mean(A)) / (std(A) + eps)``: zero mean, unit standard deviation.

    Huang et al. 2022, *37 Implementation Details of PPO*, detail 7 (done per minibatch, as in
    OpenAI baselines). A single element has no spread: it is only centred (to 0).

    Args:
        advantages: float, any shape (``[T, B]`` or a flattened minibatch ``[N]``).
    """
    centred = advantages - advantages.mean()
    if advantages.numel() < 2:
        return centred
    return centred / (advantages.std() + eps)


def clipped_policy_loss(
    behaviour_logp: torch.Tensor,
    target_logp: torch.Tensor,
    advantages: torch.Tensor,
    clip_coef: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO's clipped surrogate, as a loss to minimise.

    Schulman et al. 2017, https://arxiv.org/abs/1707.06347, Eq. 7::

        r_t(theta) = pi_theta(a_t|s_t) / pi_theta_old(a_t|s_t)
        L^CLIP     = E_t[ min(r_t A_t, clip(r_t, 1 - eps, 1 + eps) A_t) ]

    returned as ``mean(max(-r A, -clip(r, 1 - eps, 1 + eps) A)) = -L^CLIP``. Where the ratio has
    left ``[1 - eps, 1 + eps]`` in the direction the advantage favours (``r > 1 + eps`` with
    ``A > 0``, ``r < 1 - eps`` with ``A < 0``) the clipped term is the smaller one and is constant
    in theta: that sample gives no gradient.

    Symbols to arguments: ``pi_theta_old`` = ``exp(behaviour_logp)``, ``pi_theta`` =
    ``exp(target_logp)``, ``A_t`` = ``advantages``, ``eps`` = ``clip_coef``.

    Args:
        behaviour_logp: float ``[N]`` (or ``[T, B]``) log-probabilities of the actions under the
            policy that collected them.
        target_logp: float, same shape: the same actions under the policy being learned (with
            gradient).
        advantages: float, same shape; treated as constants.
        clip_coef: ``eps`` > 0.

    Returns:
        ``(loss, ratio)``: the scalar loss and the ratios ``r_t`` (same shape as the inputs).
    """
    if not behaviour_logp.shape == target_logp.shape == advantages.shape:
        raise ValueError(
            "clipped_policy_loss: behaviour_logp, target_logp and advantages must have one shape; "
            f"got {list(behaviour_logp.shape)}, {list(target_logp.shape)}, {list(advantages.shape)}"
        )
    ratio = torch.exp(target_logp - behaviour_logp)
    advantages = advantages.detach()
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip_coef, 1.0 + clip_coef)
    return torch.max(unclipped, clipped).mean(), ratio


def value_loss(
    values: torch.Tensor,
    returns: torch.Tensor,
    *,
    behaviour_values: torch.Tensor | None = None,
    clip_coef: float | None = None,
) -> torch.Tensor:
    """Half the mean squared error to the value targets, optionally clipped as in PPO2.

    Without clipping: ``0.5 * mean((V - R)^2)``. With ``clip_coef`` (OpenAI baselines' PPO2;
    Huang et al. 2022, detail 9; Engstrom et al. 2020, https://arxiv.org/abs/2005.12729, found it
    does not help and can hurt, so it is an option)::

        V_clip = V_old + clip(V - V_old, -eps, eps)
        loss   = 0.5 * mean(max((V - R)^2, (V_clip - R)^2))

    Symbols to arguments: ``V`` = ``values`` (with gradient), ``R`` = ``returns`` (targets),
    ``V_old`` = ``behaviour_values`` (the values stored at collection), ``eps`` = ``clip_coef``.

    Args:
        values: float ``[N]`` (or ``[T, B]``) predictions of the model being trained.
        returns: float, same shape: targets, treated as constants.
        behaviour_values: float, same shape; needed when ``clip_coef`` is given.
        clip_coef: None for the plain squared error.

    Returns:
        The scalar loss.
    """
    returns = returns.detach()
    if values.shape != returns.shape:
        raise ValueError(
            f"value_loss: values {list(values.shape)} and returns {list(returns.shape)} differ"
        )
    unclipped = (values - returns) ** 2
    if clip_coef is None:
        return 0.5 * unclipped.mean()
    if behaviour_values is None or behaviour_values.shape != values.shape:
        raise ValueError(
            "value_loss: clip_coef needs behaviour_values of the same shape as values (the values "
            "the sampler stored, rollout.policy_outputs['value'])"
        )
    behaviour_values = behaviour_values.detach()
    clipped = behaviour_values + torch.clamp(values - behaviour_values, -clip_coef, clip_coef)
    return 0.5 * torch.max(unclipped, (clipped - returns) ** 2).mean()


@torch.no_grad()
def explained_variance(values: torch.Tensor, returns: torch.Tensor) -> float:
    """``1 - Var(R - V) / Var(R)``: 1 is a perfect value function, 0 no better than a constant.

    NaN when the returns have no variance. Args: ``values`` and ``returns``, float, one shape.
    """
    var_returns = returns.float().var()
    if returns.numel() < 2 or var_returns == 0:
        return float("nan")
    return float(1 - (returns.float() - values.float()).var() / var_returns)


# --------------------------------------------------------------------------------------------------
# Configs


def _check_common(config: Any) -> None:
    for name in ("gamma", "gae_lambda"):
        value = getattr(config, name)
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"{type(config).__name__}.{name} must be in [0, 1], got {value}")
    if not config.learning_rate > 0:
        raise ValueError(f"{type(config).__name__}.learning_rate must be positive")
    if config.max_grad_norm is not None and not config.max_grad_norm > 0:
        raise ValueError(f"{type(config).__name__}.max_grad_norm must be positive or None")
    if config.scale_learning_rate not in (None, "linear", "sqrt"):
        raise ValueError(
            f"{type(config).__name__}.scale_learning_rate must be None, 'linear' or 'sqrt', "
            f"got {config.scale_learning_rate!r}"
        )
    if config.scale_learning_rate is not None and config.reference_batch_size is None:
        raise ValueError(
            f"{type(config).__name__}.scale_learning_rate={config.scale_learning_rate!r} needs "
            "reference_batch_size: the T * B at which learning_rate was tuned"
        )
    if config.autocast not in (None, *_AUTOCAST_DTYPES):
        raise ValueError(
            f"{type(config).__name__}.autocast must be None (float32), 'bfloat16' (CPU or CUDA) or "
            f"'float16' (CUDA only), got {config.autocast!r}"
        )
    if not isinstance(config.channels_last, bool):
        raise ValueError(
            f"{type(config).__name__}.channels_last must be True or False, got {config.channels_last!r}"
        )


@dataclass
class LearnerPrecision:
    """How a learner computes (shared by ``PPOConfig`` and ``A2CConfig``; the speed-ups of
    ``benchmarks/training_throughput.py``)."""

    autocast: Precision | None = None
    """Mixed precision for the update's forward passes: None (float32), ``"bfloat16"`` (CPU with
    bf16 support, or CUDA) or ``"float16"`` (CUDA only: gradients are scaled with a
    ``torch.amp.GradScaler``). Log-probabilities, entropies and values are cast to float32 before
    the losses; parameters and optimizer state stay float32. About 2x cheaper on a bf16 CPU."""
    channels_last: bool = False
    """Convert the model's 4-D (convolution) weights to channels-last memory format (NHWC), which
    oneDNN and cuDNN convolve faster; same values, other strides. No effect on MLPs. The model is
    converted in place when the learner is made (the sampler acting with it then uses NHWC too)."""


@dataclass
class PPOConfig(LearnerPrecision):
    """PPO hyperparameters (Schulman et al. 2017). Defaults: CleanRL's ``ppo.py``, except
    ``anneal_lr`` (off here: it needs ``set_progress``, which ``train`` and the runner call).

    On ``ActorCritic``'s shared trunk with large returns (CartPole: tens to hundreds), the value
    loss's gradient dominates the trunk and a global norm clip shrinks the policy's gradient with
    it (Huang et al. 2022, detail 13: separate networks do better on classic control). A small
    ``value_coef`` (0.05) with ``max_grad_norm=None`` works (``tests/test_pg.py``)."""

    gamma: float = 0.99
    """Discount factor."""
    gae_lambda: float = 0.95
    """GAE lambda (Schulman et al. 2016): 0 one-step TD, 1 Monte Carlo."""
    learning_rate: float = 2.5e-4
    """Adam step size, tuned at ``reference_batch_size`` samples per update when scaling."""
    adam_eps: float = 1e-5
    """Adam's epsilon (baselines' 1e-5, not torch's 1e-8; Huang et al. 2022, detail 3)."""
    num_epochs: int = 4
    """Passes over each rollout (K in the paper)."""
    num_minibatches: int = 4
    """Minibatches per epoch; the minibatch size is ``T * B // num_minibatches``. The count, not
    the size, is fixed, so the number of optimizer steps per update stays the same when a runner
    changes T or B, and the minibatch grows with the batch (as learning-rate scaling assumes)."""
    clip_coef: float = 0.2
    """The surrogate's clipping range eps."""
    clip_value_loss: bool = True
    """Clip the value loss around the stored values with ``clip_coef`` (PPO2; ``value_loss``)."""
    value_coef: float = 0.5
    """Weight of the value loss (c1 in Eq. 9)."""
    entropy_coef: float = 0.01
    """Weight of the entropy bonus (c2 in Eq. 9)."""
    normalize_advantages: bool = True
    """Normalise advantages per minibatch to zero mean, unit std."""
    max_grad_norm: float | None = 0.5
    """Clip the global gradient norm (over all parameters) to this; None: no clipping."""
    target_kl: float | None = None
    """Stop an update's epochs early once the approximate KL of a minibatch exceeds this."""
    anneal_lr: bool = False
    """Multiply the learning rate by ``1 - progress`` (``set_progress``; ``train`` sets it)."""
    scale_learning_rate: ScaleRule | None = None
    """None, or the rule (``"linear"`` / ``"sqrt"``) that scales the learning rate with the batch
    size ``T * B`` of each rollout relative to ``reference_batch_size`` (Stooke & Abbeel 2018,
    Sec. 4; see ``scaled_learning_rate`` for the rules and why). Adam: prefer ``"sqrt"``."""
    reference_batch_size: int | None = None
    """The ``T * B`` at which ``learning_rate`` was tuned (needed with ``scale_learning_rate``)."""
    max_learning_rate: float | None = None
    """Cap on the scaled learning rate (the rules stop holding at very large batches)."""

    def __post_init__(self) -> None:
        _check_common(self)
        if self.num_epochs < 1 or self.num_minibatches < 1:
            raise ValueError("PPOConfig: num_epochs and num_minibatches must be at least 1")
        if not self.clip_coef > 0:
            raise ValueError(f"PPOConfig.clip_coef must be positive, got {self.clip_coef}")


@dataclass
class A2CConfig(LearnerPrecision):
    """A2C hyperparameters (Mnih et al. 2016; defaults: OpenAI baselines' ``a2c``, also Stooke &
    Abbeel's starting point: RMSProp, lr 7e-4, entropy 0.01, value 0.5, grad norm 0.5)."""

    gamma: float = 0.99
    """Discount factor."""
    gae_lambda: float = 1.0
    """GAE lambda. 1 gives the classic n-step returns of A3C (Algorithm S3): each step bootstraps
    from ``V(next_obs)`` after the T - t remaining steps. Below 1, GAE (Schulman et al. 2016)."""
    learning_rate: float = 7e-4
    """Step size, tuned at ``reference_batch_size`` samples per update when scaling."""
    optimizer: Literal["rmsprop", "adam"] = "rmsprop"
    """``"rmsprop"`` as in Mnih et al. 2016 (non-centred, no momentum; theirs kept its statistics
    shared across threads, here there is one learner) or ``"adam"``."""
    rmsprop_alpha: float = 0.99
    """RMSProp's decay of the squared-gradient average (alpha in Mnih et al. 2016)."""
    optimizer_eps: float = 1e-5
    """Epsilon of RMSProp or Adam (baselines' 1e-5)."""
    value_coef: float = 0.5
    """Weight of the value loss (``0.5 * mean squared error``, see ``value_loss``)."""
    entropy_coef: float = 0.01
    """Weight of the entropy bonus (beta in Mnih et al. 2016, who used 0.01)."""
    normalize_advantages: bool = False
    """Normalise advantages over the rollout (the classic A2C does not)."""
    max_grad_norm: float | None = 0.5
    """Clip the global gradient norm (over all parameters) to this; None: no clipping."""
    anneal_lr: bool = False
    """Multiply the learning rate by ``1 - progress`` (``set_progress``; ``train`` sets it)."""
    scale_learning_rate: ScaleRule | None = None
    """None, or the rule (``"linear"`` / ``"sqrt"``) that scales the learning rate with the batch
    size ``T * B`` relative to ``reference_batch_size`` (Stooke & Abbeel 2018, Sec. 4, who scaled
    A2C's batch through the number of environments; see ``scaled_learning_rate``)."""
    reference_batch_size: int | None = None
    """The ``T * B`` at which ``learning_rate`` was tuned (needed with ``scale_learning_rate``)."""
    max_learning_rate: float | None = None
    """Cap on the scaled learning rate."""

    def __post_init__(self) -> None:
        _check_common(self)
        if self.optimizer not in ("rmsprop", "adam"):
            raise ValueError(
                f"A2CConfig.optimizer must be 'rmsprop' or 'adam', got {self.optimizer!r}"
            )


# --------------------------------------------------------------------------------------------------
# Learners


class _PolicyGradient:
    """What A2C and PPO share: the model and optimizer, the learning-rate rule, GAE over a
    rollout, the forward pass under the configured precision, gradient clipping, and checkpoints."""

    config: PPOConfig | A2CConfig

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
        self.grad_scaler: torch.amp.GradScaler | None = None  # float16 only (made at first use)
        self.optimizer = self._make_optimizer()
        self.base_learning_rate = float(config.learning_rate)
        self.progress = 0.0
        self.learning_rate = self.base_learning_rate  # the rate applied at the last update
        self.num_updates = 0
        self.num_gradient_steps = 0

    def _make_optimizer(self) -> torch.optim.Optimizer:
        raise NotImplementedError

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

    def _apply_learning_rate(self, batch_size: int) -> None:
        self.learning_rate = self.learning_rate_for(batch_size)
        for group in self.optimizer.param_groups:
            group["lr"] = self.learning_rate

    # --- precision ------------------------------------------------------------------------------

    def _check_precision(self) -> None:
        """Raise ValueError, naming the fix, when ``config.autocast`` cannot run on ``self.device``.

        Checked at every update, not when the learner is made: a learner may be made on the CPU
        and moved to its GPU afterwards (``Run``'s learner devices, ``DataParallelLearner``'s
        CPU copy of the algorithm)."""
        name, precision = type(self).__name__, self.config.autocast
        if precision == "float16" and self.device.type != "cuda":
            raise ValueError(
                f"{name}: autocast='float16' needs a CUDA device (its gradients are scaled by a "
                f"CUDA GradScaler), but the learner is on {self.device}. On the CPU use "
                "autocast='bfloat16', or None for float32."
            )
        if precision == "bfloat16" and self.device.type == "cuda" and not torch.cuda.is_bf16_supported():
            raise ValueError(
                f"{name}: autocast='bfloat16' is not supported by {torch.cuda.get_device_name(self.device)}; "
                "use autocast='float16' on this GPU, or None for float32."
            )
        if precision is not None and self.device.type not in ("cpu", "cuda"):
            raise ValueError(
                f"{name}: autocast={precision!r} is supported here on 'cpu' and 'cuda' learners, "
                f"not {self.device.type!r}; use autocast=None."
            )

    def _autocast(self) -> contextlib.AbstractContextManager:
        """``torch.autocast`` for ``config.autocast`` on the learner's device (a no-op for None)."""
        if self.config.autocast is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=_AUTOCAST_DTYPES[self.config.autocast])

    def _evaluate(
        self,
        obs: torch.Tensor,
        actions: torch.Tensor,
        evaluate: Callable[[torch.Tensor, torch.Tensor], dict[str, torch.Tensor]] | None = None,
    ) -> dict[str, torch.Tensor]:
        """``model.evaluate(obs, actions)`` (or ``evaluate``, e.g. a DDP wrapper of it) under the
        configured autocast, its ``logp``, ``entropy`` and ``value`` cast to float32: the losses
        and their reductions are never computed in 16 bits. Shapes as ``ActorCritic.evaluate``."""
        with self._autocast():
            out = (evaluate or self.model.evaluate)(obs, actions)
        return {key: value.float() for key, value in out.items()}

    def _forward_obs(self, obs: torch.Tensor) -> torch.Tensor:
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
        return obs.to(_AUTOCAST_DTYPES[self.config.autocast]).div_(255.0)

    # --- shared pieces of an update -------------------------------------------------------------

    def _prepare(
        self, rollout: Rollout
    ) -> tuple[Rollout, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Rollout on the device, behaviour ``logp`` and ``value`` ``[T, B]``, GAE advantages and
        returns ``[T, B]`` (bootstrapped from ``V(next_obs)`` under the current model)."""
        missing = [k for k in ("logp", "value") if k not in rollout.policy_outputs]
        if missing:
            raise ValueError(
                f"{type(self).__name__}.update: rollout.policy_outputs lacks {missing}; collect "
                "with a policy whose act() returns 'logp' and 'value' (ActorCritic.act does)"
            )
        self._check_precision()
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

    def _step(self, loss: torch.Tensor) -> float:
        """Backward, global-norm clipping, optimizer step; returns the norm *before* clipping.

        With ``autocast='float16'`` the loss is scaled before the backward pass and the gradients
        unscaled before clipping (``torch.amp.GradScaler``); a step whose gradients overflowed is
        skipped (its norm is then inf or nan) and the scale lowered."""
        self.optimizer.zero_grad(set_to_none=True)
        scaler = None
        if self.config.autocast == "float16":
            if self.grad_scaler is None:
                self.grad_scaler = torch.amp.GradScaler(self.device.type)
            scaler = self.grad_scaler
            scaler.scale(loss).backward()
            scaler.unscale_(self.optimizer)
        else:
            loss.backward()
        max_norm = self.config.max_grad_norm
        grad_norm = nn.utils.clip_grad_norm_(
            self.model.parameters(), math.inf if max_norm is None else max_norm
        )
        if scaler is None:
            self.optimizer.step()
        else:
            scaler.step(self.optimizer)
            scaler.update()
        self.num_gradient_steps += 1
        return float(grad_norm)

    # --- checkpoints ----------------------------------------------------------------------------

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
        if self.grad_scaler is not None:  # float16: the loss scale it has found
            state["grad_scaler"] = self.grad_scaler.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.base_learning_rate = float(state["base_learning_rate"])
        self.progress = float(state["progress"])
        self.num_updates = int(state["num_updates"])
        self.num_gradient_steps = int(state["num_gradient_steps"])
        if state.get("grad_scaler") and self.config.autocast == "float16":
            self.grad_scaler = torch.amp.GradScaler(self.device.type)
            self.grad_scaler.load_state_dict(state["grad_scaler"])

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.config}, device={self.device})"


class PPO(_PolicyGradient):
    """Proximal policy optimisation, clipped objective (Schulman et al. 2017, Algorithm 1, Eq. 9).

    Per ``update(rollout)``: GAE over the ``[T, B]`` rollout, then ``num_epochs`` passes over the
    flattened ``[T * B]`` samples in ``num_minibatches`` random minibatches, each minimising::

        loss = -L^CLIP + value_coef * L^VF - entropy_coef * S[pi]        (Eq. 9, as a loss)

    with the ratio taken against the behaviour ``logp`` the sampler stored, and ``L^VF`` the
    (optionally clipped) value loss against the stored ``value``. Adam, global-norm clipping.

    Args:
        model: the ``ActorCritic`` to train (moved to ``device``).
        config: a ``PPOConfig``.
        device: where the learner computes.
        seed: seeds the generator that draws minibatches (saved in ``state_dict``).
    """

    config: PPOConfig

    def __init__(
        self,
        model: ActorCritic,
        config: PPOConfig | None = None,
        *,
        device: "str | torch.device" = "cpu",
        seed: int = 0,
    ) -> None:
        super().__init__(model, config or PPOConfig(), device=device)
        self.generator = torch.Generator().manual_seed(seed)

    def _make_optimizer(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(
            self.model.parameters(), lr=self.config.learning_rate, eps=self.config.adam_eps
        )

    def update(self, rollout: Rollout) -> dict[str, float]:
        """One PPO update on a ``[T, B]`` rollout; metrics are averaged over its minibatch steps.

        Keys: ``losses/policy``, ``losses/value``, ``losses/entropy``, ``losses/approx_kl`` (the
        ``(r - 1) - log r`` estimator, http://joschu.net/blog/kl-approx.html),
        ``losses/clip_fraction`` (share of samples with ``|r - 1| > clip_coef``),
        ``losses/explained_variance`` (of the stored values), ``charts/learning_rate``,
        ``charts/grad_norm`` (global norm before clipping), ``charts/epochs``
        (fewer than ``num_epochs`` after a ``target_kl`` stop).
        """
        c = self.config
        rollout, behaviour_values, advantages, returns = self._prepare(rollout)
        N = rollout.num_steps
        if N < c.num_minibatches:
            raise ValueError(
                f"PPO.update: the rollout has T * B = {N} samples, fewer than num_minibatches="
                f"{c.num_minibatches}; collect more steps or lower num_minibatches"
            )
        self._apply_learning_rate(N)

        # Flatten [T, B, ...] -> [T * B, ...] only here, to draw minibatches.
        obs = self._forward_obs(rollout.obs.flatten(0, 1))
        actions = rollout.actions.flatten(0, 1)
        b_logp = rollout.policy_outputs["logp"].flatten(0, 1).float()
        b_values = behaviour_values.flatten(0, 1)
        b_advantages = advantages.flatten(0, 1)
        b_returns = returns.flatten(0, 1)

        sums: dict[str, float] = {}
        steps = 0
        epochs = 0
        for _ in range(c.num_epochs):
            epochs += 1
            order = torch.randperm(N, generator=self.generator).to(self.device)
            stop = False
            for idx in torch.tensor_split(order, c.num_minibatches):
                out = self._evaluate(obs[idx], actions[idx])  # float32 outputs
                mb_advantages = b_advantages[idx]
                if c.normalize_advantages:
                    mb_advantages = normalize_advantages(mb_advantages)
                pg_loss, ratio = clipped_policy_loss(
                    b_logp[idx], out["logp"], mb_advantages, c.clip_coef
                )
                v_loss = value_loss(
                    out["value"],
                    b_returns[idx],
                    behaviour_values=b_values[idx],
                    clip_coef=c.clip_coef if c.clip_value_loss else None,
                )
                entropy = out["entropy"].mean()
                loss = pg_loss + c.value_coef * v_loss - c.entropy_coef * entropy
                grad_norm = self._step(loss)
                with torch.no_grad():
                    log_ratio = out["logp"] - b_logp[idx]
                    approx_kl = float(((ratio - 1) - log_ratio).mean())
                    clip_fraction = float(((ratio - 1).abs() > c.clip_coef).float().mean())
                for key, value in (
                    ("losses/policy", pg_loss.item()),
                    ("losses/value", v_loss.item()),
                    ("losses/entropy", entropy.item()),
                    ("losses/approx_kl", approx_kl),
                    ("losses/clip_fraction", clip_fraction),
                    ("charts/grad_norm", grad_norm),
                ):
                    sums[key] = sums.get(key, 0.0) + value
                steps += 1
                if c.target_kl is not None and approx_kl > c.target_kl:
                    stop = True
                    break
            if stop:
                break
        self.num_updates += 1
        metrics = {key: value / steps for key, value in sums.items()}
        metrics["losses/explained_variance"] = explained_variance(b_values, b_returns)
        metrics["charts/learning_rate"] = self.learning_rate
        metrics["charts/epochs"] = float(epochs)
        return metrics

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "generator": self.generator.get_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.generator.set_state(state["generator"])


class A2C(_PolicyGradient):
    """Synchronous advantage actor-critic (Mnih et al. 2016, Algorithm S3; one learner, B envs).

    Per ``update(rollout)``: advantages ``A_t = R_t - V(s_t)`` over the ``[T, B]`` rollout (the
    n-step returns ``R_t`` with ``gae_lambda = 1``, GAE otherwise) and one gradient step on::

        loss = -mean(log pi(a_t|s_t) A_t) + value_coef * 0.5 * mean((V(s_t) - R_t)^2)
               - entropy_coef * mean(H[pi(.|s_t)])

    with ``A_t`` and ``R_t`` constants (computed from the stored behaviour values, bootstrapped
    from ``V(next_obs)`` under the current model). RMSProp (default) or Adam; global-norm clipping.

    Args:
        model: the ``ActorCritic`` to train (moved to ``device``).
        config: an ``A2CConfig``.
        device: where the learner computes.
    """

    config: A2CConfig

    def __init__(
        self,
        model: ActorCritic,
        config: A2CConfig | None = None,
        *,
        device: "str | torch.device" = "cpu",
    ) -> None:
        super().__init__(model, config or A2CConfig(), device=device)

    def _make_optimizer(self) -> torch.optim.Optimizer:
        c = self.config
        if c.optimizer == "adam":
            return torch.optim.Adam(
                self.model.parameters(), lr=c.learning_rate, eps=c.optimizer_eps
            )
        return torch.optim.RMSprop(
            self.model.parameters(), lr=c.learning_rate, alpha=c.rmsprop_alpha, eps=c.optimizer_eps
        )

    def update(self, rollout: Rollout) -> dict[str, float]:
        """One A2C step on a ``[T, B]`` rollout.

        Keys: ``losses/policy``, ``losses/value``, ``losses/entropy``, ``losses/approx_kl`` (KL
        estimate from the behaviour policy to the current one before the step: the policy lag, 0
        when the sampler acted with this very model), ``losses/explained_variance``,
        ``charts/learning_rate``, ``charts/grad_norm`` (global norm before clipping).
        """
        c = self.config
        rollout, behaviour_values, advantages, returns = self._prepare(rollout)
        self._apply_learning_rate(rollout.num_steps)
        out = self._evaluate(self._forward_obs(rollout.obs), rollout.actions)  # each float32 [T, B]
        if c.normalize_advantages:
            advantages = normalize_advantages(advantages)
        pg_loss = -(out["logp"] * advantages).mean()
        v_loss = value_loss(out["value"], returns)
        entropy = out["entropy"].mean()
        loss = pg_loss + c.value_coef * v_loss - c.entropy_coef * entropy
        grad_norm = self._step(loss)
        with torch.no_grad():
            log_ratio = out["logp"] - rollout.policy_outputs["logp"].float()
            approx_kl = float((torch.expm1(log_ratio) - log_ratio).mean())
        self.num_updates += 1
        return {
            "losses/policy": pg_loss.item(),
            "losses/value": v_loss.item(),
            "losses/entropy": entropy.item(),
            "losses/approx_kl": approx_kl,
            "losses/explained_variance": explained_variance(behaviour_values, returns),
            "charts/learning_rate": self.learning_rate,
            "charts/grad_norm": grad_norm,
        }


# --------------------------------------------------------------------------------------------------
# The plain loop (tests, quick demos; the runner adds threads, widgets and metrics files)


def train(
    algo: PPO | A2C,
    sampler: Any,
    total_steps: int,
    *,
    target_return: float | None = None,
    window: int = 20,
    stop_at_target: bool = True,
    log_every: int | None = None,
    max_seconds: float | None = None,
    on_update: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Collect and update until ``total_steps`` env steps: ``sampler.collect(algo.model)`` then
    ``algo.update(rollout)``, with ``algo.set_progress(steps / total_steps)`` before each update.

    Args:
        algo: a ``PPO`` or ``A2C``.
        sampler: anything with ``collect(policy) -> Rollout`` (``workbench.samplers``).
        total_steps: env steps (``T * B`` per collect) to run at most.
        target_return: the mean return over the last ``window`` episodes to reach; None: none.
        window: episodes averaged for the mean return (the target needs a full window).
        stop_at_target: return as soon as the target is reached.
        log_every: print one line every this many env steps; None: silent.
        max_seconds: stop after the first update that ends past this many wall-clock seconds;
            None: no time limit. The learning rate still anneals over ``total_steps``.
        on_update: called after every update with that update's point of ``curve`` (below), e.g.
            to keep a curve that outlives an interrupted run.

    Returns:
        A dict: ``history`` (list of ``(env_steps, mean return of the last window episodes)``, one
        per update once an episode has ended), ``curve`` (one dict per update: ``env_steps``,
        ``mean_return`` (None before the first episode ends), ``episodes``, ``seconds``),
        ``steps_to_target`` (env steps when the target was first reached, else None),
        ``stopped`` (``"target"``, ``"budget"`` or ``"time"``), ``env_steps``,
        ``episode_returns`` (every episode's return), ``metrics`` (the last update's), ``seconds``
        (wall clock).
    """
    start = time.perf_counter()
    returns: list[float] = []
    history: list[tuple[int, float]] = []
    curve: list[dict[str, Any]] = []
    steps = 0
    steps_to_target: int | None = None
    metrics: dict[str, float] = {}
    next_log = log_every
    stopped = "budget"
    while steps < total_steps:
        algo.set_progress(steps / total_steps)
        rollout = sampler.collect(algo.model)
        steps += rollout.num_steps
        metrics = algo.update(rollout)
        returns.extend(rollout.episodes.returns)
        mean_return = None
        if returns:
            recent = returns[-window:]
            mean_return = sum(recent) / len(recent)
            history.append((steps, mean_return))
            if (
                target_return is not None
                and steps_to_target is None
                and len(recent) == window
                and mean_return >= target_return
            ):
                steps_to_target = steps
        elapsed = time.perf_counter() - start
        point = {"env_steps": steps, "mean_return": mean_return, "episodes": len(returns), "seconds": elapsed}
        curve.append(point)
        if on_update is not None:
            on_update(point)
        if next_log is not None and steps >= next_log:
            last = history[-1][1] if history else float("nan")
            print(
                f"{steps:>9} steps  return(last {window}) {last:7.1f}  "
                f"episodes {len(returns):>5}  {elapsed:6.1f} s"
            )
            next_log += log_every
        if steps_to_target is not None and stop_at_target:
            stopped = "target"
            break
        if max_seconds is not None and elapsed >= max_seconds and steps < total_steps:
            stopped = "time"
            break
    return {
        "history": history,
        "curve": curve,
        "steps_to_target": steps_to_target,
        "stopped": stopped,
        "env_steps": steps,
        "episode_returns": returns,
        "metrics": metrics,
        "seconds": time.perf_counter() - start,
    }
