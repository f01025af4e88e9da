"""Networks: trunks that turn observations into features, and the heads the algorithms train.

* ``NatureCNN`` (Atari images) and ``MLP`` (vector observations) are trunks: ``[N, *obs_shape]``
  in, ``[N, output_size]`` features out. ``make_trunk`` picks one from the observation shape.
* ``ActorCritic`` (A2C, PPO, V-trace) and ``QNetwork`` (DQN, dueling, C51, Ape-X) are heads on a
  trunk. Their ``forward`` / ``act`` / ``evaluate`` accept ``[B, *obs_shape]`` (one step of B
  environments, what samplers pass) and time-major ``[T, B, *obs_shape]`` (a whole rollout, what
  algorithms pass); outputs keep those leading dimensions.
* ``RecurrentQNetwork`` (R2D2) adds an LSTM: ``forward(obs [T, B, ...], state, first)`` unrolls a
  sequence from a state ``(h, c)``; ``act(obs [B, ...], state, first, epsilon)`` takes one step.

Every module exposes ``.output_size``: the feature size of a trunk, the number of actions of a head.
``act`` is what samplers call: it runs under ``torch.no_grad`` and returns a dict with at least
``"action"``; ``ActorCritic.act`` adds ``"value"``, which samplers use to bootstrap truncated
episodes. Observations must already be on the model's device.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
from torch import nn
from torch.distributions import Categorical

__all__ = ["NatureCNN", "MLP", "make_trunk", "ActorCritic", "QNetwork"]

Shape = tuple[int, ...]


def _orthogonal_init(module: nn.Module, gain: float) -> None:
    """Orthogonal weights, zero biases (Saxe et al. 2014), as OpenAI baselines and CleanRL do."""
    for layer in module.modules():
        if isinstance(layer, (nn.Linear, nn.Conv2d)):
            nn.init.orthogonal_(layer.weight, gain)
            nn.init.zeros_(layer.bias)


def _flatten_batch(obs: torch.Tensor, obs_shape: Shape) -> tuple[torch.Tensor, torch.Size]:
    """``[B, *obs_shape]`` or ``[T, B, *obs_shape]`` -> (``[N, *obs_shape]``, leading dims)."""
    lead = obs.dim() - len(obs_shape)
    expected = f"[B, {', '.join(map(str, obs_shape))}] or [T, B, {', '.join(map(str, obs_shape))}]"
    if lead < 0 or tuple(obs.shape[lead:]) != tuple(obs_shape):
        raise ValueError(
            f"observations of shape {tuple(obs.shape)} do not end in obs_shape={tuple(obs_shape)}; "
            f"expected {expected} (check the env's observation_space.shape, and that images are "
            f"channels-first)"
        )
    if lead == 0:
        raise ValueError(
            f"unbatched observation of shape {tuple(obs.shape)}; expected {expected}: "
            f"add a batch dimension with obs.unsqueeze(0)"
        )
    if lead > 2:
        raise ValueError(
            f"observations of shape {tuple(obs.shape)} have {lead} leading dimensions; expected "
            f"{expected}: reshape the leading dimensions to [T, B] or [B]"
        )
    leading = obs.shape[:lead]
    return obs.reshape(-1, *obs_shape), leading


class NatureCNN(nn.Module):
    """The DQN convolutional trunk of Mnih et al. 2015, "Human-level control through deep
    reinforcement learning" (Nature 518), Methods, "Model architecture": conv 32 8x8 stride 4,
    conv 64 4x4 stride 2, conv 64 3x3 stride 1, fully connected 512, ReLU after each.

    Args:
        in_channels: C, the stacked frames (4 in the paper).
        image_size: (H, W); 84x84 in the paper. Any size from 36x36 works: the flatten size is
            measured with a dummy forward pass here, not hard-coded.

    ``forward(x)``: ``[N, C, H, W]`` -> float ``[N, 512]``. uint8 input is scaled by 1/255 here, so
    replay and rollout buffers can stay uint8 (4x smaller, and 4x less to copy to an accelerator);
    floating-point input is taken as already scaled to [0, 1].
    """

    def __init__(self, in_channels: int = 4, image_size: tuple[int, int] = (84, 84)) -> None:
        super().__init__()
        self.obs_shape: Shape = (int(in_channels), *map(int, image_size))
        self.conv = nn.Sequential(
            nn.Conv2d(in_channels, 32, kernel_size=8, stride=4),
            nn.ReLU(),
            nn.Conv2d(32, 64, kernel_size=4, stride=2),
            nn.ReLU(),
            nn.Conv2d(64, 64, kernel_size=3, stride=1),
            nn.ReLU(),
            nn.Flatten(),
        )
        try:
            with torch.no_grad():
                flat = self.conv(torch.zeros(1, *self.obs_shape)).shape[1]
        except RuntimeError as error:
            raise ValueError(
                f"NatureCNN needs images of at least 36x36 pixels, got image_size={image_size}; "
                f"resize the frames (ale_py's AtariVectorEnv does 84x84) or use an MLP trunk"
            ) from error
        self.fc = nn.Sequential(nn.Linear(flat, 512), nn.ReLU())
        self.output_size = 512
        _orthogonal_init(self, math.sqrt(2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 4:
            raise ValueError(f"NatureCNN takes [N, C, H, W], got shape {tuple(x.shape)}")
        if x.dtype == torch.uint8:
            x = x.to(self.fc[0].weight.dtype) / 255.0
        return self.fc(self.conv(x))


class MLP(nn.Module):
    """A fully connected trunk for vector observations, as in the MuJoCo / classic-control
    networks of Schulman et al. 2017 (PPO, Sec. 6.1: two hidden layers of 64 units, tanh).

    Args:
        in_features: size of one (flattened) observation.
        hidden: units per hidden layer; ``output_size`` is the last one (``in_features`` if none).
        activation: module class applied after every layer.

    ``forward(x)``: ``[N, ...]``, ``in_features`` elements per row -> float ``[N, output_size]``.
    """

    def __init__(
        self,
        in_features: int,
        hidden: Sequence[int] = (64, 64),
        activation: type[nn.Module] = nn.Tanh,
    ) -> None:
        super().__init__()
        self.obs_shape: Shape = (int(in_features),)
        layers: list[nn.Module] = []
        size = int(in_features)
        for units in hidden:
            layers += [nn.Linear(size, int(units)), activation()]
            size = int(units)
        self.layers = nn.Sequential(*layers)
        self.output_size = size
        _orthogonal_init(self, math.sqrt(2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Observations arrive as float64 (from numpy) or integers; the weights decide the dtype.
        weight = next(self.parameters(), None)
        return self.layers(x.flatten(1).to(torch.float32 if weight is None else weight.dtype))


def make_trunk(
    obs_shape: Sequence[int],
    kind: str = "auto",
    *,
    hidden: Sequence[int] = (64, 64),
    activation: type[nn.Module] = nn.Tanh,
) -> NatureCNN | MLP:
    """The trunk for observations of shape ``obs_shape`` (one observation, no batch dimension).

    Args:
        obs_shape: ``(C, H, W)`` for images (channels first, as ale_py's frame stack gives them),
            ``(D,)`` for vectors.
        kind: ``"auto"`` (3-D -> NatureCNN, 1-D -> MLP), ``"cnn"`` or ``"mlp"`` (which flattens
            any shape).
        hidden, activation: the MLP's layers; unused by the CNN.
    """
    obs_shape = tuple(int(d) for d in obs_shape)
    if kind not in ("auto", "cnn", "mlp"):
        raise ValueError(f"kind must be 'auto', 'cnn' or 'mlp', got {kind!r}")
    if kind == "auto":
        if len(obs_shape) == 3:
            if obs_shape[-1] <= 4 < obs_shape[0]:
                raise ValueError(
                    f"obs_shape={obs_shape} looks channels-last (H, W, C); NatureCNN wants "
                    f"(C, H, W): transpose observations with obs.permute(..., 2, 0, 1) "
                    f"(or pass kind='cnn' if {obs_shape[0]} really is the channel count)"
                )
            kind = "cnn"
        elif len(obs_shape) == 1:
            kind = "mlp"
        else:
            raise ValueError(
                f"obs_shape={obs_shape} is neither an image (C, H, W) nor a vector (D,); "
                f"add a channel axis for single-channel images ((1, H, W)), or pass kind='mlp' to "
                f"flatten each observation into a vector"
            )
    if kind == "cnn":
        if len(obs_shape) != 3:
            raise ValueError(
                f"kind='cnn' needs image observations (C, H, W), got obs_shape={obs_shape}; "
                f"use kind='mlp' for vector observations"
            )
        return NatureCNN(obs_shape[0], obs_shape[1:])
    return MLP(math.prod(obs_shape), hidden, activation)


def _resolve_trunk(
    obs_shape: Shape, trunk: str | nn.Module, hidden: Sequence[int], activation: type[nn.Module]
) -> nn.Module:
    if isinstance(trunk, nn.Module):
        if not isinstance(getattr(trunk, "output_size", None), int):
            raise ValueError("a trunk module must expose an int .output_size (its feature size)")
        return trunk
    return make_trunk(obs_shape, trunk, hidden=hidden, activation=activation)


def _check_num_actions(num_actions: int) -> int:
    if isinstance(num_actions, bool) or int(num_actions) != num_actions or num_actions < 1:
        raise ValueError(
            f"num_actions must be a positive int (the env's action_space.n), got {num_actions!r}"
        )
    return int(num_actions)


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
        self.num_actions = _check_num_actions(num_actions)
        self.output_size = self.num_actions
        self.trunk = _resolve_trunk(self.obs_shape, trunk, hidden, nn.Tanh)
        self.policy_head = nn.Linear(self.trunk.output_size, self.num_actions)
        self.value_head = nn.Linear(self.trunk.output_size, 1)
        _orthogonal_init(self.policy_head, 0.01)
        _orthogonal_init(self.value_head, 1.0)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``[*lead, *obs_shape]`` -> (logits ``[*lead, A]``, value ``[*lead]``).

        ``lead`` is ``[B]`` or ``[T, B]``.
        """
        flat, lead = _flatten_batch(obs, self.obs_shape)
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
        self.num_actions = _check_num_actions(num_actions)
        self.output_size = self.num_actions
        self.dueling = bool(dueling)
        self.num_atoms = int(num_atoms)
        self.trunk = _resolve_trunk(self.obs_shape, trunk, hidden, nn.ReLU)
        features = self.trunk.output_size
        self.advantage_head = nn.Linear(features, self.num_actions * self.num_atoms)
        self.value_head = nn.Linear(features, self.num_atoms) if self.dueling else None
        _orthogonal_init(self.advantage_head, 1.0)
        if self.value_head is not None:
            _orthogonal_init(self.value_head, 1.0)
        # A buffer, not a parameter: it moves with .to(device) and is saved, but is not trained.
        # Scalar Q-networks keep a placeholder so every QNetwork has the same attributes.
        if self.num_atoms > 1:
            support = torch.linspace(v_min, v_max, self.num_atoms)
        else:
            support = torch.zeros(1)
        self.register_buffer("support", support)

    def _logits(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Size]:
        """``[*lead, *obs_shape]`` -> (``[N, A, num_atoms]``, lead): Q-values or atom logits."""
        flat, lead = _flatten_batch(obs, self.obs_shape)
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
        random = torch.randint(self.num_actions, lead, device=q.device)
        explore = torch.rand(lead, device=q.device) < epsilon
        return {"action": torch.where(explore, random, greedy), "q": q}


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


# --------------------------------------------------------------------------------------------------
# Recurrent Q-network: R2D2

__all__ += ["RecurrentQNetwork"]

LSTMState = tuple[torch.Tensor, torch.Tensor]


def _epsilon_greedy(q: torch.Tensor, epsilon: float | torch.Tensor) -> torch.Tensor:
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


class RecurrentQNetwork(nn.Module):
    """R2D2's recurrent Q-network (Kapturowski et al. 2019, *Recurrent Experience Replay in
    Distributed RL*, https://openreview.net/forum?id=r1lyTjAqYX, Sec. 2 and Appendix A): a trunk,
    an LSTM over time, and a dueling head (Wang et al. 2016, Eq. 9:
    ``Q = V + A - mean_a' A``), as in the paper's network (conv trunk, 512-unit LSTM, dueling).

    The LSTM's state ``(h, c)`` is reset to zeros where an episode starts: ``forward`` takes
    ``first [T, B]`` and zeroes the state of env b before step t where ``first[t, b]``, so one
    sequence may cross episode boundaries (R2D2's stored sequences do). The unroll is cut before
    each step where some env resets, and each segment between cuts is one fused ``nn.LSTM`` call:
    one call without resets, a few for CartPole's long episodes (a loop over every t costs 3-5x).

    Args:
        obs_shape: one observation's shape, e.g. ``(4, 84, 84)`` or ``(2,)``.
        num_actions: A.
        trunk: ``"auto"``, ``"cnn"``, ``"mlp"`` (see ``make_trunk``) or a module with
            ``.output_size``.
        hidden: hidden sizes of an MLP trunk (ReLU, as ``QNetwork``'s).
        lstm_size: H, the LSTM's units; None: 512 with a NatureCNN trunk (the paper's), else 64.
        dueling: the dueling head; False: one linear layer to the A values.

    Uint8 image observations are scaled by 1/255 in the trunk (``NatureCNN``), so buffers can stay
    uint8. The state lives wherever the caller keeps it (an inference server, per env): this module
    holds parameters only.
    """

    def __init__(
        self,
        obs_shape: Sequence[int],
        num_actions: int,
        *,
        trunk: str | nn.Module = "auto",
        hidden: Sequence[int] = (64,),
        lstm_size: int | None = None,
        dueling: bool = True,
    ) -> None:
        super().__init__()
        self.obs_shape: Shape = tuple(int(d) for d in obs_shape)
        self.num_actions = _check_num_actions(num_actions)
        self.output_size = self.num_actions
        self.dueling = bool(dueling)
        self.trunk = _resolve_trunk(self.obs_shape, trunk, hidden, nn.ReLU)
        if lstm_size is None:
            lstm_size = 512 if isinstance(self.trunk, NatureCNN) else 64
        if isinstance(lstm_size, bool) or int(lstm_size) != lstm_size or lstm_size < 1:
            raise ValueError(f"lstm_size must be a positive int (512 in R2D2), got {lstm_size!r}")
        self.lstm_size = int(lstm_size)
        self.lstm = nn.LSTM(self.trunk.output_size, self.lstm_size)  # time-major: [T, B, F]
        self.advantage_head = nn.Linear(self.lstm_size, self.num_actions)
        self.value_head = nn.Linear(self.lstm_size, 1) if self.dueling else None
        _orthogonal_init(self.advantage_head, 1.0)
        if self.value_head is not None:
            _orthogonal_init(self.value_head, 1.0)

    def initial_state(
        self, batch_size: int, device: "torch.device | str | None" = None
    ) -> LSTMState:
        """Zeros ``(h, c)``, each float ``[B, lstm_size]``, on ``device`` (default: the model's)."""
        weight = self.advantage_head.weight
        zeros = torch.zeros(int(batch_size), self.lstm_size, dtype=weight.dtype,
                            device=weight.device if device is None else device)
        return zeros, zeros.clone()

    def _check_state(self, state: LSTMState, batch: int) -> LSTMState:
        expected = (batch, self.lstm_size)
        if (not isinstance(state, (tuple, list)) or len(state) != 2
                or any(not isinstance(s, torch.Tensor) or tuple(s.shape) != expected for s in state)):
            got = ([tuple(s.shape) if isinstance(s, torch.Tensor) else type(s).__name__ for s in state]
                   if isinstance(state, (tuple, list)) else type(state).__name__)
            raise ValueError(
                f"state must be a tuple (h, c), each [B, lstm_size] = {list(expected)}; got {got}. "
                "Start from model.initial_state(B), then pass back the state forward/act returned"
            )
        return state[0], state[1]

    def _head(self, features: torch.Tensor) -> torch.Tensor:
        """``[..., lstm_size]`` -> Q-values ``[..., A]`` (dueling: Wang et al. 2016, Eq. 9)."""
        advantages = self.advantage_head(features)
        if self.value_head is None:
            return advantages
        return self.value_head(features) + advantages - advantages.mean(dim=-1, keepdim=True)

    def forward(
        self, obs: torch.Tensor, state: LSTMState, first: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, LSTMState]:
        """Unroll over a sequence.

        Args:
            obs: ``[T, B, *obs_shape]`` observations (uint8 images are scaled here).
            state: ``(h, c)``, each float ``[B, lstm_size]``: the state before step 0.
            first: optional bool ``[T, B]``; where ``first[t, b]`` the state of env b is reset to
                zeros before step t (an episode starts at t). None: no reset.

        Returns:
            ``(q, state)``: Q-values float ``[T, B, A]``, and ``(h, c)`` after step T-1.
        """
        if obs.dim() != len(self.obs_shape) + 2:
            raise ValueError(
                f"RecurrentQNetwork.forward takes time-major observations [T, B, *obs_shape] = "
                f"[T, B, {', '.join(map(str, self.obs_shape))}], got shape {tuple(obs.shape)}; "
                "for one step of B envs use act(), or obs.unsqueeze(0)"
            )
        flat, (T, B) = _flatten_batch(obs, self.obs_shape)
        h, c = self._check_state(state, B)
        features = self.trunk(flat).reshape(T, B, -1)
        if first is not None:
            first = torch.as_tensor(first, device=features.device)
        if first is not None and tuple(first.shape) != (T, B):
            raise ValueError(
                f"first must be bool [T, B] = {[T, B]} (True where an episode starts), got "
                f"{tuple(first.shape)}"
            )
        starts = [0, T]
        if first is not None:
            first = first.to(device=features.device, dtype=torch.bool)
            keep = (~first).unsqueeze(-1).to(features.dtype)
            if T > 1:  # episodes start inside: cut the unroll before every step where some env resets
                starts = [0, *first[1:].any(1).nonzero().flatten().add(1).tolist(), T]
        outputs = []
        for start, end in zip(starts[:-1], starts[1:]):  # one fused nn.LSTM call per segment
            if first is not None:  # zero (h, c) of the envs whose episode starts at `start`
                h, c = h * keep[start], c * keep[start]
            out, (h, c) = self.lstm(features[start:end], (h.unsqueeze(0), c.unsqueeze(0)))
            h, c = h.squeeze(0), c.squeeze(0)
            outputs.append(out)
        out = outputs[0] if len(outputs) == 1 else torch.cat(outputs)
        return self._head(out), (h, c)

    @torch.no_grad()
    def act(
        self,
        obs: torch.Tensor,
        state: LSTMState,
        first: torch.Tensor | None,
        epsilon: float | torch.Tensor = 0.0,
    ) -> tuple[torch.Tensor, LSTMState]:
        """One epsilon-greedy step for B envs (what an inference server calls).

        Args:
            obs: ``[B, *obs_shape]``.
            state: ``(h, c)``, each ``[B, lstm_size]``, the envs' states before this step.
            first: bool ``[B]``, True where ``obs`` is an episode's first observation (its state
                is reset to zeros first); None: no reset.
            epsilon: probability of a uniformly random action: a float, or ``[B]`` with one per
                actor (Ape-X, Horgan et al. 2018, Sec. 4.1; R2D2 Sec. 2 keeps these epsilons).

        Returns:
            ``(actions, state)``: int64 ``[B]``, and ``(h, c)`` after this step.
        """
        if obs.dim() != len(self.obs_shape) + 1:
            raise ValueError(
                f"act takes one step of B envs [B, {', '.join(map(str, self.obs_shape))}], got "
                f"shape {tuple(obs.shape)}; for a sequence [T, B, ...] call the model (forward)"
            )
        if first is not None:
            first = torch.as_tensor(first, device=obs.device).reshape(1, -1)
        q, state = self(obs.unsqueeze(0), state, first)
        return _epsilon_greedy(q[0], epsilon), state


# --------------------------------------------------------------------------------------------------
# Continuous actions: DDPG's actor and critic (Ape-X DPG)

__all__ += ["DeterministicPolicy", "ContinuousQ"]


def _bounds(action_low: "Sequence[float] | torch.Tensor", action_high: "Sequence[float] | torch.Tensor"
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

    def __init__(self, obs_dim: int, action_low: "Sequence[float] | torch.Tensor",
                 action_high: "Sequence[float] | torch.Tensor", hidden: Sequence[int] = (256, 256)) -> None:
        super().__init__()
        low, high = _bounds(action_low, action_high)
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
        flat, lead = _flatten_batch(obs, self.obs_shape)
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
            raise ValueError(f"action_dim must be a positive int (env.single_action_space.shape[0]), "
                             f"got {action_dim!r}")
        self.obs_shape: Shape = (int(obs_dim),)
        self.action_dim = int(action_dim)
        self.output_size = 1
        self.trunk = MLP(int(obs_dim) + self.action_dim, hidden, nn.ReLU)
        self.head = nn.Linear(self.trunk.output_size, 1)
        nn.init.uniform_(self.head.weight, -3e-3, 3e-3)
        nn.init.uniform_(self.head.bias, -3e-3, 3e-3)

    def forward(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        flat, lead = _flatten_batch(obs, self.obs_shape)
        if tuple(actions.shape) != (*lead, self.action_dim):
            raise ValueError(
                f"actions of shape {tuple(actions.shape)} do not match observations {tuple(obs.shape)}: "
                f"expected {(*lead, self.action_dim)}, one action vector per observation "
                f"(for a 1-D action space, actions[..., None])"
            )
        dtype = self.head.weight.dtype  # observations may arrive as float64 (numpy)
        features = self.trunk(torch.cat([flat.to(dtype), actions.reshape(-1, self.action_dim).to(dtype)], dim=1))
        return self.head(features).squeeze(-1).reshape(lead)
