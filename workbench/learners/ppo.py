"""PPO: proximal policy optimisation with the clipped surrogate (Schulman et al. 2017,
https://arxiv.org/abs/1707.06347, Eq. 7 and 9): several epochs of minibatch steps per rollout.

The details follow CleanRL's ``ppo.py`` and Huang et al. 2022, *The 37 Implementation Details of
PPO* (https://iclr-blog-track.github.io/2022/03/25/ppo-implementation-details/). What PPO shares
with A2C (GAE, the learning-rate rule, precision) is in ``policy_gradient``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from workbench.kernels import clipped_policy_loss, value_loss
from workbench.kernels.schedules import ScaleRule
from workbench.learners.base import Precision
from workbench.learners.policy_gradient import PolicyGradientLearner, check_policy_gradient_config
from workbench.models import ActorCritic
from workbench.rollout import Rollout

__all__ = ["PPO", "PPOConfig"]


@dataclass
class PPOConfig(Precision):
    """PPO hyperparameters (Schulman et al. 2017). Defaults: CleanRL's ``ppo.py``, except
    ``anneal_lr`` (off here: it needs ``set_progress``, which a ``runs.Run`` calls).

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
    """Multiply the learning rate by ``1 - progress`` (``set_progress``; a ``runs.Run`` sets it)."""
    scale_learning_rate: ScaleRule | None = None
    """None, or the rule (``"linear"`` / ``"sqrt"``) that scales the learning rate with the batch
    size ``T * B`` of each rollout relative to ``reference_batch_size`` (Stooke & Abbeel 2018,
    Sec. 4; see ``scaled_learning_rate`` for the rules and why). Adam: prefer ``"sqrt"``."""
    reference_batch_size: int | None = None
    """The ``T * B`` at which ``learning_rate`` was tuned (needed with ``scale_learning_rate``)."""
    max_learning_rate: float | None = None
    """Cap on the scaled learning rate (the rules stop holding at very large batches)."""

    def __post_init__(self) -> None:
        check_policy_gradient_config(self)
        if self.num_epochs < 1 or self.num_minibatches < 1:
            raise ValueError("PPOConfig: num_epochs and num_minibatches must be at least 1")
        if not self.clip_coef > 0:
            raise ValueError(f"PPOConfig.clip_coef must be positive, got {self.clip_coef}")


