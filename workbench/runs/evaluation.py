"""An evaluation that does not trust the training curve: a checkpoint's policy plays whole games.

Training returns come from the envs the policy learned on, while it learned. ``evaluate`` loads a
run's ``checkpoint.pt`` into a fresh model and plays ``games`` whole games (no life-loss ends, raw
rewards) on envs seeded apart from training's (training env ``i`` gets ``seed + i``; evaluation
starts at ``EVALUATION_SEED``), with the same preprocessing as training, and reports each game's
raw score. ``play`` yields one game frame by frame as a person sees it (the RGB screen beside the
agent's 84x84 gray view), for ``lab.watch`` and ``save_animation``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from workbench.checks import positive_int
from workbench.envs import env_spaces, is_atari, make_vector_env
from workbench.models import QNetwork, QPolicy, RecurrentQNetwork, RecurrentQPolicy
from workbench.runs.checkpoints import load_checkpoint_file, save_atomically
from workbench.runs.recipe_run import RunnableRecipe

__all__ = [
    "EVALUATION_SEED",
    "Evaluation",
    "Frame",
    "RandomPolicy",
    "evaluate",
    "export_policy",
    "load_policy",
    "play",
    "save_animation",
]

EVALUATION_SEED = 1_000_003
"""First env seed of an evaluation: far from any training seed (``seed + i`` for a few envs)."""


class RandomPolicy(torch.nn.Module):
    """Uniformly random actions through the ``ActorCritic`` interface (``act``): the random-play
    baseline of Mnih et al. (2015)'s tables (Pong: -20.7), played by ``evaluate`` like an agent."""

    def __init__(self, num_actions: int) -> None:
        super().__init__()
        if num_actions < 1:
            raise ValueError(f"num_actions must be positive, got {num_actions!r}")
        self.num_actions = num_actions

    def act(self, obs: torch.Tensor, deterministic: bool = False) -> dict[str, torch.Tensor]:
        """One uniformly random action per row of the ``[B, *obs_shape]`` batch ``obs``."""
        return {"action": torch.randint(self.num_actions, (obs.shape[0],))}


@dataclass(frozen=True)
class Evaluation:
    """Raw scores of whole games played by one checkpoint."""

    returns: list[float]
    lengths: list[int]
    """Agent steps of each game."""
    env_id: str
    env_options: dict[str, Any] = field(default_factory=dict)
    seed: int = EVALUATION_SEED
    deterministic: bool = False

    @property
    def mean(self) -> float:
        return float(np.mean(self.returns))

    @property
    def std(self) -> float:
        return float(np.std(self.returns))

    def to_dict(self) -> dict[str, Any]:
        return {
            "env_id": self.env_id,
            "env_options": self.env_options,
            "seed": self.seed,
            "deterministic": self.deterministic,
            "games": len(self.returns),
            "mean_return": self.mean,
            "std_return": self.std,
            "returns": self.returns,
            "lengths": self.lengths,
        }


def load_policy(recipe: RunnableRecipe, checkpoint: "str | Path") -> torch.nn.Module:
    """``recipe``'s model (``recipe.make_model``, sized by its ``env_options``) with the weights of
    ``checkpoint`` (a run's folder or its ``checkpoint.pt``: a ``Run``'s, a SEED run's or an
    Ape-X DQN run's), in eval mode on the CPU. A Q-network comes back as a ``QPolicy`` (R2D2's
    recurrent one as a ``RecurrentQPolicy``, which carries each env's state): greedy when an
    evaluation asks for determinism, else epsilon-greedy at ``EVALUATION_EPSILON``."""
    saved = load_checkpoint_file(checkpoint)
    state = saved.get("state", {})
    weights = model_weights(state)
    if weights is None:
        raise ValueError(
            f"{checkpoint} holds no model weights under state['algo'], state['learner'] or "
            "state['agent']; pass the checkpoint of a Run (PPO, A2C, DQN), of a SEED run "
            "(V-trace, R2D2) or of an Ape-X DQN run."
        )
    env_id = env_id_of(state)
    if env_id not in (None, recipe.env_id):
        raise ValueError(
            f"{checkpoint} is a run on {env_id}, but the recipe {recipe.name!r} plays "
            f"{recipe.env_id}; pass the recipe the run was made from."
        )
    observation_space, action_space = env_spaces(recipe.env_id, **dict(recipe.env_options))
    if not isinstance(action_space, gym.spaces.Discrete):
        raise ValueError(
            f"{recipe.name!r} acts in {recipe.env_id}'s continuous actions; only discrete-action "
            "policies (a Run's, a SEED run's, an Ape-X DQN run's) are played here."
        )
    model = recipe.make_model(observation_space.shape, int(action_space.n))
    if isinstance(model, QNetwork):  # trained inside EpsilonGreedy: its epsilon is training's
        prefix = "q_network."
        if any(key.startswith(prefix) for key in weights):
            weights = {k[len(prefix) :]: v for k, v in weights.items() if k.startswith(prefix)}
        model.load_state_dict(weights)
        return QPolicy(model).eval()
    model.load_state_dict(weights)
    if isinstance(model, RecurrentQNetwork):
        return RecurrentQPolicy(model).eval()
    return model.eval()


