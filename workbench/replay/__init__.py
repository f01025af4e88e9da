"""Experience replay: sum trees, storages, uniform / prioritized / sequence replay, a rate limiter.

Two layers, composed by keyword (``PrioritizedReplay(capacity, storage=FrameStorage(...))``):

* a *replay* decides which stored transitions a batch holds: ``UniformReplay``, or
  ``PrioritizedReplay`` (Schaul et al. 2016, *Prioritized Experience Replay*,
  https://arxiv.org/abs/1511.05952, the proportional variant) on a ``SumTree`` and a ``MinTree``;
* a *storage* keeps the data in a ring of ``capacity`` slots, the oldest overwritten first:
  ``ArrayStorage`` (one array per key, one row per transition: vector observations, or n-step
  transitions an Ape-X actor has already assembled), or ``FrameStorage`` (Atari: each frame stored
  once, frame stacks and n-step windows rebuilt by index, as rlpyt's frame buffer does).

Every operation is vectorised over the batch: a Python loop runs over tree levels, frame-stack
positions or window steps, never over sampled items. This package imports numpy only (no torch:
``nstep`` loads on first use), so a replay server process stays small; ``add`` also takes CPU torch
tensors.

A storage offers ``capacity``, ``len()``, ``extent`` (slots ``[0, extent)`` hold every stored
item), ``nbytes``, ``check(batch) -> (arrays, n)``,
``write(arrays) -> (written, touched)``, ``sampleable(indices) -> bool [N]`` and
``get(indices) -> dict``. ``written`` are the slots the batch's items went to, in batch order;
``touched`` are the slots whose sampleability may have changed (a window that just completed, a
frame history just overwritten). A slot that is stored but not yet sampleable keeps its priority
aside and joins the sum tree when it becomes sampleable.

Modules: ``trees`` (``SumTree``, ``MinTree``), ``storages`` (``ArrayStorage``, ``FrameStorage``),
``prioritized`` (``UniformReplay``, ``PrioritizedReplay``, ``SequenceReplay``), ``rate_limiter``
(``RateLimiter``: samples trained per item inserted, held between two bounds) and ``nstep``
(``NStepTransitions``: time-major rollouts into n-step transitions).
"""

from __future__ import annotations

import importlib
from typing import Any

from workbench.replay.prioritized import PrioritizedReplay, SequenceReplay, UniformReplay
from workbench.replay.rate_limiter import RateLimiter
from workbench.replay.storages import ArrayStorage, FrameStorage
from workbench.replay.trees import MinTree, SumTree

# ``nstep`` works on torch rollouts: its names load on first use (PEP 562), so that a replay server
# process, which imports this package for its replays and storages, never pays for torch.
_LAZY = {"NStepTransitions": "nstep", "TRANSITION_KEYS": "nstep"}

__all__ = [
    "TRANSITION_KEYS",
    "ArrayStorage",
    "FrameStorage",
    "MinTree",
    "NStepTransitions",
    "PrioritizedReplay",
    "RateLimiter",
    "SequenceReplay",
    "SumTree",
    "UniformReplay",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"workbench.replay.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'workbench.replay' has no attribute {name!r}")
