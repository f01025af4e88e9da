"""Progress bars for the calls that take more than a few seconds (tqdm, notebook-aware).

A run's ``run()`` follows its limit (env steps, seconds or updates) with a bar, the return of the
last 20 episodes beside it; a study's loop over its settings shows one bar for the whole study
(``each``), and the runs inside it show none of their own. Bars are drawn in a Jupyter kernel
(``tqdm.auto``: a widget there) and hidden elsewhere, where scripts and tests print their own
lines; ``WORKBENCH_PROGRESS=1`` or ``0`` forces them on or off.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from tqdm.auto import tqdm

T = TypeVar("T")

# Bars of enclosing loops now open (a study's): a run inside one draws no bar of its own.
_open_loops = 0

# A drawn bar is a widget in a notebook and each redraw sends the browser a few messages; once a
# second is smooth enough to read and keeps an hour-long cell to a few thousand messages.
REFRESH_SECONDS = 1.0

# The limit a run's bar follows, in this order when several are set: its row key and unit.
FOLLOWED = (
    ("env_steps", "charts/env_steps", "env steps"),
    ("seconds", "charts/wall_seconds", "s"),
    ("updates", "charts/updates", "updates"),
)


def shown() -> bool:
    """Whether bars are drawn: ``WORKBENCH_PROGRESS`` when set, else inside a Jupyter kernel."""
    forced = os.environ.get("WORKBENCH_PROGRESS")
    if forced is not None:
        return forced.strip().lower() not in ("", "0", "false", "no", "off")
    return in_kernel()


def in_kernel() -> bool:
    """True in a Jupyter kernel's shell; not merely where ipykernel is imported (nbval's pytest
    process imports it and runs no kernel)."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return shell is not None and getattr(shell, "kernel", None) is not None


def each(items: Iterable[T], desc: str, unit: str = "run") -> Iterator[T]:
    """``items`` one by one behind a bar that advances after each; runs started inside the loop
    draw no bar of their own."""
    global _open_loops
    items = list(items)
    with tqdm(
        total=len(items), desc=desc, unit=unit, disable=not shown(), mininterval=REFRESH_SECONDS
    ) as bar:
        _open_loops += 1
        try:
            for item in items:
                yield item
                bar.update(1)
        finally:
            _open_loops -= 1


@contextmanager
def follow(run: Any) -> Iterator[None]:
    """A bar over the first limit ``run`` has of env steps, seconds and updates (none: a counter
    of env steps), fed by the run's rows while the block runs. Nothing when bars are hidden or an
    enclosing loop draws one."""
    if not shown() or _open_loops:
        yield
        return
    name, key, unit = next(
        ((n, k, u) for n, k, u in FOLLOWED if getattr(run.limits, n) is not None), FOLLOWED[0]
    )
    total = getattr(run.limits, name)
    bar = tqdm(total=total, desc=str(run.name), unit=unit, mininterval=REFRESH_SECONDS)
    following = True  # the run keeps its row callbacks; this one goes quiet when the block ends
    drawn_at = time.monotonic()

    def on_row(row: dict) -> None:
        nonlocal drawn_at
        if not following or "event" in row or key not in row:
            return
        bar.n = min(row[key], total) if total is not None else row[key]
        if row.get("charts/mean_return") is not None:
            bar.set_postfix(mean_return=f"{row['charts/mean_return']:.1f}", refresh=False)
        # Rows can come many times a second (one per update); the bar is redrawn at most once a
        # REFRESH_SECONDS, and close() draws the last state.
        if time.monotonic() - drawn_at >= REFRESH_SECONDS:
            bar.refresh()
            drawn_at = time.monotonic()

    run.on_row(on_row)
    try:
        yield
    finally:
        following = False
        bar.close()
