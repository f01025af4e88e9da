"""What each Ape-X actor explores with (Horgan et al. 2018, Sec. 4.1): a ladder of epsilons, and
Ape-X DPG's ladder of noise scales. SEED's R2D2 gives its actors the same epsilons."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from workbench.checks import positive_int

__all__ = ["actor_epsilons", "actor_noise_scales", "check_count", "returns_by_exploration"]


def actor_epsilons(num_actors: int, base: float = 0.4, alpha: float = 7.0) -> list[float]:
    """Ape-X's per-actor epsilons (Horgan et al. 2018, Sec. 4.1):
    ``base ** (1 + alpha i / (N - 1))``.

    With ``N = 1`` the single actor gets ``base``. Actor 0 explores most (0.4), actor N-1 least
    (``0.4 ** 8`` ~ 0.00066): a spread of behaviours feeding one replay.
    """
    check_count(num_actors, "num_actors")
    if num_actors == 1:
        return [base]
    return [base ** (1 + alpha * i / (num_actors - 1)) for i in range(num_actors)]


def actor_noise_scales(num_actors: int, high: float = 0.5, low: float = 0.05) -> list[float]:
    """Ape-X DPG's per-actor Gaussian noise scales (in half action ranges), spread geometrically
    from ``high`` (actor 0) to ``low`` (actor N-1), as the epsilons are for Ape-X DQN."""
    check_count(num_actors, "num_actors")
    if num_actors == 1:
        return [math.sqrt(high * low)]
    return [high * (low / high) ** (i / (num_actors - 1)) for i in range(num_actors)]


def check_count(value: Any, name: str) -> int:
    """``value`` as an int if it is a positive integer, else a ValueError naming ``name``."""
    return positive_int(value, name)


def returns_by_exploration(
    recent: Mapping[int, Sequence[float]], actors: Sequence[int]
) -> tuple[float | None, float | None]:
    """Two readings of the greedy policy from the actors' recent game returns (``recent``: each
    actor's last games): the actor exploring least (the highest index; at least 5 games), and
    every actor but the one exploring most (actor 0, epsilon 0.4 in the paper's ladder; at least
    10 games in all). The second pools 3 of 4 actors' envs, so it reads several times sooner."""
    ordered = sorted(actors)
    least = list(recent.get(ordered[-1], ())) if ordered else []
    pooled = [r for i in ordered[1:] for r in recent.get(i, ())]
    return (
        sum(least) / len(least) if len(least) >= 5 else None,
        sum(pooled) / len(pooled) if len(pooled) >= 10 else None,
    )
