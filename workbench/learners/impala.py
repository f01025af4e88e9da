"""The IMPALA learner (Espeholt et al. 2018, https://arxiv.org/abs/1802.01561), as SEED RL runs it.

Actors act with a policy that lags the learner's (in SEED, by the forward passes answered while the
learner updated), so the learner corrects with V-trace (``kernels.vtrace``, Eq. 1 and Remark 1) and
follows the loss of Section 4.2::

    loss = - sum_s rho_s log pi(a_s|x_s) (r_s + gamma v_{s+1} - V(x_s))          (policy gradient)
           + baseline_cost * 1/2 sum_s (v_s - V(x_s))^2                           (value)
           - entropy_cost * sum_s H(pi(.|x_s))                                    (exploration)

(means over the batch here, not sums, so the learning rate does not depend on the batch size).

An **unroll** is what the server assembles for one env: ``T + 1`` rows, time-major once stacked into
a batch ``[T + 1, B, ...]``: row t holds the observation ``obs``, the ``actions`` taken there and
its behaviour log-probability ``logp`` (``log mu(a_t|x_t)``), then the ``rewards`` that followed,
``terminated`` / ``truncated`` (the episode ended after step t; ``final_obs`` is the last
observation of a truncated one) and ``first`` (row t starts an episode). Row T only supplies the
observation to bootstrap from: its action belongs to the next unroll, which starts with it.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.distributions import Categorical

from workbench.checks import positive_int
from workbench.kernels import vtrace
from workbench.learners.base import (
    GradientStep,
    Precision,
    Reduction,
    check_precision,
    compiled,
    move_optimizer_state,
)

__all__ = ["IMPALA", "IMPALAConfig", "UNROLL_KEYS"]

#: The keys of a batch of unrolls, each time-major ``[T + 1, B, ...]``.
UNROLL_KEYS = ("obs", "actions", "logp", "rewards", "terminated", "truncated", "final_obs")


@dataclass
class IMPALAConfig(Precision):
    """IMPALA hyperparameters. Defaults: the paper's Table G.1 where it states them (baseline
    cost 0.5, entropy 0.01, gradient-norm clip 40, rho_bar = c_bar = 1), with Adam (SEED's
    choice). The precision fields (``Precision``) are the policy gradients' levers: ``autocast``
    None or ``"bfloat16"`` around the update's forward passes (V-trace and the losses in float32),
    ``channels_last``, which converts the model the server acts with too, and ``compile``: the
    update's forward pass over the unrolls through ``torch.compile`` (the server acts eagerly)."""

    gamma: float = 0.99
    learning_rate: float = 6e-4
    adam_eps: float = 1e-8
    baseline_cost: float = 0.5
    entropy_cost: float = 0.01
    max_grad_norm: float | None = 40.0
    clip_rho_threshold: float | None = 1.0
    clip_pg_rho_threshold: float | None = 1.0
    clip_c_threshold: float | None = 1.0
    unroll_length: int = 20
    """T: agent steps per unroll (the unroll holds T + 1 observations)."""
    batch_size: int = 32
    """Unrolls per learner update (B)."""
    anneal_updates: int | None = None
    """The learning rate falls linearly from ``learning_rate`` to 0 over this many updates, as
    IMPALA's (Espeholt et al. 2018, App. G: annealed over the run's frames; each update here
    learns ``T * B`` env steps once). None: constant."""

    def __post_init__(self) -> None:
        self.check_fields()
        self.refuse_float16()
        if not 0.0 <= self.gamma <= 1.0:
            raise ValueError(f"gamma must be in [0, 1], got {self.gamma}")
        if not self.learning_rate > 0:
            raise ValueError(f"learning_rate must be positive, got {self.learning_rate}")
        for name in ("unroll_length", "batch_size"):
            positive_int(getattr(self, name), name)
        if self.anneal_updates is not None and (
            not isinstance(self.anneal_updates, int) or self.anneal_updates < 1
        ):
            raise ValueError(
                f"anneal_updates must be a positive int (updates to anneal over) or None, got "
                f"{self.anneal_updates!r}"
            )


