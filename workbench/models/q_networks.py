"""Action-value heads: ``QNetwork`` (DQN, dueling, C51, Ape-X), ``EpsilonGreedy``, what a
sampler collects DQN's data with, and ``QPolicy``, what an evaluation plays."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from workbench.models.trunks import (
    Shape,
    check_num_actions,
    flatten_batch,
    orthogonal_init,
    resolve_trunk,
)

__all__ = [
    "EVALUATION_EPSILON",
    "EpsilonGreedy",
    "QNetwork",
    "QPolicy",
    "epsilon_greedy",
    "evaluation_actions",
]


def epsilon_greedy(q: torch.Tensor, epsilon: float | torch.Tensor) -> torch.Tensor:
    """Epsilon-greedy actions int64 ``[*lead]`` from ``q [*lead, A]``; ``epsilon`` broadcasts to
    ``lead`` (one per environment ``[B]``: Ape-X's per-actor epsilons). As ``QNetwork.act``."""
    lead = q.shape[:-1]
    epsilon = torch.as_tensor(epsilon, dtype=torch.float32, device=q.device)
    try:
        if torch.broadcast_shapes(epsilon.shape, lead) != lead:
            raise RuntimeError
    except RuntimeError:
        raise ValueError(
            f"epsilon of shape {tuple(epsilon.shape)} does not broadcast to the observations' "
            f"leading dimensions {tuple(lead)}; pass a float or one epsilon per environment [B]"
        ) from None
    greedy = q.argmax(-1)
    random = torch.randint(q.shape[-1], lead, device=q.device)
    explore = torch.rand(lead, device=q.device) < epsilon
    return torch.where(explore, random, greedy)


class QNetwork(nn.Module):
    """Action values for DQN (Mnih et al. 2015) and its variants, on a trunk.

    * ``dueling`` (Wang et al. 2016, "Dueling Network Architectures for Deep RL", Eq. 9):
      ``Q(s, a) = V(s) + A(s, a) - mean_a' A(s, a')``; subtracting the mean makes V and A
      identifiable. Both streams are linear layers on the trunk's features (the paper gives each
      stream its own 512-unit layer; sharing the trunk's keeps one trunk for every head).
    * ``num_atoms > 1``: categorical returns (Bellemare et al. 2017, "A Distributional Perspective
      on RL", C51): for each action, probabilities over ``num_atoms`` evenly spaced returns
      ``support`` in ``[v_min, v_max]``; ``Q(s, a) = sum_i p_i(s, a) z_i``.
    * both: dueling over each atom's logits, then a softmax over atoms (Hessel et al. 2018,
      "Rainbow", Eq. 3 and the text around it).

    Heads use orthogonal init with gain 1; the trunk, gain sqrt(2) (see ``ActorCritic``).

    Args:
        obs_shape: one observation's shape. num_actions: A.
        dueling: use the dueling decomposition.
        num_atoms: 1 for scalar Q-values; 51 in C51.
        v_min, v_max: the support's ends (used only when ``num_atoms > 1``).
        trunk: ``"auto"``, ``"cnn"``, ``"mlp"`` or a module with ``.output_size``.
        hidden: hidden sizes of an MLP trunk (ReLU, as in DQN).
    """

    def __init__(
        self,
        obs_shape: Sequence[int],
        num_actions: int,
        *,
        dueling: bool = False,
        num_atoms: int = 1,
        v_min: float = -10.0,
        v_max: float = 10.0,
        trunk: str | nn.Module = "auto",
        hidden: Sequence[int] = (64, 64),
    ) -> None:
        super().__init__()
        if int(num_atoms) != num_atoms or num_atoms < 1:
            raise ValueError(f"num_atoms must be a positive int (51 for C51), got {num_atoms!r}")
        if num_atoms > 1 and not v_min < v_max:
            raise ValueError(f"need v_min < v_max for a categorical support, got {v_min}, {v_max}")
        self.obs_shape: Shape = tuple(int(d) for d in obs_shape)
        self.num_actions = check_num_actions(num_actions)
        self.output_size = self.num_actions
        self.dueling = bool(dueling)
        self.num_atoms = int(num_atoms)
        self.trunk = resolve_trunk(self.obs_shape, trunk, hidden, nn.ReLU)
        features = self.trunk.output_size
        self.advantage_head = nn.Linear(features, self.num_actions * self.num_atoms)
        self.value_head = nn.Linear(features, self.num_atoms) if self.dueling else None
        orthogonal_init(self.advantage_head, 1.0)
        if self.value_head is not None:
            orthogonal_init(self.value_head, 1.0)
        # A buffer, not a parameter: it moves with .to(device) and is saved, but is not trained.
        # Scalar Q-networks keep a placeholder so every QNetwork has the same attributes.
        if self.num_atoms > 1:
            support = torch.linspace(v_min, v_max, self.num_atoms)
        else:
            support = torch.zeros(1)
        self.register_buffer("support", support)

    def _logits(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Size]:
        """``[*lead, *obs_shape]`` -> (``[N, A, num_atoms]``, lead): Q-values or atom logits."""
        flat, lead = flatten_batch(obs, self.obs_shape)
        features = self.trunk(flat)
        out = self.advantage_head(features).view(-1, self.num_actions, self.num_atoms)
        if self.value_head is not None:
            value = self.value_head(features).unsqueeze(1)  # [N, 1, num_atoms]
            out = value + out - out.mean(dim=1, keepdim=True)  # Wang et al. 2016, Eq. 9
        return out, lead

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """``[*lead, *obs_shape]`` -> Q-values ``[*lead, A]``; lead is [B] or [T, B]."""
        out, lead = self._logits(obs)
        if self.num_atoms == 1:
            q = out.squeeze(-1)
        else:
            q = (out.softmax(-1) * self.support).sum(-1)
        return q.reshape(*lead, self.num_actions)

    def distribution(self, obs: torch.Tensor, *, log: bool = False) -> torch.Tensor:
        """C51 return distribution: probabilities ``[*lead, A, num_atoms]`` over ``support``.

        ``log=True`` gives log-probabilities from ``log_softmax``, which stay finite where a
        probability underflows to 0, for the cross-entropy loss of Bellemare et al. 2017, Alg. 1.
        """
        if self.num_atoms == 1:
            raise ValueError(
                "distribution() needs a categorical QNetwork: pass num_atoms > 1 (51 for C51)"
            )
        out, lead = self._logits(obs)
        probs = out.log_softmax(-1) if log else out.softmax(-1)
        return probs.reshape(*lead, self.num_actions, self.num_atoms)

    @torch.no_grad()
    def act(
        self, obs: torch.Tensor, epsilon: float | torch.Tensor = 0.0
    ) -> dict[str, torch.Tensor]:
        """Epsilon-greedy actions for ``[*lead, *obs_shape]`` observations (what samplers call).

        Args:
            obs: ``[B, *obs_shape]`` or ``[T, B, *obs_shape]``.
            epsilon: probability of a uniformly random action: a float, or a tensor that
                broadcasts to the leading dimensions, e.g. ``[B]`` with one epsilon per actor
                (Ape-X, Horgan et al. 2018, Sec. 4.1: ``epsilon_i = 0.4 ** (1 + 7 i / (N - 1))``).

        Returns ``action`` (int64 ``[*lead]``) and ``q`` (``[*lead, A]``).
        """
        q = self(obs)
        return {"action": epsilon_greedy(q, epsilon), "q": q}


class EpsilonGreedy(nn.Module):
    """A ``QNetwork`` that acts epsilon-greedily with its own, settable epsilon: what a sampler
    collects with in DQN (``policy.act(obs)`` takes no epsilon argument).

    ``epsilon`` is a buffer, so it travels with ``state_dict`` to the copies a ``ParallelSampler``'s
    workers hold, and it may be one value or one per environment ``[B]`` (Ape-X's per-actor
    epsilons). ``forward`` and every attribute of the Q-network are reachable through ``q_network``.
    """

    def __init__(self, q_network: QNetwork, epsilon: float | torch.Tensor = 1.0) -> None:
        super().__init__()
        self.q_network = q_network
        self.register_buffer("epsilon", torch.as_tensor(epsilon, dtype=torch.float32).clone())

    def set_epsilon(self, epsilon: float | torch.Tensor) -> None:
        """Set epsilon in place (a sampler holding this module sees it at its next collect)."""
        value = torch.as_tensor(epsilon, dtype=torch.float32, device=self.epsilon.device)
        if value.shape != self.epsilon.shape:
            self.epsilon = value.clone()
        else:
            self.epsilon.copy_(value)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.q_network(obs)

    @torch.no_grad()
    def act(self, obs: torch.Tensor) -> dict[str, torch.Tensor]:
        return self.q_network.act(obs, self.epsilon)


EVALUATION_EPSILON = 0.001
"""The evaluation epsilon of Dopamine's Atari Rainbow (``rainbow.gin``: ``epsilon_eval = 0.001``):
a nearly greedy agent that a deterministic game cannot trap in a loop."""


class QPolicy(nn.Module):
    """A trained ``QNetwork`` played as a policy, with an evaluation's interface
    (``act(obs, deterministic)``, as ``ActorCritic``'s): greedy when ``deterministic``, else
    epsilon-greedy at ``epsilon`` (default ``EVALUATION_EPSILON``). ``generator`` draws the
    exploration, so a watched game replays."""

    def __init__(self, q_network: QNetwork, epsilon: float = EVALUATION_EPSILON) -> None:
        super().__init__()
        self.q_network, self.epsilon = q_network, float(epsilon)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.q_network(obs)

    @torch.no_grad()
    def act(
        self,
        obs: torch.Tensor,
        deterministic: bool = False,
        generator: torch.Generator | None = None,
    ) -> dict[str, torch.Tensor]:
        out = self.q_network.act(obs, 0.0)  # greedy: argmax of Q (C51: of its expectation)
        epsilon = 0.0 if deterministic else self.epsilon
        num_actions = self.q_network.num_actions
        return {**out, "action": evaluation_actions(out["action"], num_actions, epsilon, generator)}


def evaluation_actions(
    greedy: torch.Tensor,
    num_actions: int,
    epsilon: float,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """An evaluation's actions: ``greedy`` (int64 ``[B]``), each replaced with probability
    ``epsilon`` by a uniformly random one of ``num_actions``, drawn from ``generator`` (so a
    watched game replays); ``greedy`` itself at epsilon 0."""
    if epsilon == 0.0:
        return greedy
    explore = torch.rand(greedy.shape, generator=generator) < epsilon
    random = torch.randint(num_actions, greedy.shape, generator=generator)
    return torch.where(explore, random, greedy)
