"""R2D2: Q-learning on replayed sequences with a recurrent network, stored state and burn-in.

Kapturowski et al. 2019, *Recurrent Experience Replay in Distributed Reinforcement Learning*
(ICLR), https://openreview.net/forum?id=r1lyTjAqYX. Ape-X's distributed prioritized replay
(Horgan et al. 2018) with an LSTM Q-network (``models.RecurrentQNetwork``) trained on fixed-length
sequences. Each sequence is stored with the recurrent state the actor had before its first step
(*stored state*, Sec. 3); the learner starts its unroll from that state and first runs the network
over a *burn-in* prefix without gradient, so the state it trains from is closer to what the current
network would have produced (Sec. 3). Targets are n-step double-Q returns under the invertible
*value rescaling* ``h`` of Pohlen et al. 2018 (Sec. 2)::

    y_t = h( sum_{k<n} gamma^k r_{t+k} + gamma^n h^-1( Q_target(s_{t+n}, a*) ) ),
    a*  = argmax_a Q_online(s_{t+n}, a)

and each sequence's priority mixes the max and the mean of its absolute TD errors (Sec. 2)::

    p = eta max_t |delta_t| + (1 - eta) mean_t |delta_t|,      eta = 0.9

Actors act epsilon-greedily with one epsilon each (``epsilon_i = 0.4 ** (1 + 7 i / (N - 1))``, as
Ape-X); those epsilons and the per-env recurrent states live with the actors or, SEED-style, with
the inference server that acts with this learner's ``model``. Nothing here steps an environment.

The sequence layout (stated once; ``SequenceReplay.sample`` returns it time-major)::

    L = burn_in + sequence_length + 1 rows (R2D2Config.stored_length); row t holds
      obs[t]         the observation acted from              [L, B, *obs_shape] (uint8 images ok)
      actions[t]     the action taken there                  int   [L, B]
      rewards[t]     the reward received after it            float [L, B]
      terminated[t]  the episode ended in a terminal state after step t   bool [L, B]
      truncated[t]   it was cut by a time limit after step t              bool [L, B]
      first[t]       obs[t] is an episode's first observation (LSTM state reset before t)
    plus, per sequence:
      state_h, state_c   the LSTM state (h, c) before row 0   float [B, H]

    rows [0, burn_in)                   burn-in: unrolled without gradient, not trained
    rows [burn_in, L - 1)               trained: sequence_length rows, one TD error each
    row  L - 1                          bootstrap only: its obs, first (and the state it leads to)

With same-step autoreset, after ``terminated[t] | truncated[t]`` row t + 1 is the next episode's
first observation (``first[t + 1]``). n-step windows are cut at row L - 1 (``nstep_targets``: a
window that would run past it bootstraps from the last row) and never cross an episode end:
a termination gives discount 0; a *truncation* has no stored final observation to bootstrap from,
so a trained row whose window reaches a truncated step is masked out of the loss and out of the
priority (CartPole truncates at 500 steps: at most n rows per episode lose their TD error). Actors
assemble sequences with ``stride = sequence_length - overlap`` steps between starts (R2D2: 80
trained steps, overlapping by 40), each with the state before its first row.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from workbench.checks import positive_int
from workbench.kernels import (
    double_q_action,
    inverse_value_rescale,
    nstep_targets,
    sequence_priority,
    value_rescale,
)
from workbench.learners.base import (
    GradientStep,
    Precision,
    Reduction,
    check_precision,
    move_optimizer_state,
)
from workbench.models import RecurrentQNetwork
from workbench.replay import SequenceReplay

__all__ = ["R2D2", "R2D2Config", "SEQUENCE_KEYS", "STATE_KEYS"]

#: Per-step keys of a sequence batch, each ``[L, B, ...]`` (time-major).
SEQUENCE_KEYS = ("obs", "actions", "rewards", "terminated", "truncated", "first")
#: Per-sequence keys: the stored LSTM state before row 0, each ``[B, H]``.
STATE_KEYS = ("state_h", "state_c")


@dataclass
class R2D2Config(Precision):
    """R2D2 hyperparameters; defaults from Kapturowski et al. 2019, Table 2 (and Sec. 2-3).

    The precision fields (``Precision``) are V-trace's levers: ``autocast`` None or
    ``"bfloat16"`` around the networks' passes (online, target, burn-in; targets, TD errors and
    the loss in float32) and ``channels_last``, which converts the model the server acts with
    too; no ``compile``. On the AVX-512 bf16 EPYC both made a Pong update 3.1x faster."""

    gamma: float = 0.997
    """Discount factor."""
    n_step: int = 5
    """Steps per return window (windows are cut at the sequence's last row)."""
    burn_in: int = 40
    """Rows unrolled from the stored state without gradient before the trained rows (Sec. 3)."""
    sequence_length: int = 80
    """Trained rows per sequence, after the burn-in (the paper's m = 80)."""
    overlap: int = 40
    """Trained rows that adjacent sequences of one env share (the paper's 40): actors start a
    sequence every ``stride = sequence_length - overlap`` steps. The learner does not use it."""
    batch_size: int = 64
    """Sequences per gradient step."""
    learning_rate: float = 1e-4
    adam_eps: float = 1e-3
    target_update_interval: int = 2500
    """Learner updates between copies of the online network into the target network."""
    priority_eta: float = 0.9
    """eta of the sequence priority ``eta max|delta| + (1 - eta) mean|delta|``."""
    priority_alpha: float = 0.9
    """Priority exponent of the replay."""
    importance_beta: float = 0.6
    """Importance-sampling exponent of the replay (R2D2 keeps it fixed)."""
    priority_eps: float = 1e-6
    """Added to priorities so that no sequence has probability 0."""
    replay_capacity: int = 100_000
    """Sequences held (Table 2: 4M observations as 1e5 part-overlapping sequences)."""
    value_rescale_eps: float = 1e-3
    """eps of ``h(x) = sign(x)(sqrt(|x| + 1) - 1) + eps x``."""
    value_rescaling: bool = True
    """Targets under ``h`` (Sec. 2); False: plain n-step double-Q targets."""
    double_q: bool = True
    """The online network picks ``a*``, the target network values it (van Hasselt et al. 2016)."""
    max_grad_norm: float | None = 40.0
    """Clip the global gradient norm (Ape-X's 40; not in R2D2's Table 2); None: no clipping."""

    def __post_init__(self) -> None:
        self.check_fields()
        self.refuse_float16_and_compile()
        for name in (
            "n_step",
            "sequence_length",
            "batch_size",
            "target_update_interval",
            "replay_capacity",
        ):
            positive_int(getattr(self, name), f"R2D2Config.{name}")
        for name in ("burn_in", "overlap"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
                raise ValueError(f"R2D2Config.{name} must be an int >= 0 (0: none), got {value!r}")
        if self.sequence_length <= self.n_step:
            raise ValueError(
                f"R2D2Config.sequence_length={self.sequence_length} must exceed n_step="
                f"{self.n_step}, or no trained row gets a full n-step window; raise "
                "sequence_length or lower n_step"
            )
        if self.overlap >= self.sequence_length:
            raise ValueError(
                f"R2D2Config.overlap={self.overlap} must be < sequence_length="
                f"{self.sequence_length} (sequences start every sequence_length - overlap steps); "
                "lower overlap"
            )
        if self.replay_capacity < self.batch_size:
            raise ValueError(
                f"R2D2Config.replay_capacity {self.replay_capacity} < batch_size "
                f"{self.batch_size}: the replay must hold at least one batch of sequences"
            )
        if not 0.0 <= self.gamma <= 1.0:
            raise ValueError(f"R2D2Config.gamma must be in [0, 1], got {self.gamma}")
        if not 0.0 <= self.priority_eta <= 1.0:
            raise ValueError(f"R2D2Config.priority_eta must be in [0, 1], got {self.priority_eta}")
        for name in ("priority_alpha", "importance_beta", "priority_eps", "value_rescale_eps"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"R2D2Config.{name} must be finite and >= 0, got {value}")
        if not self.learning_rate > 0 or not self.adam_eps > 0:
            raise ValueError(
                f"R2D2Config.learning_rate and adam_eps must be > 0, got {self.learning_rate}, "
                f"{self.adam_eps}"
            )
        if self.max_grad_norm is not None and not self.max_grad_norm > 0:
            raise ValueError(
                f"R2D2Config.max_grad_norm must be > 0, or None for no clipping; got "
                f"{self.max_grad_norm}"
            )

    @property
    def stored_length(self) -> int:
        """L = burn_in + sequence_length + 1: the rows of a stored sequence (module docstring)."""
        return self.burn_in + self.sequence_length + 1

    @property
    def stride(self) -> int:
        """Steps between the starts of an env's consecutive sequences: sequence_length - overlap."""
        return self.sequence_length - self.overlap


class R2D2:
    """The R2D2 learner: one gradient step per sampled batch of sequences.

    Args:
        model: the online ``models.RecurrentQNetwork``; moved to ``device`` and trained in place.
            This same object is what an inference server acts with (SEED RL: actors hold no
            parameters), so it is the learner's current network at every step.
        config: an ``R2D2Config``.
        device: where the networks learn.
        seed: seeds the sampling of the replay ``make_replay`` builds.

    Attributes:
        model: the online network. target_model: its periodically copied target (no gradient).
        optimizer: Adam over ``model``'s parameters. num_updates: gradient steps taken.
        priorities: each sequence's new priority after the last update, float64 numpy ``[B]``.
    """

    batch_axis = 1  # time-major sequences [L, B, ...] (the stored states [B, H] split with them)

    def __init__(
        self,
        model: RecurrentQNetwork,
        config: R2D2Config | None = None,
        *,
        device: "str | torch.device" = "cpu",
        seed: int | None = None,
        lock: Any = None,
    ) -> None:
        if not isinstance(model, RecurrentQNetwork):
            raise TypeError(
                f"R2D2 needs a workbench.models.RecurrentQNetwork, got {type(model).__name__}"
            )
        self.config = config = config or R2D2Config()
        if not isinstance(config, R2D2Config):
            raise TypeError(f"config must be an R2D2Config, got {type(config).__name__}")
        self.device = torch.device(device)
        self.seed = seed
        self.model = model.to(self.device)
        if config.channels_last:  # before the target's copy and the optimizer: both hold NHWC
            self.model.to(memory_format=torch.channels_last)
        # A deep copy leaves a cuDNN LSTM's weights outside one contiguous chunk (compacted again
        # at every call: "RNN module weights are not part of single contiguous chunk" on the
        # H200); moving it, even where it already is, re-flattens them.
        self.target_model = copy.deepcopy(model).requires_grad_(False).to(self.device)
        self.optimizer = torch.optim.Adam(
            model.parameters(), lr=config.learning_rate, eps=config.adam_eps
        )
        # The lock is held while the optimizer writes (an inference server may be reading).
        self.gradient_step = GradientStep(
            self.optimizer, max_grad_norm=config.max_grad_norm, lock=lock
        )
        self.reduction = Reduction()
        self.num_updates = 0
        self.priorities: np.ndarray | None = None

    def make_replay(self) -> SequenceReplay:
        """The ``SequenceReplay`` the config asks for (capacity in sequences, alpha, beta, eps)."""
        c = self.config
        return SequenceReplay(
            c.replay_capacity,
            alpha=c.priority_alpha,
            beta=c.importance_beta,
            eps=c.priority_eps,
            per_sequence_keys=STATE_KEYS,
            seed=self.seed,
        )

    # --- one gradient step ------------------------------------------------------------------------

    def update(self, batch: Mapping[str, Any]) -> dict[str, float]:
        """One gradient step on a time-major batch of sequences (module docstring: the layout;
        ``SequenceReplay.sample`` returns it).

        Args:
            batch: ``SEQUENCE_KEYS`` ``[L, B, ...]`` and ``STATE_KEYS`` ``[B, H]``, numpy or torch,
                and optionally ``weights``: float ``[B]`` importance-sampling weights (default 1).

        Returns:
            floats keyed ``losses/...`` and ``charts/...``. Each sequence's new priority (float64
            numpy ``[B]``, for ``update_priorities``) is in ``self.priorities`` afterwards.
        """
        loss, priorities, metrics = self.compute_loss(batch, batch.get("weights"))
        metrics["losses/grad_norm"] = self.gradient_step.step(loss, self.reduction)
        self.num_updates += 1
        if self.num_updates % self.config.target_update_interval == 0:
            self.target_model.load_state_dict(self.model.state_dict())
        metrics["charts/updates"] = float(self.num_updates)
        self.priorities = priorities
        return metrics

    def compute_loss(
        self, batch: Mapping[str, Any], weights: Any = None
    ) -> tuple[torch.Tensor, np.ndarray, dict[str, float]]:
        """The loss ``learn`` minimises, with its graph, the new priorities and the metrics.

        Loss (R2D2 uses the squared TD error of the rescaled values): per sequence b, the mean over
        its usable trained rows of ``0.5 delta_t^2``, ``delta_t = y_t - Q(s_t, a_t)``; then the
        mean over the batch of ``w_b`` times it. A sequence with no usable row adds 0.
        """
        b = self._tensors(batch)
        B = b["actions"].shape[1]
        if weights is None:
            w = torch.ones(B, device=self.device)
        else:
            w = torch.as_tensor(weights, dtype=torch.float32).to(self.device).reshape(-1)
            if w.shape != (B,):
                raise ValueError(
                    f"weights must be float [B] = [{B}] (one per sequence, as "
                    f"sample() returns them), got {list(w.shape)}"
                )
        q_taken, targets, usable = self._td(b)
        td = targets - q_taken
        mask = usable.to(td.dtype)
        count = mask.sum(0).clamp(min=1.0)
        sequence_loss = (0.5 * td.square() * mask).sum(0) / count
        loss = self.reduction.mean(w * sequence_loss)
        priorities = self._priorities(td.detach(), usable)
        rows = mask.sum().clamp(min=1.0)
        metrics = {
            "losses/q": loss.item(),
            "charts/q_values": ((q_taken.detach() * mask).sum() / rows).item(),
            "charts/td_abs": ((td.detach().abs() * mask).sum() / rows).item(),
            "charts/usable_rows": mask.mean().item(),
            "charts/priority": float(priorities.mean()),
        }
        return loss, priorities, metrics

    @torch.no_grad()
    def sequence_priorities(self, batch: Mapping[str, Any]) -> np.ndarray:
        """Priorities of sequences under the current networks, float64 numpy ``[B]``, without
        training: the initial priorities of freshly assembled sequences (R2D2 Sec. 2, as Ape-X's
        actors compute them). ``batch`` is time-major as in ``learn``."""
        q_taken, targets, usable = self._td(self._tensors(batch))
        return self._priorities(targets - q_taken, usable)

    @torch.no_grad()
    def td_errors(self, batch: Mapping[str, Any]) -> dict[str, torch.Tensor]:
        """What the loss is made of, over the trained rows ``burn_in .. L - 2`` (S =
        ``sequence_length`` rows), without gradient: ``q`` = ``Q(s_t, a_t)``, ``target`` = ``y_t``,
        ``td`` = ``y_t - Q(s_t, a_t)`` (all float ``[S, B]``, rescaled values when
        ``value_rescaling``), ``usable`` bool ``[S, B]`` (False: the window reaches a
        truncation)."""
        q_taken, targets, usable = self._td(self._tensors(batch))
        return {"q": q_taken, "target": targets, "td": targets - q_taken, "usable": usable}

    def _priorities(self, td: torch.Tensor, usable: torch.Tensor) -> np.ndarray:
        return sequence_priority(td, usable, self.config.priority_eta).cpu().double().numpy()

    # --- targets ----------------------------------------------------------------------------------

    def _td(self, b: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(q_taken, targets, usable)``, each ``[S, B]`` over the trained rows
        ``burn_in .. L - 2`` (S = sequence_length); only ``q_taken`` carries gradient."""
        c = self.config
        burn, L = c.burn_in, c.stored_length
        obs, first = b["obs"], b["first"]
        stored = (b["state_h"], b["state_c"])
        state = stored
        check_precision(c.autocast, self.device, "R2D2")
        with c.autocast_context(self.device):
            if burn > 0:  # burn-in (Sec. 3): the state from the stored one, no gradient
                with torch.no_grad():
                    _, state = self.model(obs[:burn], stored, first[:burn])
            q_online, _ = self.model(obs[burn:], state, first[burn:])  # rows burn .. L-1
            with torch.no_grad():
                q_target, _ = self.target_model(obs, stored, first)  # all L rows, stored state
        q_online, q_target = q_online.float(), q_target.float()
        q_taken = q_online[:-1].gather(-1, b["actions"][burn : L - 1].unsqueeze(-1)).squeeze(-1)
        with torch.no_grad():
            q_next = q_target[burn + 1 :]  # Q_target(s_{t+1}) for trained rows t
            best = double_q_action(q_next, q_online[1:].detach() if c.double_q else None)
            next_values = q_next.gather(-1, best.unsqueeze(-1)).squeeze(-1)  # after step t
            if c.value_rescaling:
                next_values = inverse_value_rescale(next_values, c.value_rescale_eps)
            terminated = b["terminated"][burn : L - 1]
            truncated = b["truncated"][burn : L - 1]
            rewards = b["rewards"][burn : L - 1]
            discounts = c.gamma * (~terminated).to(rewards.dtype)
            targets = nstep_targets(rewards, discounts, next_values.to(rewards.dtype), c.n_step)
            if c.value_rescaling:
                targets = value_rescale(targets, c.value_rescale_eps)
            usable = usable_rows(terminated, truncated, c.n_step)
        return q_taken, targets.to(q_taken.dtype), usable

    # --- batch checks -----------------------------------------------------------------------------

    def _tensors(self, batch: Mapping[str, Any]) -> dict[str, torch.Tensor]:
        """The batch as tensors on the device, checked against the layout."""
        c, model = self.config, self.model
        missing = [key for key in (*SEQUENCE_KEYS, *STATE_KEYS) if key not in batch]
        L = c.stored_length
        if missing:
            raise ValueError(
                f"R2D2: the batch lacks {missing}; it needs per-step {list(SEQUENCE_KEYS)} "
                f"[L, B, ...] (time-major, L = burn_in + sequence_length + 1 = {L}) and "
                f"per-sequence {list(STATE_KEYS)} [B, lstm_size] (SequenceReplay.sample gives them)"
            )
        b = {
            key: torch.as_tensor(batch[key]).to(self.device)
            for key in (*SEQUENCE_KEYS, *STATE_KEYS)
        }
        obs = b["obs"]
        obs_shape = tuple(model.obs_shape)
        if (
            obs.dim() != len(obs_shape) + 2
            or tuple(obs.shape[2:]) != obs_shape
            or obs.shape[0] != L
        ):
            raise ValueError(
                f"R2D2: obs must be time-major [L, B, *obs_shape] = [{L}, B, "
                f"{', '.join(map(str, obs_shape))}] (L = burn_in {c.burn_in} + sequence_length "
                f"{c.sequence_length} + 1), got {list(obs.shape)}; assemble sequences of "
                "config.stored_length rows, and transpose batch-major [B, L, ...] with "
                "x.transpose(0, 1)"
            )
        B = obs.shape[1]
        for key in SEQUENCE_KEYS[1:]:
            if tuple(b[key].shape) != (L, B):
                raise ValueError(
                    f"R2D2: {key} must be [L, B] = [{L}, {B}] like obs, got {list(b[key].shape)}"
                )
        for key in STATE_KEYS:
            if tuple(b[key].shape) != (B, model.lstm_size):
                raise ValueError(
                    f"R2D2: {key} must be [B, lstm_size] = [{B}, {model.lstm_size}] (the LSTM "
                    f"state before row 0), got {list(b[key].shape)}"
                )
        dtype = model.advantage_head.weight.dtype
        b["actions"] = b["actions"].long()
        b["rewards"] = b["rewards"].to(torch.float32)
        for key in ("terminated", "truncated", "first"):
            b[key] = b[key].to(torch.bool)
        for key in STATE_KEYS:
            b[key] = b[key].to(dtype)
        done = b["terminated"] | b["truncated"]
        if bool((b["first"][1:] & ~done[:-1]).any()) or bool(
            (b["truncated"][:-1] & ~b["first"][1:]).any()
        ):
            raise ValueError(
                "R2D2: first[t + 1] must be True after a truncation at row t, and only after an "
                "episode ended at row t (terminated or truncated): first marks the next episode's "
                "first observation, one row after the end (same-step autoreset); check the "
                "sequence assembly for an off-by-one"
            )
        return b

    # --- checkpoints ------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Networks, optimizer and the update counter (not the replay)."""
        return {
            "model": self.model.state_dict(),
            "target_model": self.target_model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "num_updates": self.num_updates,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.target_model.load_state_dict(state["target_model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.num_updates = int(state["num_updates"])

    def to(self, device: "str | torch.device") -> None:
        """Move both networks and the optimizer's state to ``device``."""
        self.device = torch.device(device)
        self.model.to(self.device)
        self.target_model.to(self.device)
        move_optimizer_state(self.optimizer, self.device)

    def __repr__(self) -> str:
        c = self.config
        return (
            f"R2D2(burn_in={c.burn_in}, sequence_length={c.sequence_length}, n_step={c.n_step}, "
            f"{'double' if c.double_q else 'single'}, "
            f"{'rescaled' if c.value_rescaling else 'unrescaled'}, lstm={self.model.lstm_size})"
        )


def usable_rows(terminated: torch.Tensor, truncated: torch.Tensor, n: int) -> torch.Tensor:
    """bool ``[S, B]``: row t's n-step window (cut at S, stopped by an episode end) does not reach
    a truncated step. A truncation has no stored final observation, so such a row's target would
    bootstrap from the next episode's first one: it is left out of the loss and the priority."""
    S = terminated.shape[0]

    def ahead(x: torch.Tensor, k: int) -> torch.Tensor:
        """``x[t + k]`` at row t, False where ``t + k >= S``."""
        return torch.cat([x[k:], torch.zeros_like(x[:k])], dim=0)

    cut = truncated & ~terminated  # a termination and a truncation at once: terminal, usable
    ended = terminated | truncated
    usable = torch.ones_like(terminated)
    alive = torch.ones_like(terminated)  # the window of row t still reaches step t + k
    for k in range(min(n, S)):
        usable &= ~(alive & ahead(cut, k))
        alive &= ~ahead(ended, k)
    return usable
