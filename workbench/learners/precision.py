"""The learner's precision levers, chosen by a short measurement on the machine a run starts on.

Whether bfloat16 autocast and channels-last convolutions pay depends on the CPU, not on the
algorithm: on the AMD EPYC of this project's 2-core machines bfloat16 made a NatureCNN update 2.6x
faster and channels-last nothing beside it; on an Intel Xeon with avx512_bf16 but no AMX bfloat16
bought almost nothing and channels-last 1.6x (``policy_gradient``'s notes); on an AVX2-only EPYC
bfloat16 is emulated and ten times slower, and ``torch.compile`` made the universe-starter-agent
CNN's step 1.57x faster (1.16x on the bf16 EPYC). A recipe that must hold on all of them measures
instead of guessing: ``choose_precision`` times one minibatch gradient step of the recipe's own
model under each combination and returns the fastest; with ``try_compile`` it then times the
fastest precision compiled under each memory layout, and keeps the fastest compiled step when it
is ``COMPILE_GAIN`` faster. Both layouts, because compiling can reverse their order: the dueling
Q-network of the Ape-X and DQN Pong recipes (batch 64, AVX2-only EPYC, one thread) stepped 2,494
samples/s eager channels-last and 1,076 contiguous, but compiled 2,435 and 3,174. Every precision
that is not emulated is compiled, not only the fastest eager one, because compiling can also
reverse the precisions' order.

A learner whose update is more than its network's one gradient step gives its own update to time
(``make_update``): a DQN update runs the network three times (online, target, double-Q action)
and computes priorities, so compiling gains more than the network's step shows. On a 2-core Xeon
with avx512_bf16 (one thread, batch 64, the Ape-X Pong recipe's dueling network) the network's
step ranked bfloat16/channels-last first and compiled it 1.09x faster, under ``COMPILE_GAIN``, so an
Ape-X run learned at about 23 updates/s eager; timing DQN's update instead: 24.8 updates/s eager
bfloat16/channels-last, 32.0 compiled, and 44.6 compiled float32/contiguous.
"""

from __future__ import annotations

import copy
import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch import nn

from workbench.learners.base import AUTOCAST_DTYPES, compiled

__all__ = [
    "COMPILE_GAIN",
    "PrecisionChoice",
    "choose_precision",
    "update_rate",
    "with_measured_precision",
]

UpdateFactory = Callable[..., Callable[[], None]]
"""``make_update(autocast=..., channels_last=..., compile=...) -> step``: a learner built under
those levers and a call of its own update on a fixed batch (``learners.dqn.dqn_update_factory``)."""

COMPILE_GAIN = 1.1
"""The least speed-up of a compiled step over the eager one for ``choose_precision`` to compile:
below it the compiling (10-20 s at start) and a second code path buy too little."""


@dataclass(frozen=True)
class PrecisionChoice:
    """The fastest combination and what each one measured (samples per second through a forward
    and backward pass and an Adam step)."""

    autocast: str | None
    channels_last: bool
    rates: dict[str, float] = field(default_factory=dict)
    """``"<autocast or float32>/<channels_last or contiguous>[/compiled]"`` -> samples per
    second."""
    compile: bool = False

    @property
    def rate(self) -> float:
        """The chosen combination's samples per second."""
        return self.rates[label(self.autocast, self.channels_last, self.compile)]

    def describe(self) -> str:
        """Each combination's samples per second, as a run's log line shows them."""
        return ", ".join(f"{name} {rate:,.0f}" for name, rate in self.rates.items())

    @property
    def gain(self) -> float:
        """The chosen combination's rate over plain float32 (contiguous)."""
        return self.rate / self.rates[label(None, False)]


def label(autocast: str | None, channels_last: bool, compile: bool = False) -> str:
    layout = "channels_last" if channels_last else "contiguous"
    return f"{autocast or 'float32'}/{layout}" + ("/compiled" if compile else "")


def update_rate(
    model: nn.Module,
    obs_shape: tuple[int, ...],
    minibatch_size: int,
    *,
    autocast: str | None,
    channels_last: bool,
    seconds: float = 1.0,
    device: "str | torch.device" = "cpu",
    compile: bool = False,
    give_up_below: float | None = None,
    make_update: UpdateFactory | None = None,
) -> float:
    """Samples per second of gradient steps (forward, backward, Adam) of a copy of ``model`` on
    random uint8 observations ``[minibatch_size, *obs_shape]``, at the current torch threads, on
    ``device`` (a GPU's figure waits for its kernels to finish). With ``compile`` the forward
    pass goes through ``torch.compile`` first (its compiling is not timed).

    ``give_up_below`` (samples/s): stop at a warm-up step already that slow and return its rate,
    a step's worth of measurement, enough to rank it behind a rival twice as fast. The first step,
    which pays for oneDNN's kernel choice, gives up only below a quarter of it. So an emulated
    precision (bfloat16 on an AVX2-only CPU: 5-10x slower, several seconds a step) costs one step
    instead of a whole timed window.

    The model's forward must take ``[N, *obs_shape]`` and return a tensor or a tuple of tensors
    (``ActorCritic``, ``QNetwork``); the loss is the mean square of every output, which costs what
    a real loss costs beside the network. ``make_update`` times the learner's own update instead
    (``minibatch_size``: its batch)."""
    if autocast not in (None, *AUTOCAST_DTYPES):
        raise ValueError(
            f"autocast must be None or one of {list(AUTOCAST_DTYPES)}, got {autocast!r}"
        )
    if not seconds > 0 or minibatch_size < 1:
        raise ValueError(
            f"need seconds > 0 and minibatch_size >= 1, got {seconds}, {minibatch_size}"
        )
    device = torch.device(device)
    synchronize = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    if make_update is not None:
        step = make_update(autocast=autocast, channels_last=channels_last, compile=compile)
    else:
        step = network_step(
            model, obs_shape, minibatch_size, autocast, channels_last, device, compile
        )

    for margin in (4.0, 1.0):  # the first call pays for oneDNN's kernel choice
        started = time.perf_counter()
        step()
        synchronize()
        rate = minibatch_size / (time.perf_counter() - started)
        if give_up_below is not None and rate * margin < give_up_below:
            return rate
    samples, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        step()
        synchronize()
        samples += minibatch_size
    return samples / (time.perf_counter() - started)


