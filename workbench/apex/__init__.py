"""Ape-X: distributed prioritized experience replay (Horgan et al. 2018, https://arxiv.org/abs/1803.00933).

The paper's Fig. 1, one role per module:

* ``config``: ``ApexConfig`` (the paper's Appendix C at one machine's scale);
* ``algorithms``: ``APEX_ALGORITHMS``, one object per algorithm (Ape-X DQN, Ape-X DPG): its
  learner (``make_learner``), defaults, exploration and target;
* ``exploration``: ``actor_epsilons`` (Sec. 4.1: ``epsilon_i = 0.4 ** (1 + 7 i / (N - 1))``) and
  Ape-X DPG's ``actor_noise_scales``;
* ``actor``: ``ApexActor`` steps its own envs with its own exploration, keeps a local buffer of
  ``block_steps`` steps, turns it into n-step transitions and computes their initial priorities
  (|TD error|) with its own copy of the network (Alg. 1, lines 5-10) before sending the block;
* ``replay_server``: ``ReplayServer``, the one central prioritized replay, with the replay ratio
  held by a ``replay.RateLimiter``;
* ``run``: ``Apex``, the learner (Alg. 2) on the shared life cycle;
* ``transports``: where the roles run (``local`` processes, or ``ray`` actors), one interface;
* ``recipes``: ``APEX_RECIPES``, runs with a stated target.

The number of actors changes while a run goes (``apex.set_num_actors(n)``, or the notebook's
slider), and an actor that dies is restarted; the replay keeps its data through both.
"""

from workbench.apex.actor import ApexActor
from workbench.apex.algorithms import APEX_ALGORITHMS, apex_algorithm, make_learner
from workbench.apex.config import ApexConfig
from workbench.apex.exploration import actor_epsilons, actor_noise_scales
from workbench.apex.recipes import APEX_RECIPES, ApexRecipe
from workbench.apex.replay_server import ReplayServer
from workbench.apex.run import Apex
from workbench.apex.transports import TRANSPORTS, ApexTransport, make_transport

__all__ = [
    "APEX_ALGORITHMS",
    "APEX_RECIPES",
    "TRANSPORTS",
    "Apex",
    "ApexActor",
    "ApexConfig",
    "ApexRecipe",
    "ApexTransport",
    "ReplayServer",
    "actor_epsilons",
    "apex_algorithm",
    "actor_noise_scales",
    "make_learner",
    "make_transport",
]
