"""Policy heads: ``ActorCritic`` (A2C, PPO, V-trace: a categorical policy and a value on one trunk),
and the deterministic actor and critic of DDPG (``DeterministicPolicy``, ``ContinuousQ``)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn
from torch.distributions import Categorical

from workbench.models.trunks import (
    MLP,
    Shape,
    check_num_actions,
    flatten_batch,
    orthogonal_init,
    resolve_trunk,
)

__all__ = ["ActorCritic", "ContinuousQ", "DeterministicPolicy", "action_bounds"]


class ActorCritic(nn.Module):
    """A discrete-action policy and a state-value head on a shared trunk, as in A3C (Mnih et al.
    2016, "Asynchronous Methods for Deep RL", Sec. 8) and PPO (Schulman et al. 2017).

    Initialisation follows OpenAI baselines / CleanRL (Huang et al. 2022, "The 37 Implementation
    Details of PPO", detail 2): orthogonal weights with gain sqrt(2) in the trunk, 0.01 on the
    policy head (so the first policy is near uniform and explores), 1 on the value head.

    Args:
        obs_shape: one observation's shape, e.g. ``(4, 84, 84)`` or ``(4,)``.
        num_actions: A, the number of discrete actions.
        trunk: ``"auto"``, ``"cnn"``, ``"mlp"`` (see ``make_trunk``) or a module with
            ``.output_size``.
        hidden: hidden sizes of an MLP trunk (tanh, as in PPO).
    """

    def __init__(
        self,
        obs_shape: Sequence[int],
        num_actions: int,
        *,
        trunk: str | nn.Module = "auto",
        hidden: Sequence[int] = (64, 64),
    ) -> None:
        super().__init__()
        self.obs_shape: Shape = tuple(int(d) for d in obs_shape)
        self.num_actions = check_num_actions(num_actions)
        self.output_size = self.num_actions
        self.trunk = resolve_trunk(self.obs_shape, trunk, hidden, nn.Tanh)
        self.policy_head = nn.Linear(self.trunk.output_size, self.num_actions)
        self.value_head = nn.Linear(self.trunk.output_size, 1)
        orthogonal_init(self.policy_head, 0.01)
        orthogonal_init(self.value_head, 1.0)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``[*lead, *obs_shape]`` -> (logits ``[*lead, A]``, value ``[*lead]``).

        ``lead`` is ``[B]`` or ``[T, B]``.
        """
        flat, lead = flatten_batch(obs, self.obs_shape)
        features = self.trunk(flat)
        logits = self.policy_head(features)
        value = self.value_head(features).squeeze(-1)
        return logits.reshape(*lead, self.num_actions), value.reshape(lead)

    @torch.no_grad()
    def act(self, obs: torch.Tensor, deterministic: bool = False) -> dict[str, torch.Tensor]:
        """Choose actions for ``[*lead, *obs_shape]`` observations (what samplers call).

        Returns ``action`` (int64 ``[*lead]``), its behaviour log-probability ``logp`` (``[*lead]``,
        kept for PPO ratios and V-trace) and ``value`` (``[*lead]``, for truncation bootstraps).
        ``deterministic`` takes the most probable action instead of sampling.
        """
        logits, value = self(obs)
        dist = Categorical(logits=logits)
        action = logits.argmax(-1) if deterministic else dist.sample()
        return {"action": action, "logp": dist.log_prob(action), "value": value}

    def evaluate(self, obs: torch.Tensor, actions: torch.Tensor) -> dict[str, torch.Tensor]:
        """Log-probability, entropy and value of ``actions`` taken at ``obs`` (with gradients).

        Args:
            obs: ``[T, B, *obs_shape]`` (or ``[B, *obs_shape]``).
            actions: int ``[T, B]`` (or ``[B]``): the leading dimensions of ``obs``.

        Returns ``logp``, ``entropy`` and ``value``, each float ``[T, B]`` (or ``[B]``).
        """
        logits, value = self(obs)
        if actions.shape != logits.shape[:-1]:
            raise ValueError(
                f"actions of shape {tuple(actions.shape)} do not match the observations' leading "
                f"dimensions {tuple(logits.shape[:-1])}; pass one action index per observation"
            )
        dist = Categorical(logits=logits)
        return {"logp": dist.log_prob(actions.long()), "entropy": dist.entropy(), "value": value}


def action_bounds(
    action_low: "Sequence[float] | torch.Tensor", action_high: "Sequence[float] | torch.Tensor"
) -> tuple[torch.Tensor, torch.Tensor]:
    """The action bounds as float32 ``[act_dim]`` tensors, checked: finite, ``low < high``."""
    low = torch.as_tensor(action_low, dtype=torch.float32).detach().clone().reshape(-1)
    high = torch.as_tensor(action_high, dtype=torch.float32).detach().clone().reshape(-1)
    if low.shape != high.shape or low.numel() == 0:
        raise ValueError(
            f"action_low {tuple(low.shape)} and action_high {tuple(high.shape)} need one bound per "
            "action dimension each: pass env.single_action_space.low and .high"
        )
    if not (torch.isfinite(low).all() and torch.isfinite(high).all() and (low < high).all()):
        raise ValueError(
            f"action bounds must be finite with low < high, got low={low.tolist()}, "
            f"high={high.tolist()}; a deterministic tanh policy needs a bounded Box action space"
        )
    return low, high


class DeterministicPolicy(nn.Module):
    """DDPG's actor ``mu(s)`` (Lillicrap et al. 2016, "Continuous control with deep RL",
    https://arxiv.org/abs/1509.02971, Sec. 7): a ReLU MLP whose last layer goes through tanh and
    is scaled to the action bounds, ``mu(s) = mid + half * tanh(f(s))`` with
    ``mid = (high + low) / 2``, ``half = (high - low) / 2``.

    The hidden layers have orthogonal init (gain sqrt(2), like every ``MLP`` trunk here); the last
    layer is drawn from U(-3e-3, 3e-3) as in the paper, so the first policy is near the middle of
    the action range and tanh is far from saturation.

    Args:
        obs_dim: size of one observation vector.
        action_low, action_high: ``[act_dim]`` bounds (``env.single_action_space.low`` / ``.high``),
            stored as buffers: they move with ``.to(device)`` and travel in ``state_dict``.
        hidden: hidden layer sizes (256, 256 as in TD3, Fujimoto et al. 2018).

    ``forward(obs)``: ``[B, obs_dim]`` or ``[T, B, obs_dim]`` -> float32 ``[*lead, act_dim]``
    inside the bounds.
    """

    def __init__(
        self,
        obs_dim: int,
        action_low: "Sequence[float] | torch.Tensor",
        action_high: "Sequence[float] | torch.Tensor",
        hidden: Sequence[int] = (256, 256),
    ) -> None:
        super().__init__()
        low, high = action_bounds(action_low, action_high)
        self.obs_shape: Shape = (int(obs_dim),)
        self.action_dim = int(low.numel())
        self.output_size = self.action_dim
        self.trunk = MLP(int(obs_dim), hidden, nn.ReLU)
        self.head = nn.Linear(self.trunk.output_size, self.action_dim)
        nn.init.uniform_(self.head.weight, -3e-3, 3e-3)
        nn.init.uniform_(self.head.bias, -3e-3, 3e-3)
        self.register_buffer("action_low", low)
        self.register_buffer("action_high", high)

    @property
    def action_scale(self) -> torch.Tensor:
        """``(high - low) / 2``, ``[act_dim]``: tanh's unit in action units."""
        return (self.action_high - self.action_low) / 2

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        flat, lead = flatten_batch(obs, self.obs_shape)
        squashed = torch.tanh(self.head(self.trunk(flat)))
        action = (self.action_high + self.action_low) / 2 + self.action_scale * squashed
        return action.reshape(*lead, self.action_dim)


class ContinuousQ(nn.Module):
    """DDPG's critic ``Q(s, a)`` for continuous actions (Lillicrap et al. 2016, Sec. 7): a ReLU
    MLP on the concatenation ``[s, a]`` (the action enters at the input, as in TD3, Fujimoto et al.
    2018, rather than at the second layer as in the paper), one linear output drawn from
    U(-3e-3, 3e-3).

    Args:
        obs_dim: size of one observation vector. action_dim: size of one action vector.
        hidden: hidden layer sizes.

    ``forward(obs, actions)``: ``[*lead, obs_dim]`` and ``[*lead, action_dim]`` (lead ``[B]`` or
    ``[T, B]``) -> float32 ``[*lead]``.
    """

    def __init__(self, obs_dim: int, action_dim: int, hidden: Sequence[int] = (256, 256)) -> None:
        super().__init__()
        if isinstance(action_dim, bool) or int(action_dim) != action_dim or action_dim < 1:
            raise ValueError(
                f"action_dim must be a positive int (env.single_action_space.shape[0]), "
                f"got {action_dim!r}"
            )
        self.obs_shape: Shape = (int(obs_dim),)
        self.action_dim = int(action_dim)
        self.output_size = 1
        self.trunk = MLP(int(obs_dim) + self.action_dim, hidden, nn.ReLU)
        self.head = nn.Linear(self.trunk.output_size, 1)
        nn.init.uniform_(self.head.weight, -3e-3, 3e-3)
        nn.init.uniform_(self.head.bias, -3e-3, 3e-3)

    def forward(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        flat, lead = flatten_batch(obs, self.obs_shape)
        if tuple(actions.shape) != (*lead, self.action_dim):
            raise ValueError(
                f"actions of shape {tuple(actions.shape)} do not match observations "
                f"{tuple(obs.shape)}: "
                f"expected {(*lead, self.action_dim)}, one action vector per observation "
                f"(for a 1-D action space, actions[..., None])"
            )
        dtype = self.head.weight.dtype  # observations may arrive as float64 (numpy)
        features = self.trunk(
            torch.cat([flat.to(dtype), actions.reshape(-1, self.action_dim).to(dtype)], dim=1)
        )
        return self.head(features).squeeze(-1).reshape(lead)