def network_step(
    model: nn.Module,
    obs_shape: tuple[int, ...],
    minibatch_size: int,
    autocast: str | None,
    channels_last: bool,
    device: torch.device,
    compile: bool,
) -> Callable[[], None]:
    """One gradient step (forward, backward, Adam) of a copy of ``model`` on random uint8
    observations, the loss the mean square of its outputs (``update_rate``)."""
    model = copy.deepcopy(model).to(device)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-8)
    generator = torch.Generator().manual_seed(0)
    obs = torch.randint(
        0, 256, (minibatch_size, *obs_shape), dtype=torch.uint8, generator=generator
    )
    # As PolicyGradient.forward_obs does: frames scaled once, in the autocast dtype if any.
    dtype = AUTOCAST_DTYPES[autocast] if autocast else torch.float32
    x = obs.to(device).to(dtype).div_(255.0)  # contiguous, as the learner passes it
    forward = compiled(model) if compile else model

    def step() -> None:
        with torch.autocast(device.type, dtype=dtype, enabled=autocast is not None):
            out = forward(x)
        outputs = out if isinstance(out, tuple) else (out,)
        loss = sum(o.float().pow(2).mean() for o in outputs)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return step


def choose_precision(
    model: nn.Module,
    obs_shape: tuple[int, ...],
    minibatch_size: int,
    *,
    seconds: float = 1.0,
    candidates: tuple[str | None, ...] = (None, "bfloat16"),
    try_compile: bool = False,
    make_update: UpdateFactory | None = None,
) -> PrecisionChoice:
    """The fastest of ``candidates`` x (contiguous, channels-last) for ``model`` on this CPU.

    Channels-last is tried only for image observations (``len(obs_shape) == 3``). Takes about
    ``seconds`` per combination (4 s for a CNN at the defaults). With ``try_compile`` every
    precision whose eager rate is at least half the best (not emulated) is timed again compiled
    under each layout (10-20 s of compiling each), and the fastest compiled step is chosen when it
    is at least ``COMPILE_GAIN`` times faster than the fastest eager one. A combination under half
    the best rate so far is timed only by its warm-up steps (``update_rate``'s ``give_up_below``):
    its rate then comes from one step. ``make_update``: time the learner's own update instead of
    the network's gradient step (module docstring)."""
    layouts = (False, True) if len(obs_shape) == 3 else (False,)
    measure = functools.partial(
        update_rate, model, obs_shape, minibatch_size, seconds=seconds, make_update=make_update
    )
    rates = {}
    for autocast in candidates:
        for channels_last in layouts:
            rates[label(autocast, channels_last)] = measure(
                autocast=autocast,
                channels_last=channels_last,
                give_up_below=max(rates.values()) / 2 if rates else None,
            )
    best = max(rates, key=rates.get)
    autocast, layout = best.split("/")
    autocast = None if autocast == "float32" else autocast
    channels_last = layout == "channels_last"
    use_compiled = False
    if try_compile:
        # compiling can reverse the layouts' order, and the precisions' (module docstring)
        native = [
            precision
            for precision in candidates
            if max(rates[label(precision, nhwc)] for nhwc in layouts) >= rates[best] / 2
        ]
        compiled_rates = {
            (precision, nhwc): measure(autocast=precision, channels_last=nhwc, compile=True)
            for precision in native
            for nhwc in layouts
        }
        for (precision, nhwc), rate in compiled_rates.items():
            rates[label(precision, nhwc, compile=True)] = rate
        fused = max(compiled_rates, key=compiled_rates.get)
        if compiled_rates[fused] >= COMPILE_GAIN * rates[best]:
            use_compiled = True
            autocast, channels_last = fused
    return PrecisionChoice(
        autocast=autocast, channels_last=channels_last, rates=rates, compile=use_compiled
    )


def with_measured_precision(
    config: Any,
    model: nn.Module,
    obs_shape: tuple[int, ...],
    minibatch_size: int,
    *,
    seconds: float = 1.0,
    try_compile: bool = False,
    make_update: UpdateFactory | None = None,
) -> tuple[Any, PrecisionChoice]:
    """``config`` (a learner's, with ``Precision``'s fields) with the fastest autocast and memory
    layout of ``choose_precision`` for ``model`` at ``minibatch_size`` on this CPU, and the
    measurement. With ``try_compile`` (learners that compile: PPO, A2C, IMPALA, DQN) ``compile`` is
    measured too; otherwise (R2D2) it is left as it is."""
    choice = choose_precision(
        model,
        obs_shape,
        minibatch_size,
        seconds=seconds,
        try_compile=try_compile,
        make_update=make_update,
    )
    measured = replace(config, autocast=choice.autocast, channels_last=choice.channels_last)
    if try_compile:
        measured = replace(measured, compile=choice.compile)
    return measured, choice
