"""Trunks: what turns observations into features. ``NatureCNN`` (Atari images) and ``MLP`` (vector
observations) take ``[N, *obs_shape]`` and give ``[N, output_size]``; ``make_trunk`` picks one."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

__all__ = [
    "MLP",
    "NatureCNN",
    "Shape",
    "TRUNK_KINDS",
    "UniverseCNN",
    "check_num_actions",
    "flatten_batch",
    "make_trunk",
    "orthogonal_init",
    "resolve_trunk",
]

Shape = tuple[int, ...]


def orthogonal_init(module: nn.Module, gain: float) -> None:
    """Orthogonal weights, zero biases (Saxe et al. 2014), as OpenAI baselines and CleanRL do."""
    for layer in module.modules():
        if isinstance(layer, (nn.Linear, nn.Conv2d)):
            nn.init.orthogonal_(layer.weight, gain)
            nn.init.zeros_(layer.bias)


def flatten_batch(obs: torch.Tensor, obs_shape: Shape) -> tuple[torch.Tensor, torch.Size]:
    """``[B, *obs_shape]`` or ``[T, B, *obs_shape]`` -> (``[N, *obs_shape]``, leading dims)."""
    lead = obs.dim() - len(obs_shape)
    expected = f"[B, {', '.join(map(str, obs_shape))}] or [T, B, {', '.join(map(str, obs_shape))}]"
    if lead < 0 or tuple(obs.shape[lead:]) != tuple(obs_shape):
        raise ValueError(
            f"observations of shape {tuple(obs.shape)} do not end in obs_shape={tuple(obs_shape)}; "
            f"expected {expected} (check the env's observation_space.shape, and that images are "
            f"channels-first)"
        )
    if lead == 0:
        raise ValueError(
            f"unbatched observation of shape {tuple(obs.shape)}; expected {expected}: "
            f"add a batch dimension with obs.unsqueeze(0)"
        )
    if lead > 2:
        raise ValueError(
            f"observations of shape {tuple(obs.shape)} have {lead} leading dimensions; expected "
            f"{expected}: reshape the leading dimensions to [T, B] or [B]"
        )
    leading = obs.shape[:lead]
    return obs.reshape(-1, *obs_shape), leading


class NatureCNN(nn.Module):
    """The DQN convolutional trunk of Mnih et al. 2015, "Human-level control through deep
    reinforcement learning" (Nature 518), Methods, "Model architecture": conv 32 8x8 stride 4,
    conv 64 4x4 stride 2, conv 64 3x3 stride 1, fully connected 512, ReLU after each.

    Args:
        in_channels: C, the stacked frames (4 in the paper).
        image_size: (H, W); 84x84 in the paper. Any size from 36x36 works: the flatten size is
            measured with a dummy forward pass here, not hard-coded.
        small: the smaller network of Mnih et al. 2013, "Playing Atari with Deep Reinforcement
            Learning" (Sec. 5): conv 16 8x8 stride 4, conv 32 4x4 stride 2, fully connected 256.
            About 3x fewer multiply-adds; on a 2-core CPU its update runs 2.3x faster at 84x84 and
            4.4x at 64x64 (``workbench.runs.tuning``), and it learns Pong.

    ``forward(x)``: ``[N, C, H, W]`` -> float ``[N, 512]``. uint8 input is scaled by 1/255 here, so
    replay and rollout buffers can stay uint8 (4x smaller, and 4x less to copy to an accelerator);
    floating-point input is taken as already scaled to [0, 1].
    """

    def __init__(
        self, in_channels: int = 4, image_size: tuple[int, int] = (84, 84), *, small: bool = False
    ) -> None:
        super().__init__()
        self.obs_shape: Shape = (int(in_channels), *map(int, image_size))
        if small:
            layers = [nn.Conv2d(in_channels, 16, kernel_size=8, stride=4), nn.ReLU()]
            layers += [nn.Conv2d(16, 32, kernel_size=4, stride=2), nn.ReLU()]
            hidden = 256
        else:
            layers = [nn.Conv2d(in_channels, 32, kernel_size=8, stride=4), nn.ReLU()]
            layers += [nn.Conv2d(32, 64, kernel_size=4, stride=2), nn.ReLU()]
            layers += [nn.Conv2d(64, 64, kernel_size=3, stride=1), nn.ReLU()]
            hidden = 512
        self.conv = nn.Sequential(*layers, nn.Flatten())
        try:
            with torch.no_grad():
                flat = self.conv(torch.zeros(1, *self.obs_shape)).shape[1]
        except RuntimeError as error:
            raise ValueError(
                f"NatureCNN needs images of at least 36x36 pixels, got image_size={image_size}; "
                f"resize the frames (ale_py's AtariVectorEnv does 84x84) or use an MLP trunk"
            ) from error
        self.fc = nn.Sequential(nn.Linear(flat, hidden), nn.ReLU())
        self.output_size = hidden
        orthogonal_init(self, math.sqrt(2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 4:
            raise ValueError(f"NatureCNN takes [N, C, H, W], got shape {tuple(x.shape)}")
        if x.dtype == torch.uint8:
            x = x.to(self.fc[0].weight.dtype) / 255.0
        return self.fc(self.conv(x))


class UniverseCNN(nn.Module):
    """The convolutional trunk of OpenAI's universe-starter-agent (A3C on Pong on a laptop, 2016)
    for small frames: four conv layers of 32 3x3 filters, stride 2, padding 1, ELU after each
    (42x42 -> 21 -> 11 -> 6 -> 3), then fully connected 256 with ReLU (the starter agent feeds an
    LSTM of 256 there; a feed-forward policy over stacked frames needs none).

    On 42x42 frames it costs a third of the small NatureCNN's multiply-adds at 84x84, and its
    inference runs at 13k-20k observations per second on one core of this project's CPUs.

    ``forward(x)``: ``[N, C, H, W]`` -> float ``[N, 256]``; uint8 input is scaled by 1/255 here.
    """

    def __init__(self, in_channels: int = 4, image_size: tuple[int, int] = (42, 42)) -> None:
        super().__init__()
        self.obs_shape: Shape = (int(in_channels), *map(int, image_size))
        layers: list[nn.Module] = []
        channels = int(in_channels)
        for _ in range(4):
            layers += [nn.Conv2d(channels, 32, kernel_size=3, stride=2, padding=1), nn.ELU()]
            channels = 32
        self.conv = nn.Sequential(*layers, nn.Flatten())
        with torch.no_grad():
            flat = self.conv(torch.zeros(1, *self.obs_shape)).shape[1]
        self.fc = nn.Sequential(nn.Linear(flat, 256), nn.ReLU())
        self.output_size = 256
        orthogonal_init(self, math.sqrt(2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 4:
            raise ValueError(f"UniverseCNN takes [N, C, H, W], got shape {tuple(x.shape)}")
        if x.dtype == torch.uint8:
            x = x.to(self.fc[0].weight.dtype) / 255.0
        return self.fc(self.conv(x))


class MLP(nn.Module):
    """A fully connected trunk for vector observations, as in the MuJoCo / classic-control
    networks of Schulman et al. 2017 (PPO, Sec. 6.1: two hidden layers of 64 units, tanh).

    Args:
        in_features: size of one (flattened) observation.
        hidden: units per hidden layer; ``output_size`` is the last one (``in_features`` if none).
        activation: module class applied after every layer.

    ``forward(x)``: ``[N, ...]``, ``in_features`` elements per row -> float ``[N, output_size]``.
    """

    def __init__(
        self,
        in_features: int,
        hidden: Sequence[int] = (64, 64),
        activation: type[nn.Module] = nn.Tanh,
    ) -> None:
        super().__init__()
        self.obs_shape: Shape = (int(in_features),)
        layers: list[nn.Module] = []
        size = int(in_features)
        for units in hidden:
            layers += [nn.Linear(size, int(units)), activation()]
            size = int(units)
        self.layers = nn.Sequential(*layers)
        self.output_size = size
        orthogonal_init(self, math.sqrt(2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Observations arrive as float64 (from numpy) or integers; the weights decide the dtype.
        weight = next(self.parameters(), None)
        return self.layers(x.flatten(1).to(torch.float32 if weight is None else weight.dtype))


TRUNK_KINDS = ("auto", "cnn", "cnn-small", "cnn-universe", "mlp")


def make_trunk(
    obs_shape: Sequence[int],
    kind: str = "auto",
    *,
    hidden: Sequence[int] = (64, 64),
    activation: type[nn.Module] = nn.Tanh,
) -> NatureCNN | UniverseCNN | MLP:
    """The trunk for observations of shape ``obs_shape`` (one observation, no batch dimension).

    Args:
        obs_shape: ``(C, H, W)`` for images (channels first, as ale_py's frame stack gives them),
            ``(D,)`` for vectors.
        kind: ``"auto"`` (3-D -> NatureCNN, 1-D -> MLP), ``"cnn"``, ``"cnn-small"`` (Mnih et al.
            2013's smaller CNN, ``NatureCNN(small=True)``), ``"cnn-universe"`` (``UniverseCNN``,
            for 42x42 frames) or ``"mlp"`` (which flattens any shape).
        hidden, activation: the MLP's layers; unused by the CNN.
    """
    obs_shape = tuple(int(d) for d in obs_shape)
    if kind not in TRUNK_KINDS:
        raise ValueError(f"kind must be one of {TRUNK_KINDS}, got {kind!r}")
    if kind == "auto":
        if len(obs_shape) == 3:
            if obs_shape[-1] <= 4 < obs_shape[0]:
                raise ValueError(
                    f"obs_shape={obs_shape} looks channels-last (H, W, C); NatureCNN wants "
                    f"(C, H, W): transpose observations with obs.permute(..., 2, 0, 1) "
                    f"(or pass kind='cnn' if {obs_shape[0]} really is the channel count)"
                )
            kind = "cnn"
        elif len(obs_shape) == 1:
            kind = "mlp"
        else:
            raise ValueError(
                f"obs_shape={obs_shape} is neither an image (C, H, W) nor a vector (D,); "
                f"add a channel axis for single-channel images ((1, H, W)), or pass kind='mlp' to "
                f"flatten each observation into a vector"
            )
    if kind in ("cnn", "cnn-small", "cnn-universe"):
        if len(obs_shape) != 3:
            raise ValueError(
                f"kind={kind!r} needs image observations (C, H, W), got obs_shape={obs_shape}; "
                f"use kind='mlp' for vector observations"
            )
        if kind == "cnn-universe":
            return UniverseCNN(obs_shape[0], obs_shape[1:])
        return NatureCNN(obs_shape[0], obs_shape[1:], small=kind == "cnn-small")
    return MLP(math.prod(obs_shape), hidden, activation)


def resolve_trunk(
    obs_shape: Shape, trunk: str | nn.Module, hidden: Sequence[int], activation: type[nn.Module]
) -> nn.Module:
    if isinstance(trunk, nn.Module):
        if not isinstance(getattr(trunk, "output_size", None), int):
            raise ValueError("a trunk module must expose an int .output_size (its feature size)")
        return trunk
    return make_trunk(obs_shape, trunk, hidden=hidden, activation=activation)


def check_num_actions(num_actions: int) -> int:
    if isinstance(num_actions, bool) or int(num_actions) != num_actions or num_actions < 1:
        raise ValueError(
            f"num_actions must be a positive int (the env's action_space.n), got {num_actions!r}"
        )
    return int(num_actions)
