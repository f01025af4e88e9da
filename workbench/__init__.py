"""workbench: the fast parts of a course on scalable deep RL.

The house (``docs/architecture.md``): ``envs``, ``rollout`` (the time-major batch), ``system``,
``budget`` (ci / full sizes), ``processes`` and ``cluster`` at the base; ``models`` and ``kernels``
(networks and pure equations); ``learners``, ``sampling`` and ``replay`` (the roles of Stooke &
Abbeel 2018); ``runs`` (one run life cycle); ``apex`` and ``seed`` (the two distributed papers);
``lab`` (measurements and widgets for the notebooks). Import subpackages directly:
``from workbench.sampling import BatchedSampler``.
"""

import os as _os

# Idle OpenMP threads must sleep instead of spinning, or they steal the cores that env workers
# need (measured on a 2-core machine: +20-28% end to end). libgomp reads this once, when torch
# first loads, so it is set here, before any workbench module imports torch. A value the user
# chose is kept.
_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

__version__ = "0.1.0"