class PPO(PolicyGradientLearner):
    """Proximal policy optimisation, clipped objective (Schulman et al. 2017, Algorithm 1, Eq. 9).

    Per ``update(rollout)``: GAE over the ``[T, B]`` rollout, then ``num_epochs`` passes over the
    flattened ``[T * B]`` samples in ``num_minibatches`` random minibatches, each minimising::

        loss = -L^CLIP + value_coef * L^VF - entropy_coef * S[pi]        (Eq. 9, as a loss)

    with the ratio taken against the behaviour ``logp`` the sampler stored, and ``L^VF`` the
    (optionally clipped) value loss against the stored ``value``. Adam, global-norm clipping.

    Data-parallel (``learners.data_parallel``): every learner draws the same permutation of the
    joined ``T * B`` samples (the same seeded generator) and takes the samples of each minibatch
    that live in its shard (``reduction.local_samples``); the minibatch means go through the
    reduction.

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

    def make_optimizer(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(
            self.model.parameters(), lr=self.config.learning_rate, eps=self.config.adam_eps
        )

    def update(self, rollout: Rollout) -> dict[str, float]:
        """One PPO update on a ``[T, B]`` rollout; metrics are averaged over its minibatch steps.

        Keys: ``losses/policy``, ``losses/value``, ``losses/entropy``, ``losses/approx_kl`` (the
        ``(r - 1) - log r`` estimator, http://joschu.net/blog/kl-approx.html),
        ``losses/clip_fraction`` (share of samples with ``|r - 1| > clip_coef``),
        ``losses/explained_variance`` (of the stored values), ``charts/learning_rate``,
        ``losses/grad_norm`` (global norm before clipping), ``charts/epochs``
        (fewer than ``num_epochs`` after a ``target_kl`` stop).
        """
        c, reduce = self.config, self.reduction
        rollout, behaviour_values, advantages, returns = self.prepare(rollout)
        T, B = rollout.horizon, rollout.num_envs
        N = reduce.count(rollout.num_steps)  # the joined batch: T * B over every learner
        if N < c.num_minibatches:
            raise ValueError(
                f"PPO.update: the rollout has T * B = {N} samples, fewer than num_minibatches="
                f"{c.num_minibatches}; collect more steps or lower num_minibatches"
            )
        self.apply_learning_rate(N)

        # Flatten [T, B, ...] -> [T * B, ...] only here, to draw minibatches.
        obs = self.forward_obs(rollout.obs.flatten(0, 1))
        actions = rollout.actions.flatten(0, 1)
        b_logp = rollout.policy_outputs["logp"].flatten(0, 1).float()
        b_values = behaviour_values.flatten(0, 1)
        b_advantages = advantages.flatten(0, 1)
        b_returns = returns.flatten(0, 1)

        sums: dict[str, float] = {}
        steps = epochs = 0
        for _ in range(c.num_epochs):
            epochs += 1
            order = torch.randperm(N, generator=self.generator)
            stop = False
            for minibatch in torch.tensor_split(order, c.num_minibatches):
                idx = reduce.local_samples(minibatch, T, B).to(self.device)
                step_metrics = self.minibatch_step(
                    obs[idx],
                    actions[idx],
                    b_logp[idx],
                    b_values[idx],
                    b_advantages[idx],
                    b_returns[idx],
                )
                for key, value in step_metrics.items():
                    sums[key] = sums.get(key, 0.0) + value
                approx_kl = step_metrics["losses/approx_kl"]
                steps += 1
                if c.target_kl is not None and approx_kl > c.target_kl:
                    stop = True  # the same decision on every learner: approx_kl is joined
                    break
            if stop:
                break
        self.num_updates += 1
        metrics = {key: value / steps for key, value in sums.items()}
        metrics["losses/explained_variance"] = reduce.explained_variance(b_values, b_returns)
        metrics["charts/learning_rate"] = self.learning_rate
        metrics["charts/epochs"] = float(epochs)
        return metrics

    def minibatch_step(
        self,
        obs: torch.Tensor,
        actions: torch.Tensor,
        behaviour_logp: torch.Tensor,
        behaviour_values: torch.Tensor,
        advantages: torch.Tensor,
        returns: torch.Tensor,
    ) -> dict[str, float]:
        """One gradient step on a minibatch of the flattened rollout: the clipped surrogate
        (Eq. 7), the value loss and the entropy bonus (Eq. 9); its metrics."""
        c, reduce = self.config, self.reduction
        out = self.evaluate(obs, actions)  # float32 outputs
        if c.normalize_advantages:
            advantages = reduce.normalize(advantages)
        pg_losses, ratio = clipped_policy_loss(
            behaviour_logp, out["logp"], advantages, c.clip_coef, reduction="none"
        )
        v_losses = value_loss(
            out["value"],
            returns,
            behaviour_values=behaviour_values,
            clip_coef=c.clip_coef if c.clip_value_loss else None,
            reduction="none",
        )
        pg_loss, v_loss = reduce.mean(pg_losses), reduce.mean(v_losses)
        entropy = reduce.mean(out["entropy"])
        loss = pg_loss + c.value_coef * v_loss - c.entropy_coef * entropy
        grad_norm = self.step(loss)
        with torch.no_grad():
            log_ratio = out["logp"] - behaviour_logp
            approx_kl = float(reduce.mean((ratio - 1) - log_ratio))
            clip_fraction = float(reduce.mean(((ratio - 1).abs() > c.clip_coef).float()))
        return {
            "losses/policy": pg_loss.item(),
            "losses/value": v_loss.item(),
            "losses/entropy": entropy.item(),
            "losses/approx_kl": approx_kl,
            "losses/clip_fraction": clip_fraction,
            "losses/grad_norm": grad_norm,
        }

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "generator": self.generator.get_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.generator.set_state(state["generator"])
