"""Networks: trunks that turn observations into features, and the heads the algorithms train.

* ``NatureCNN`` and ``UniverseCNN`` (Atari images) and ``MLP`` (vectors) are trunks:
  ``[N, *obs_shape]`` in, ``[N, output_size]`` features out. ``make_trunk`` picks one from the
  observation shape.
* ``ActorCritic`` (A2C, PPO, V-trace) and ``QNetwork`` (DQN, dueling, C51, Ape-X) are heads on a
  trunk. Their ``forward`` / ``act`` / ``evaluate`` accept ``[B, *obs_shape]`` (one step of B
  environments, what samplers pass) and time-major ``[T, B, *obs_shape]`` (a whole rollout, what
  algorithms pass); outputs keep those leading dimensions.
* ``RecurrentQNetwork`` (R2D2) adds an LSTM: ``forward(obs [T, B, ...], state, first)`` unrolls a
  sequence from a state ``(h, c)``; ``act(obs [B, ...], state, first, epsilon)`` takes one step.
  ``QPolicy`` and ``RecurrentQPolicy`` play trained Q-networks in evaluations (greedy or nearly).

Every module exposes ``.output_size``: the feature size of a trunk, the number of actions of a head.
``act`` is what samplers call: it runs under ``torch.no_grad`` and returns a dict with at least
``"action"``; ``ActorCritic.act`` adds ``"value"``, which samplers use to bootstrap truncated
episodes. Observations must already be on the model's device.
"""

from workbench.models.actor_critic import ActorCritic, ContinuousQ, DeterministicPolicy
from workbench.models.q_networks import EVALUATION_EPSILON, EpsilonGreedy, QNetwork, QPolicy
from workbench.models.recurrent import RecurrentQNetwork, RecurrentQPolicy
from workbench.models.trunks import MLP, NatureCNN, UniverseCNN, make_trunk

__all__ = [
    "MLP",
    "ActorCritic",
    "ContinuousQ",
    "DeterministicPolicy",
    "EVALUATION_EPSILON",
    "EpsilonGreedy",
    "NatureCNN",
    "UniverseCNN",
    "QNetwork",
    "QPolicy",
    "RecurrentQNetwork",
    "RecurrentQPolicy",
    "make_trunk",
]
