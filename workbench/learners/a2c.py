"""A2C: synchronous advantage actor-critic (Mnih et al. 2016, *Asynchronous Methods for Deep
Reinforcement Learning*, https://arxiv.org/abs/1602.01783, Algorithm S3, made synchronous as in
OpenAI baselines): one gradient step per rollout on the n-step advantages.

Stooke & Abbeel 2018 start from it: many environments make one large batch per step, and the
learning rate grows with it (``scale_learning_rate``). What A2C shares with PPO is in
``policy_gradient``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from workbench.kernels import value_loss
from workbench.kernels.schedules import ScaleRule
from workbench.learners.base import Precision
from workbench.learners.policy_gradient import PolicyGradientLearner, check_policy_gradient_config
from workbench.models import ActorCritic
from workbench.rollout import Rollout

__all__ = ["A2C", "A2CConfig"]


@dataclass
class A2CConfig(Precision):
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
        check_policy_gradient_config(self)
        if self.optimizer not in ("rmsprop", "adam"):
            raise ValueError(
                f"A2CConfig.optimizer must be 'rmsprop' or 'adam', got {self.optimizer!r}"
            )


class A2C(PolicyGradientLearner):
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

    def make_optimizer(self) -> torch.optim.Optimizer:
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
        ``charts/learning_rate``, ``losses/grad_norm`` (global norm before clipping).
        """
        c, reduce = self.config, self.reduction
        rollout, behaviour_values, advantages, returns = self.prepare(rollout)
        self.apply_learning_rate(reduce.count(rollout.num_steps))
        out = self.evaluate(self.forward_obs(rollout.obs), rollout.actions)  # each float32 [T, B]
        if c.normalize_advantages:
            advantages = reduce.normalize(advantages)
        pg_loss = reduce.mean(-(out["logp"] * advantages))
        v_loss = reduce.mean(value_loss(out["value"], returns, reduction="none"))
        entropy = reduce.mean(out["entropy"])
        loss = pg_loss + c.value_coef * v_loss - c.entropy_coef * entropy
        grad_norm = self.step(loss)
        with torch.no_grad():
            log_ratio = out["logp"] - rollout.policy_outputs["logp"].float()
            approx_kl = float(reduce.mean(torch.expm1(log_ratio) - log_ratio))
        self.num_updates += 1
        return {
            "losses/policy": pg_loss.item(),
            "losses/value": v_loss.item(),
            "losses/entropy": entropy.item(),
            "losses/approx_kl": approx_kl,
            "losses/explained_variance": reduce.explained_variance(behaviour_values, returns),
            "charts/learning_rate": self.learning_rate,
            "losses/grad_norm": grad_norm,
        }
