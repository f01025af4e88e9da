"""R2D2's recurrent Q-network (Kapturowski et al. 2019): an LSTM between a trunk and dueling
heads."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from workbench.models.q_networks import EVALUATION_EPSILON, epsilon_greedy, evaluation_actions
from workbench.models.trunks import (
    NatureCNN,
    Shape,
    check_num_actions,
    flatten_batch,
    orthogonal_init,
    resolve_trunk,
)

__all__ = ["LSTMState", "RecurrentQNetwork", "RecurrentQPolicy"]


LSTMState = tuple[torch.Tensor, torch.Tensor]


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
        self.num_actions = check_num_actions(num_actions)
        self.output_size = self.num_actions
        self.dueling = bool(dueling)
        self.trunk = resolve_trunk(self.obs_shape, trunk, hidden, nn.ReLU)
        if lstm_size is None:
            lstm_size = 512 if isinstance(self.trunk, NatureCNN) else 64
        if isinstance(lstm_size, bool) or int(lstm_size) != lstm_size or lstm_size < 1:
            raise ValueError(f"lstm_size must be a positive int (512 in R2D2), got {lstm_size!r}")
        self.lstm_size = int(lstm_size)
        self.lstm = nn.LSTM(self.trunk.output_size, self.lstm_size)  # time-major: [T, B, F]
        self.advantage_head = nn.Linear(self.lstm_size, self.num_actions)
        self.value_head = nn.Linear(self.lstm_size, 1) if self.dueling else None
        orthogonal_init(self.advantage_head, 1.0)
        if self.value_head is not None:
            orthogonal_init(self.value_head, 1.0)

    def initial_state(
        self, batch_size: int, device: "torch.device | str | None" = None
    ) -> LSTMState:
        """Zeros ``(h, c)``, each float ``[B, lstm_size]``, on ``device`` (default: the model's)."""
        weight = self.advantage_head.weight
        zeros = torch.zeros(
            int(batch_size),
            self.lstm_size,
            dtype=weight.dtype,
            device=weight.device if device is None else device,
        )
        return zeros, zeros.clone()

    def _check_state(self, state: LSTMState, batch: int) -> LSTMState:
        expected = (batch, self.lstm_size)
        if (
            not isinstance(state, (tuple, list))
            or len(state) != 2
            or any(not isinstance(s, torch.Tensor) or tuple(s.shape) != expected for s in state)
        ):
            got = (
                [tuple(s.shape) if isinstance(s, torch.Tensor) else type(s).__name__ for s in state]
                if isinstance(state, (tuple, list))
                else type(state).__name__
            )
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
        flat, (T, B) = flatten_batch(obs, self.obs_shape)
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
            if (
                T > 1
            ):  # episodes start inside: cut the unroll before every step where some env resets
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
        return epsilon_greedy(q[0], epsilon), state


class RecurrentQPolicy(nn.Module):
    """A trained ``RecurrentQNetwork`` played as a policy over B envs, with an evaluation's
    interface (``act(obs, deterministic, generator, first)``, ``QPolicy``'s plus ``first``): it
    carries each env's LSTM state from step to step itself, zeroed where ``first`` says a game
    starts. Greedy when ``deterministic``, else epsilon-greedy at ``epsilon`` (default
    ``EVALUATION_EPSILON``); R2D2 evaluates its agents with their recurrent state carried through
    whole episodes (Kapturowski et al. 2019, Sec. 3)."""

    def __init__(self, q_network: RecurrentQNetwork, epsilon: float = EVALUATION_EPSILON) -> None:
        super().__init__()
        self.q_network, self.epsilon = q_network, float(epsilon)
        self.state: LSTMState | None = None

    def reset(self) -> None:
        """Forget every env's state: the next ``act`` starts all of them from zeros."""
        self.state = None

    @torch.no_grad()
    def act(
        self,
        obs: torch.Tensor,
        deterministic: bool = False,
        generator: torch.Generator | None = None,
        first: torch.Tensor | None = None,
    ) -> dict[str, torch.Tensor]:
        """One step of the ``[B, *obs_shape]`` batch ``obs`` (``"action"``, and ``"q"``: the
        Q-values ``[B, A]`` it acted on); ``first`` bool ``[B]`` marks the envs whose game starts
        at ``obs``. A new batch size starts every env afresh."""
        batch = obs.shape[0]
        if self.state is None or self.state[0].shape[0] != batch:
            self.state = self.q_network.initial_state(batch, obs.device)
            first = None  # zeros already
        q, self.state = self.q_network(
            obs.unsqueeze(0), self.state, None if first is None else first.reshape(1, batch)
        )
        epsilon = 0.0 if deterministic else self.epsilon
        action = evaluation_actions(q[0].argmax(-1), self.q_network.num_actions, epsilon, generator)
        return {"action": action, "q": q[0]}