def model_weights(state: dict[str, Any]) -> dict[str, torch.Tensor] | None:
    """The model weights in a checkpoint's state: a Run keeps its learner under ``"algo"`` (a
    replay learner inside its ``ReplayAgent``'s ``"learner"``), a SEED run under ``"learner"``,
    an Ape-X run under ``"agent"`` (None: none of these)."""
    holder = state.get("algo", state.get("learner", state.get("agent")))
    if isinstance(holder, dict) and "model" not in holder:
        holder = holder.get("learner")  # a ReplayAgent's state: its DQN's
    return holder.get("model") if isinstance(holder, dict) else None


def env_id_of(state: dict[str, Any]) -> str | None:
    """The env a checkpoint's run played: a Run's ``env_id``, a SEED run's config's."""
    config = state.get("config")
    return state.get("env_id", config.get("env_id") if isinstance(config, dict) else None)


def export_policy(checkpoint: "str | Path", path: "str | Path") -> Path:
    """Keep only the model weights of ``checkpoint`` (no optimizer, no replay) in ``path``, in
    the checkpoint's layout, so ``load_policy`` reads either: a trained agent small enough for
    ``data/``."""
    saved = load_checkpoint_file(checkpoint)
    state = saved["state"]
    policy = {
        "kind": saved.get("kind"),
        "name": saved.get("name"),
        "env_steps": saved.get("env_steps"),
        "wall_seconds": saved.get("wall_seconds"),
        "state": {"env_id": env_id_of(state), "algo": {"model": model_weights(state)}},
    }
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return save_atomically(policy, path)


def _evaluation_env_options(env_id: str, env_options: dict[str, Any] | None) -> dict[str, Any]:
    options = dict(env_options or {})
    if is_atari(env_id):
        options["episodic_life"] = False  # a game ends when the game is over, not at a lost life
    return options


@torch.no_grad()
def evaluate(
    model: torch.nn.Module,
    env_id: str,
    *,
    games: int = 10,
    env_options: dict[str, Any] | None = None,
    seed: int = EVALUATION_SEED,
    deterministic: bool = False,
) -> Evaluation:
    """``games`` whole games of ``model`` (an ``ActorCritic`` or a ``QPolicy``: ``act(obs,
    deterministic)``; a ``RecurrentQPolicy``, told where each game starts), one per env of a
    vector env seeded ``seed``, ``seed + 1``, ...; each env's first game counts.

    Actions are sampled from the policy (torch seeded with ``seed``) unless ``deterministic``
    (argmax). ``env_options`` are the training run's (its screen size, sticky actions, ...)."""
    positive_int(games, "games")
    options = _evaluation_env_options(env_id, env_options)
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    returns: list[float | None] = [None] * games
    lengths = [0] * games
    try:
        with make_vector_env(env_id, games, seed=seed, **options) as env:
            obs, _ = env.reset(seed=seed)
            if isinstance(model, RecurrentQPolicy):
                model.reset()
            first = np.ones(games, dtype=bool)
            while any(r is None for r in returns):
                observation = torch.as_tensor(obs)
                if isinstance(model, RecurrentQPolicy):
                    out = model.act(observation, deterministic, first=torch.as_tensor(first))
                else:
                    out = model.act(observation, deterministic=deterministic)
                obs, _, _, _, info = env.step(out["action"].numpy())
                first = np.asarray(info["episode_done"], dtype=bool)  # same-step autoreset
                for i in np.flatnonzero(info["episode_done"]):
                    if returns[i] is None:
                        returns[i] = float(info["episode_return"][i])
                        lengths[i] = int(info["episode_length"][i])
    finally:
        torch.random.set_rng_state(generator_state)
    return Evaluation(
        returns=[float(r) for r in returns],
        lengths=lengths,
        env_id=env_id,
        env_options=dict(env_options or {}),
        seed=seed,
        deterministic=deterministic,
    )