class IMPALA:
    """V-trace actor-critic updates on batches of unrolls; ``model`` is an ``ActorCritic`` (the
    same object the inference server acts with: in SEED, actors never hold parameters).

    ``lock``, when given, is held while the optimizer writes the parameters, so that the server's
    forward passes (which hold it too) never see half an update. With ``config.compile`` it is also
    held through the first forward pass, which compiles: tracing the model patches
    ``Module.__call__`` for the whole process, and a server thread's forward pass during it fails
    ("module is not installed as a submodule")."""

    batch_axis = 1  # time-major unrolls split along B between data-parallel learners

    def __init__(
        self,
        model: torch.nn.Module,
        config: IMPALAConfig | None = None,
        *,
        device: "str | torch.device" = "cpu",
        lock: Any = None,
    ) -> None:
        self.config = config or IMPALAConfig()
        self.device = torch.device(device)
        self.model = model.to(self.device)
        if self.config.channels_last:  # before the optimizer: it must hold the converted weights
            self.model.to(memory_format=torch.channels_last)
        self.optimizer = torch.optim.Adam(
            self.model.parameters(), lr=self.config.learning_rate, eps=self.config.adam_eps
        )
        self.gradient_step = GradientStep(
            self.optimizer, max_grad_norm=self.config.max_grad_norm, lock=lock
        )
        self.reduction = Reduction()
        self.num_updates = 0
        self.lock = lock
        self._compiled_forward = None  # made at the first update when config.compile is on

    def update(self, batch: dict[str, Any]) -> dict[str, float]:
        """One gradient step on a time-major batch of unrolls (``[T + 1, B, ...]``, the keys of
        ``UNROLL_KEYS``). Keys: ``losses/total``, ``losses/policy``, ``losses/value``,
        ``losses/entropy``, ``losses/grad_norm``, ``charts/learning_rate``, ``charts/mean_rho``
        (the importance weights pi / mu before clipping) and ``charts/clipped_rho_fraction``."""
        c, reduce = self.config, self.reduction
        data = self.unroll_tensors(batch)
        obs, actions = data["obs"], data["actions"][:-1].long()
        terminated = data["terminated"][:-1].bool()
        truncated = data["truncated"][:-1].bool() & ~terminated

        check_precision(c.autocast, self.device, "IMPALA")
        with c.autocast_context(self.device):
            logits, values = self.forward(obs)
        logits, values = logits.float(), values.float()
        dist = Categorical(logits=logits[:-1])
        target_logp = dist.log_prob(actions)
        next_values = self.next_values(values, data["final_obs"][:-1], truncated)
        discounts = c.gamma * (~terminated).float()
        behaviour_logp = data["logp"][:-1].float()
        returns = vtrace(
            behaviour_logp,
            target_logp.detach(),
            data["rewards"][:-1].float(),
            values[:-1].detach(),
            values[-1].detach(),
            discounts,
            c.clip_rho_threshold,
            c.clip_pg_rho_threshold,
            c.clip_c_threshold,
            next_values=next_values,
            continuation=~(terminated | truncated),
        )
        pg_loss = reduce.mean(-(target_logp * returns.pg_advantages))
        baseline_loss = reduce.mean(0.5 * (returns.vs - values[:-1]).pow(2))
        entropy = reduce.mean(dist.entropy())
        loss = pg_loss + c.baseline_cost * baseline_loss - c.entropy_cost * entropy
        for group in self.optimizer.param_groups:
            group["lr"] = self.learning_rate
        grad_norm = self.gradient_step.step(loss, reduce)
        self.num_updates += 1
        with torch.no_grad():
            rhos = torch.exp(target_logp.detach() - behaviour_logp)
            mean_rho = float(reduce.mean(rhos))
            clipped = float(reduce.mean((rhos > 1.0).float()))
        return {
            "losses/total": float(loss.detach()),
            "losses/policy": float(pg_loss.detach()),
            "losses/value": float(baseline_loss.detach()),
            "losses/entropy": float(entropy.detach()),
            "losses/grad_norm": grad_norm,
            "charts/learning_rate": self.optimizer.param_groups[0]["lr"],
            "charts/mean_rho": mean_rho,
            "charts/clipped_rho_fraction": clipped,
        }

    def unroll_tensors(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        """``batch``'s ``UNROLL_KEYS`` as tensors on the learner's device, checked: every key
        there, and actions ``[T + 1, B]`` beside obs ``[T + 1, B, ...]``."""
        missing = [key for key in UNROLL_KEYS if key not in batch]
        if missing:
            raise ValueError(f"an unroll batch needs the keys {UNROLL_KEYS}; missing {missing}")
        data = {
            key: torch.as_tensor(np.asarray(batch[key]), device=self.device) for key in UNROLL_KEYS
        }
        obs, actions = data["obs"], data["actions"]
        if actions.shape != obs.shape[:2]:
            raise ValueError(
                f"unroll batch: obs {tuple(obs.shape)} is [T+1, B, ...], so actions must be "
                f"[T+1, B]; got {tuple(actions.shape)}"
            )
        return data

    def next_values(
        self, values: torch.Tensor, final_obs: torch.Tensor, truncated: torch.Tensor
    ) -> torch.Tensor:
        """V(x_{s+1}) for each step ``[T, B]``: the next step's value, except where a time limit
        cut the episode, which bootstraps from the episode's own last observation (Pardo et al.
        2018) rather than the next episode's first."""
        next_values = values[1:].detach().clone()
        if truncated.any():
            with torch.no_grad(), self.config.autocast_context(self.device):
                _, final_values = self.model(final_obs[truncated])
            next_values[truncated] = final_values.float()
        return next_values

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The model over ``[T + 1, B, ...]`` observations: compiled with ``config.compile``, the
        first call (the compiling) holding ``lock`` so that no other thread runs the model."""
        if not self.config.compile:
            return self.model(obs)
        if self._compiled_forward is None:
            compiled_forward = compiled(self.model)
            with self.lock if self.lock is not None else contextlib.nullcontext():
                out = compiled_forward(obs)
            self._compiled_forward = compiled_forward
            return out
        return self._compiled_forward(obs)

    @property
    def learning_rate(self) -> float:
        """The rate of the next update: ``learning_rate``, annealed by ``anneal_updates``."""
        c = self.config
        if c.anneal_updates is None:
            return c.learning_rate
        return c.learning_rate * max(0.0, 1.0 - self.num_updates / c.anneal_updates)

    def state_dict(self) -> dict[str, Any]:
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "num_updates": self.num_updates,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.num_updates = int(state["num_updates"])

    def to(self, device: "str | torch.device") -> None:
        """Move the model and the optimizer's state to ``device``."""
        self.device = torch.device(device)
        self.model.to(self.device)
        move_optimizer_state(self.optimizer, self.device)
