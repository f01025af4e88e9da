"""The agent on screen: a checkpoint's policy plays a game live in a notebook.

``watch(checkpoint, recipe)`` loads the run's weights (``runs.evaluation.load_policy``) and plays
one whole game (``runs.evaluation.play``) in a background thread, at ``fps`` agent steps per second,
in an image widget with the score above it. The cell returns at once; the returned ``GameViewer``
has ``wait()``, ``stop()`` and the final ``score``.

Each drawn frame is a message to the browser on the kernel's output channel, so the screen is
redrawn at most ``MAX_DRAWS_PER_SECOND`` times a second whatever the game's pace, and the score line
only when the score changes: a notebook run under nbval (which reads a cell's messages only when
the cell ends) would otherwise overflow the channel's queue of 1,000 messages and lose the cell's
last one (CI's "Timeout ... waiting for output" of notebook 09 at 600 agent steps a second).
"""

from __future__ import annotations

import html
import threading
import time
from pathlib import Path
from typing import Any

import ipywidgets as widgets
import numpy as np
import torch

from workbench.runs.evaluation import EVALUATION_SEED, load_policy, play

__all__ = ["GameViewer", "MAX_DRAWS_PER_SECOND", "watch"]

# Smooth to the eye (Pong's real time is 15 agent steps a second), and 40 s of a game played at any
# pace stays at 800 drawn frames: under the output queue's 1,000 messages.
MAX_DRAWS_PER_SECOND = 20.0


def png(screen: np.ndarray, scale: int = 2) -> bytes:
    """An RGB ``[H, W, 3]`` uint8 screen as PNG bytes, each pixel ``scale`` x ``scale``."""
    import cv2

    big = np.repeat(np.repeat(screen, scale, axis=0), scale, axis=1)
    ok, data = cv2.imencode(".png", big[..., ::-1])
    if not ok:
        raise RuntimeError("OpenCV could not encode the frame as PNG")
    return data.tobytes()


class GameViewer:
    """One game of ``model`` on ``env_id``, drawn frame by frame into ``widget``.

    Args:
        model: an ``ActorCritic`` (``model(obs) -> (logits, value)``).
        env_id, env_options: the game and the training run's preprocessing (no sticky actions).
        seed: the game's seed (default: the evaluation seed, apart from training's).
        fps: agent steps played per second (an agent step is 4 emulator frames; 15 is real
            time); the screen is redrawn at most ``MAX_DRAWS_PER_SECOND`` times a second.
        deterministic: argmax actions instead of sampling.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        env_id: str,
        *,
        env_options: dict[str, Any] | None = None,
        seed: int = EVALUATION_SEED,
        fps: float = 30.0,
        deterministic: bool = False,
        scale: int = 2,
    ) -> None:
        if not fps > 0:
            raise ValueError(f"fps must be positive, got {fps!r}")
        self.model, self.env_id = model, env_id
        self.env_options = dict(env_options or {})
        self.seed, self.fps, self.deterministic, self.scale = seed, fps, deterministic, scale
        self.image = widgets.Image(format="png")
        self.label = widgets.HTML()
        self.widget = widgets.VBox([self.label, self.image])
        self.score: tuple[int, int] = (0, 0)
        self.steps = 0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> GameViewer:
        if self._thread is not None:
            raise RuntimeError("this viewer already played; make a new one to watch again")
        self._thread = threading.Thread(target=self._play, name="workbench-watch", daemon=True)
        self._thread.start()
        return self

    def _play(self) -> None:
        period, draw_period = 1.0 / self.fps, 1.0 / MAX_DRAWS_PER_SECOND
        drawn_at, drawn_score, frame = -float("inf"), None, None
        try:
            frames = play(
                self.model,
                self.env_id,
                env_options=self.env_options,
                seed=self.seed,
                deterministic=self.deterministic,
            )
            for frame in frames:
                shown = time.monotonic()
                self.score, self.steps = frame.score, frame.step
                if shown - drawn_at >= draw_period:
                    self.image.value, drawn_at = png(frame.screen, self.scale), shown
                if frame.score != drawn_score:
                    self.label.value, drawn_score = self._score_line(), frame.score
                if self._stop.is_set():
                    break
                time.sleep(max(0.0, period - (time.monotonic() - shown)))
            if frame is not None:  # the last position, whatever the draw rate skipped
                self.image.value = png(frame.screen, self.scale)
            ended = "stopped" if self._stop.is_set() else "game over"
            self.label.value = f"{self._score_line()} after {self.steps} steps &mdash; {ended}"
        except BaseException as error:  # shown in the widget, kept for the caller
            self.error = error
            self.label.value = f'<span style="color:#b00">{html.escape(repr(error))}</span>'

    def _score_line(self) -> str:
        return f"<b>agent {self.score[1]} : {self.score[0]} opponent</b>"

    def stop(self) -> None:
        """End the game at the next frame."""
        self._stop.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the game is over (or ``timeout`` seconds); True if it ended."""
        if self._thread is None:
            return False
        self._thread.join(timeout)
        return not self._thread.is_alive()

    @property
    def playing(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget)


def watch(
    checkpoint: "str | Path",
    recipe: Any,
    *,
    fps: float = 30.0,
    seed: int = EVALUATION_SEED,
    deterministic: bool = False,
) -> GameViewer:
    """Play one game of ``checkpoint`` (a run's folder or its ``checkpoint.pt``, made by
    ``recipe``) live: returns the started ``GameViewer``; show it as a cell's last line."""
    model = load_policy(recipe, checkpoint)
    viewer = GameViewer(
        model,
        recipe.env_id,
        env_options=dict(recipe.env_options),
        seed=seed,
        fps=fps,
        deterministic=deterministic,
    )
    return viewer.start()
