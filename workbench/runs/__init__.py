"""The life cycle every run shares, and the run of samplers and a learner.

``lifecycle.RunLifecycle`` (start / stop / wait / status / metrics / events, the four limits,
metrics files, checkpoints, resume) is the base of ``run.Run`` (Stooke & Abbeel's samplers and a
learner), ``apex.Apex`` and ``seed.Seed``. ``settings`` holds what widgets change while a run goes,
``records`` what a run leaves on disk (one row schema), ``recipes`` the settings behind each
learning claim.
"""

from workbench.runs.lifecycle import Limits, RunLifecycle
from workbench.runs.records import load_metrics
from workbench.runs.run import Run, RunConfig
from workbench.runs.settings import Change, RunSettings, Settings

__all__ = [
    "Change",
    "Limits",
    "Run",
    "RunConfig",
    "RunLifecycle",
    "RunSettings",
    "Settings",
    "load_metrics",
]