@dataclass(frozen=True)
class Frame:
    """One agent step of a watched game."""

    screen: np.ndarray
    """uint8 ``[210, 160, 3]``: the game as a person sees it."""
    view: np.ndarray
    """uint8 ``[H, W]``: the newest frame of the agent's stacked gray observation."""
    score: tuple[int, int]
    """(opponent, agent) points so far (Pong-style: negative rewards count for the opponent)."""
    step: int


@torch.no_grad()
def play(
    model: torch.nn.Module,
    env_id: str,
    *,
    env_options: dict[str, Any] | None = None,
    seed: int = EVALUATION_SEED,
    deterministic: bool = False,
    max_steps: int = 27_000,
) -> Iterator[Frame]:
    """One whole game of ``model``, frame by frame.

    Two ale_py envs run in lockstep from the same seed with the same actions: the agent's (its
    training preprocessing) and a screen env (RGB at the native 210x160, one frame, no stacking).
    Without sticky actions the emulator is deterministic, so both play the same game; the screen
    env is checked against the agent's rewards at every step."""
    options = _evaluation_env_options(env_id, env_options)
    if not is_atari(env_id):
        raise ValueError(f"play shows Atari games; {env_id} is not an ALE id")
    if options.get("repeat_action_probability", None) not in (0, 0.0):
        raise ValueError(
            "play needs repeat_action_probability=0 in env_options: with sticky actions the two "
            "lockstep emulators draw different repeats and stop showing the same game."
        )
    screen_options = {**options, "grayscale": False, "frame_stack": 1, "screen_size": (210, 160)}
    generator = torch.Generator().manual_seed(seed)
    if isinstance(model, RecurrentQPolicy):
        model.reset()  # one game, from zero state
    score = [0, 0]
    agent = make_vector_env(env_id, 1, seed=seed, num_threads=1, **options)
    screen = make_vector_env(env_id, 1, seed=seed, num_threads=1, **screen_options)
    try:
        obs, _ = agent.reset(seed=seed)
        rgb, _ = screen.reset(seed=seed)
        for step in range(max_steps):
            yield Frame(screen=rgb[0, -1], view=obs[0, -1], score=(score[0], score[1]), step=step)
            if isinstance(model, (QPolicy, RecurrentQPolicy)):
                action = model.act(torch.as_tensor(obs), deterministic, generator)["action"]
            else:
                logits, _ = model(torch.as_tensor(obs))
                if deterministic:
                    action = logits.argmax(-1)
                else:
                    probabilities = logits.softmax(-1).float()
                    action = torch.multinomial(probabilities, 1, generator=generator)[:, 0]
            obs, reward, _, _, info = agent.step(action.numpy())
            rgb, screen_reward, _, _, screen_info = screen.step(action.numpy())
            done = bool(info["episode_done"][0])
            if screen_reward[0] != reward[0] or bool(screen_info["episode_done"][0]) != done:
                raise RuntimeError(f"the screen env left the agent's game at step {step}")
            if reward[0] > 0:  # the sign of a (clipped) reward: who scored
                score[1] += 1
            elif reward[0] < 0:
                score[0] += 1
            if done:  # same-step autoreset: the last screen is the final observation
                last = screen_info["final_obs"][0, -1]
                yield Frame(
                    screen=last,
                    view=info["final_obs"][0, -1],
                    score=(score[0], score[1]),
                    step=step + 1,
                )
                return
    finally:
        agent.close()
        screen.close()


def save_animation(
    frames: "list[Frame] | Iterator[Frame]",
    path: "str | Path",
    *,
    every: int = 2,
    fps: int = 25,
    max_bytes: int = 3_000_000,
) -> Path:
    """Write the screens of ``frames`` (every ``every``-th agent step) as an animated GIF with
    OpenCV; raises if the file is over ``max_bytes`` (save fewer frames: a larger ``every``)."""
    import cv2

    kept = [f.screen[..., ::-1].copy() for i, f in enumerate(frames) if i % every == 0]  # BGR
    if not kept:
        raise ValueError("no frames to save")
    animation = cv2.Animation()
    animation.frames = kept
    animation.durations = [int(1000 / fps)] * len(kept)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # No dithering: Atari screens have a handful of exact colours, and a dithered background
    # costs 8x the bytes (0.6 KB instead of 4.8 KB a frame for Pong).
    if not cv2.imwriteanimation(str(path), animation, [cv2.IMWRITE_GIF_DITHER, 3]):
        raise RuntimeError(f"OpenCV could not write {path}")
    size = path.stat().st_size
    if size > max_bytes:
        raise ValueError(
            f"{path} is {size:,} bytes, over {max_bytes:,}; keep fewer frames (every={every * 2})"
        )
    return path
