"""SEED RL (Espeholt et al. 2020, https://arxiv.org/abs/1910.06591): env-only actors, one central
inference server on the learner's device, and the learners that train what it serves.

One role per module, in the order data flows:

* ``env_actors``: the actor side, which never imports torch (the request slots, the client, the
  actor process);
* ``transports``: how actors reach the server: ``serial``, ``local`` processes, ``ray`` actors;
* ``server``: ``InferenceServer``, one forward pass per gathered batch, recurrent state per slot,
  latency statistics; the policies it serves;
* ``assembler``: ``TrajectoryAssembler`` (V-trace unrolls, R2D2 sequences) and ``EpisodeLog``;
* ``learning``: ``SeedLearning``, the learner's host: model, server, listeners, learner (in this
  process, or in one Ray actor: ``transports.ray_learner``), what every algorithm shares;
* ``vtrace_learning``, ``r2d2_learning``: one subclass per algorithm (its learner, policy,
  windows and ``learn``), and ``algorithms``: ``SEED_ALGORITHMS``, the registry that picks one by
  ``SeedConfig.algorithm`` (``make_learning``);
* ``config``: ``SeedConfig``;
* ``placement``: ``LearnerHost``, where the learner and its server run (``InProcessHost``, or
  ``transports.ray_learner.RayHost``), and ``PLACES``, each transport's host and actors;
* ``run``: ``Seed``, the whole system on the shared life cycle, with V-trace or R2D2;
* ``recipes``: ``SEED_RECIPES``, runs with a stated target.

The names below load on first use (PEP 562): an env actor's process imports
``workbench.seed.env_actors`` through this package and must not pay for torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Seed": "run",
    "SeedConfig": "config",
    "SeedLearning": "learning",
    "SEED_ALGORITHMS": "algorithms",
    "LearnerHost": "placement",
    "InProcessHost": "placement",
    "make_learning": "algorithms",
    "seed_algorithm": "algorithms",
    "VTraceLearning": "vtrace_learning",
    "R2D2Learning": "r2d2_learning",
    "SEED_RECIPES": "recipes",
    "SeedRecipe": "recipes",
    "InferenceServer": "server",
    "SampledPolicy": "server",
    "RecurrentEpsilonGreedy": "server",
    "StepBatch": "server",
    "TrajectoryAssembler": "assembler",
    "EpisodeLog": "assembler",
    "stack_windows": "assembler",
    "LocalActors": "transports.local",
    "SerialActors": "transports.serial",
    "RayActors": "transports.ray",
    "RayInferenceServer": "transports.ray_server",
    "RaySeedLearner": "transports.ray_learner",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"workbench.seed.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'workbench.seed' has no attribute {name!r}")
