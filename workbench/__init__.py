"""workbench: the fast parts of a course on scalable deep RL.

Modules, one per role (see DESIGN.md): ``envs`` (vectorised simulators), ``models`` (networks),
``rollout`` (the time-major batch), ``samplers`` (four ways to collect it), ``budget`` (ci / full
sizes), ``system`` (what this machine has). Import them directly: ``from workbench import samplers``.
"""

import os as _os

# Idle OpenMP threads must sleep instead of spinning, or they steal the cores that env workers
# need (NOTES.md: +20-28% end to end). libgomp reads this once, when torch first loads, so it is
# set here, before any workbench module imports torch. A value the user chose is kept.
_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

__version__ = "0.1.0"
