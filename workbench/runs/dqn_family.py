"""The DQN family of notebook 05 as one-line changes to one recipe (Rainbow's Fig. 1 on CartPole).

``DQN_BASE`` is plain DQN (Mnih et al. 2015) at the ``dqn-cartpole`` recipe's sizes; each member of
``DQN_VARIANTS`` is its changes to it, which ``dqn_variant`` applies to the network's options, the
``ReplayAgentConfig`` or the ``DQNConfig``, each key where it belongs.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from workbench.learners import DQN, DQNConfig, ReplayAgentConfig
from workbench.runs.recipes import CARTPOLE_DQN, CARTPOLE_REPLAY, RECIPES, Recipe

__all__ = ["DQN_BASE", "DQN_VARIANTS", "MODEL_OPTIONS", "dqn_variant"]

MODEL_OPTIONS = ("dueling", "num_atoms", "v_min", "v_max", "hidden")
"""Keys of a variant's changes that are ``QNetwork`` options; the others are ``ReplayAgentConfig``
fields (``prioritized``, ``replay_ratio`` ...) or ``DQNConfig`` fields."""

_C51_CARTPOLE = {
    "num_atoms": 51,
    "v_min": 0.0,
    "v_max": 100.0,
}  # CartPole's returns at gamma 0.99 lie in [0, 100]

DQN_BASE = replace(
    RECIPES["dqn-cartpole"],
    name="dqn-cartpole-plain",
    config=replace(CARTPOLE_DQN, n_step=1, double=False),
    replay=replace(CARTPOLE_REPLAY, prioritized=False),
    model_options=(("hidden", (256, 256)),),
    note="the dqn-cartpole recipe with every extension off: Mnih et al. 2015's one-step, "
    "single-network target on a plain (not dueling) network with uniform replay; the base of "
    "DQN_VARIANTS",
)
"""Plain DQN on CartPole-v1: the ``dqn-cartpole`` recipe's sizes, with every extension off."""

DQN_VARIANTS: dict[str, dict[str, Any]] = {
    "DQN": {},  # Mnih et al. 2015: 1-step, single, plain net, uniform
    "+ double": {"double": True},  # van Hasselt et al. 2016, Eq. 4
    "+ dueling": {"dueling": True},  # Wang et al. 2016, Eq. 9
    "+ 3-step": {"n_step": 3},  # Sutton 1988; Rainbow's n = 3
    "+ prioritized": {"prioritized": True},  # Schaul et al. 2016, proportional
    "C51": dict(_C51_CARTPOLE),  # Bellemare et al. 2017, Alg. 1
    "all (Rainbow - noisy)": {
        "double": True,
        "dueling": True,
        "n_step": 3,
        "prioritized": True,
        **_C51_CARTPOLE,
    },  # Hessel et al. 2018 without noisy nets
}
"""The DQN family, each member as its changes to ``DQN_BASE`` (``dqn_variant`` applies them):
one extension added to plain DQN at a time, as in Rainbow's Fig. 1, then all of them together."""


def dqn_variant(base: Recipe = DQN_BASE, name: str | None = None, **changes: Any) -> Recipe:
    """``base`` with ``changes``: keys in ``MODEL_OPTIONS`` replace the ``QNetwork`` options,
    ``ReplayAgentConfig`` fields its replay's (``prioritized=True``), the others ``DQNConfig``
    fields (``dqn_variant(double=True)`` is Double DQN)."""
    if base.algorithm is not DQN:
        raise ValueError(
            f"dqn_variant needs a DQN recipe as its base, got {base.name!r} "
            f"({base.algorithm.__name__})."
        )
    learner_fields = set(DQNConfig.__dataclass_fields__)
    replay_fields = set(ReplayAgentConfig.__dataclass_fields__)
    unknown = sorted(set(changes) - learner_fields - replay_fields - set(MODEL_OPTIONS))
    if unknown:
        raise ValueError(
            f"dqn_variant: {unknown} are neither DQNConfig nor ReplayAgentConfig fields nor "
            f"QNetwork options {list(MODEL_OPTIONS)}."
        )

    def part(names: set) -> dict[str, Any]:
        return {key: value for key, value in changes.items() if key in names}

    model = {**dict(base.model_options), **part(set(MODEL_OPTIONS))}
    return replace(
        base,
        name=name or base.name,
        config=replace(base.config, **part(learner_fields)),
        replay=replace(base.replay or ReplayAgentConfig(), **part(replay_fields)),
        model_options=tuple(model.items()),
    )
