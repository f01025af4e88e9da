"""Training throughput: PPO on Pong end to end, the workbench's Run against a plain CleanRL loop.

    .venv/bin/python benchmarks/training_throughput.py --seconds 20 --repeats 1

Three rows, measured in one run, with the same model (``ActorCritic``: NatureCNN trunk) and the
same PPO hyperparameters (CleanRL's ``ppo_atari.py``: 8 envs x 128 steps, 4 minibatches, 4
epochs, lr 2.5e-4, clip 0.1, entropy 0.01, value 0.5, grad norm 0.5, gamma 0.99, lambda 0.95):

* plain:  one process, written the CleanRL way: gymnasium's ``SyncVectorEnv`` of
          ``measure.baselines.make_preprocessed_env`` envs (AtariPreprocessing: 84x84 gray, skip 4,
          stack 4), one forward pass per step, then GAE and the PPO loss computed inline, float32;
* sync:   ``workbench.runs.Run`` with ``RunConfig(mode="sync")``: collect with a workbench
          sampler, then ``PPO.update``, with the learner's speed-ups measured on this CPU
          (``learners.choose_precision``: float32 or bfloat16, channels-last, compiled where
          ``torch.compile`` is 10% faster);
* async:  the same with ``mode="async"``: the next batch is collected while the learner learns.

Each row trains for ``--seconds`` after one untimed warm-up iteration (env construction, worker
start-up and the first update are excluded), and counts env steps over whole iterations. Stages
are seconds per iteration: ``env`` and ``infer`` (collecting; for the parallel sampler, the mean
per worker), ``learn`` (the update, GAE included) and ``wait`` (the learner waiting for a batch:
sync, the whole collect; async, what learning did not hide). ``s/iter`` is the wall clock.

Every row is measured at 1 torch thread and at one per core (``--threads``), and each kind is
compared at its best. Both matter on a shared 2-core machine: with idle cores two threads learn
fastest, but when other processes hold the cores, a two-thread bfloat16 learner collapses
(measured with two busy-looping processes beside it: 35 s per Pong update against 2.5 s with one
thread; float32 suffers far less). bfloat16 runs many more small parallel regions (casts), and
with ``OMP_WAIT_POLICY=PASSIVE`` (set by ``workbench``) each one waits for a sleeping OpenMP
thread to be scheduled again. One thread per role is the robust choice (that measurement); async
mode then gives the collector and the learner one core each.

The sampler: on this 2-core machine, at 8 envs, the serial sampler (ALE's C++ vector env and the
forward pass in one process) collects fastest; the parallel sampler, best at 64 envs in
``data/sampler_throughput.json``, has only 4 envs per worker here. ``--sampler`` picks another;
with ``--device cuda`` the learner and the inference go to the GPU (default sampler: batched).
``--channels-last`` is off by default: beside bfloat16 it brings nothing on this CPU (it does
speed up a float32 learner, 1.3x).

It prints a table, the best row of each kind, writes ``--out`` (JSON, with machine, command,
commit, date and load average) and ends with ``ratios: vs_plain=<x> async_vs_sync=<x>``:
``vs_plain`` is the faster workbench mode over the plain loop, ``async_vs_sync`` async over sync
(on 2 cores collection and learning compete for the same cores, so async can only hide the idle
time of either).

Samplers may start workers with 'spawn', which re-imports this script: so the top of the file
imports only the standard library, and all the work happens in functions.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
import time

import record  # this folder is sys.path[0] when the script runs

# Idle OpenMP threads must sleep, not spin on the cores the envs need (measured on the 2-core
# machine: +20-28% end to end); libgomp reads this when torch loads, so it is set before anything
# imports torch.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

ENV_ID = "ALE/Pong-v5"


@dataclasses.dataclass(frozen=True)
class Hyperparameters:
    """CleanRL ``ppo_atari.py``'s PPO settings (its names), shared by every row."""

    num_envs: int = 8
    """B: environments."""
    num_steps: int = 128
    """T: steps per environment per iteration (the batch is ``num_envs * num_steps``)."""
    num_minibatches: int = 4
    """Minibatches per epoch."""
    update_epochs: int = 4
    """Passes over each batch."""
    learning_rate: float = 2.5e-4
    """Adam's step size (not annealed here: a throughput run has no end to anneal to)."""
    adam_eps: float = 1e-5
    """Adam's epsilon."""
    clip_coef: float = 0.1
    """Surrogate clipping range (also clips the value loss)."""
    ent_coef: float = 0.01
    """Entropy bonus weight."""
    vf_coef: float = 0.5
    """Value loss weight."""
    max_grad_norm: float = 0.5
    """Global gradient-norm clip."""
    gamma: float = 0.99
    """Discount."""
    gae_lambda: float = 0.95
    """GAE lambda."""

    @property
    def batch_size(self) -> int:
        return self.num_envs * self.num_steps

    def ppo_config(self, *, autocast: str | None, channels_last: bool, compile: bool = False):
        """The same settings as a ``workbench.learners.PPOConfig``."""
        from workbench.learners import PPOConfig

        return PPOConfig(
            gamma=self.gamma,
            gae_lambda=self.gae_lambda,
            learning_rate=self.learning_rate,
            adam_eps=self.adam_eps,
            num_epochs=self.update_epochs,
            num_minibatches=self.num_minibatches,
            clip_coef=self.clip_coef,
            clip_value_loss=True,
            value_coef=self.vf_coef,
            entropy_coef=self.ent_coef,
            normalize_advantages=True,
            max_grad_norm=self.max_grad_norm,
            autocast=autocast,
            channels_last=channels_last,
            compile=compile,
        )


def _result(
    label: str,
    steps: int,
    seconds: float,
    iterations: int,
    stages: dict,
    env_id: str,
    details: dict,
):
    from workbench.envs import AtariOptions, is_atari
    from workbench.measure.throughput import Throughput

    rate = steps / seconds if seconds > 0 else 0.0
    # the preprocessing both sides use
    frameskip = AtariOptions.frameskip if is_atari(env_id) else 1
    return Throughput(
        label=label,
        steps_per_second=rate,
        frames_per_second=rate * frameskip,
        seconds=seconds,
        steps=int(steps),
        stages={k: float(v) for k, v in stages.items()},
        details={"iterations": iterations, **details},
    )


# --- the plain loop -------------------------------------------------------------------------------


def plain_loop(
    env_id: str,
    seconds: float,
    hp: Hyperparameters = Hyperparameters(),
    *,
    device: str = "cpu",
    vector: str = "sync",
    seed: int = 0,
    label: str | None = None,
):
    """PPO as CleanRL's ``ppo_atari.py`` writes it, timed: a ``Throughput`` with stages
    ``env``, ``inference``, ``learn``, ``wait`` (0) and ``total`` summed over the timed iterations.

    One warm-up iteration, then whole iterations until ``seconds`` have passed. The env is
    gymnasium's ``SyncVectorEnv`` (``vector="sync"``, CleanRL's) or ``AsyncVectorEnv`` of
    ``make_preprocessed_env`` envs with same-step autoreset (every step a real transition);
    rewards are clipped to their sign (CleanRL's ``ClipRewardEnv``); episode ends are
    ``terminated | truncated``, as CleanRL treats them. Observations stay uint8 (the model
    scales them). Everything in float32, no autocast, contiguous memory format.
    """
    import functools

    import gymnasium as gym
    import numpy as np
    import torch
    from torch import nn

    from workbench.measure.baselines import make_preprocessed_env
    from workbench.models import ActorCritic

    if vector not in ("sync", "async"):
        raise ValueError(f"vector must be 'sync' or 'async', got {vector!r}")
    device = torch.device(device)
    synchronize = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    env_fns = [
        functools.partial(make_preprocessed_env, env_id, seed + i) for i in range(hp.num_envs)
    ]
    vector_class = gym.vector.SyncVectorEnv if vector == "sync" else gym.vector.AsyncVectorEnv
    envs = vector_class(env_fns, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    finished = False
    try:
        obs_shape = envs.single_observation_space.shape
        torch.manual_seed(seed)
        agent = ActorCritic(obs_shape, int(envs.single_action_space.n)).to(device)
        optimizer = torch.optim.Adam(agent.parameters(), lr=hp.learning_rate, eps=hp.adam_eps)

        T, B = hp.num_steps, hp.num_envs
        obs_dtype = torch.from_numpy(np.zeros((), dtype=envs.single_observation_space.dtype)).dtype
        obs = torch.zeros((T, B, *obs_shape), dtype=obs_dtype, device=device)
        actions = torch.zeros((T, B), dtype=torch.long, device=device)
        logprobs = torch.zeros((T, B), device=device)
        rewards = torch.zeros((T, B), device=device)
        dones = torch.zeros((T, B), device=device)
        values = torch.zeros((T, B), device=device)

        next_obs, _ = envs.reset(seed=seed)
        next_obs = torch.as_tensor(next_obs, device=device)
        next_done = torch.zeros(B, device=device)
        env_s = inference_s = learn_s = 0.0
        steps = iterations = 0
        start = None
        while True:
            it_env = it_inference = 0.0
            for step in range(T):
                obs[step] = next_obs
                dones[step] = next_done
                t0 = time.perf_counter()
                with torch.no_grad():
                    out = agent.act(next_obs)
                values[step] = out["value"]
                actions[step] = out["action"]
                logprobs[step] = out["logp"]
                action = out["action"].cpu().numpy()
                t1 = time.perf_counter()
                next_obs, reward, terminations, truncations, _ = envs.step(action)
                rewards[step] = torch.as_tensor(np.sign(reward), dtype=torch.float32, device=device)
                next_done = torch.as_tensor(
                    np.logical_or(terminations, truncations), dtype=torch.float32, device=device
                )
                next_obs = torch.as_tensor(next_obs, device=device)
                t2 = time.perf_counter()
                it_inference += t1 - t0
                it_env += t2 - t1

            t_learn = time.perf_counter()
            # GAE (Schulman et al. 2016), CleanRL's loop.
            with torch.no_grad():
                next_value = agent(next_obs)[1]
                advantages = torch.zeros_like(rewards)
                lastgaelam = 0
                for t in reversed(range(T)):
                    if t == T - 1:
                        nextnonterminal = 1.0 - next_done
                        nextvalues = next_value
                    else:
                        nextnonterminal = 1.0 - dones[t + 1]
                        nextvalues = values[t + 1]
                    delta = rewards[t] + hp.gamma * nextvalues * nextnonterminal - values[t]
                    advantages[t] = lastgaelam = (
                        delta + hp.gamma * hp.gae_lambda * nextnonterminal * lastgaelam
                    )
                returns = advantages + values

            b_obs = obs.reshape((-1, *obs_shape))
            b_logprobs, b_actions = logprobs.reshape(-1), actions.reshape(-1)
            b_advantages, b_returns, b_values = (
                advantages.reshape(-1),
                returns.reshape(-1),
                values.reshape(-1),
            )
            minibatch_size = hp.batch_size // hp.num_minibatches
            b_inds = np.arange(hp.batch_size)
            clipfracs = []
            for _ in range(hp.update_epochs):
                np.random.shuffle(b_inds)
                for lo in range(0, hp.batch_size, minibatch_size):
                    mb_inds = b_inds[lo : lo + minibatch_size]
                    new = agent.evaluate(b_obs[mb_inds], b_actions[mb_inds])
                    logratio = new["logp"] - b_logprobs[mb_inds]
                    ratio = logratio.exp()
                    with torch.no_grad():
                        clipfracs.append(((ratio - 1.0).abs() > hp.clip_coef).float().mean().item())
                    mb_advantages = b_advantages[mb_inds]
                    mb_advantages = (mb_advantages - mb_advantages.mean()) / (
                        mb_advantages.std() + 1e-8
                    )
                    pg_loss1 = -mb_advantages * ratio
                    pg_loss2 = -mb_advantages * torch.clamp(
                        ratio, 1 - hp.clip_coef, 1 + hp.clip_coef
                    )
                    pg_loss = torch.max(pg_loss1, pg_loss2).mean()
                    newvalue = new["value"]
                    v_loss_unclipped = (newvalue - b_returns[mb_inds]) ** 2
                    v_clipped = b_values[mb_inds] + torch.clamp(
                        newvalue - b_values[mb_inds], -hp.clip_coef, hp.clip_coef
                    )
                    v_loss_clipped = (v_clipped - b_returns[mb_inds]) ** 2
                    v_loss = 0.5 * torch.max(v_loss_unclipped, v_loss_clipped).mean()
                    entropy_loss = new["entropy"].mean()
                    loss = pg_loss - hp.ent_coef * entropy_loss + v_loss * hp.vf_coef
                    optimizer.zero_grad()
                    loss.backward()
                    nn.utils.clip_grad_norm_(agent.parameters(), hp.max_grad_norm)
                    optimizer.step()
            synchronize()
            t_end = time.perf_counter()

            if start is None:  # the warm-up iteration ends here
                start = t_end
                continue
            iterations += 1
            steps += hp.batch_size
            env_s += it_env
            inference_s += it_inference
            learn_s += t_end - t_learn
            if t_end - start >= seconds:
                break
        finished = True
    finally:
        envs.close(terminate=not finished)
    elapsed = t_end - start
    stages = {
        "env": env_s,
        "inference": inference_s,
        "learn": learn_s,
        "wait": 0.0,
        "total": elapsed,
    }
    vector_name = f"{'Sync' if vector == 'sync' else 'Async'}VectorEnv({hp.num_envs})"
    details = {
        "kind": "plain",
        "vector": vector_name,
        "device": str(device),
        "precision": "float32",
        "torch_threads": torch.get_num_threads(),
        "num_envs": hp.num_envs,
        "horizon": hp.num_steps,
    }
    label = (
        label or f"plain: CleanRL loop, gym {vector_name}, fp32, torch={torch.get_num_threads()}"
    )
    return _result(label, steps, elapsed, iterations, stages, env_id, details)


# --- the workbench's Run --------------------------------------------------------------------------


def measure_run(
    env_id: str,
    seconds: float,
    hp: Hyperparameters = Hyperparameters(),
    *,
    mode: str = "sync",
    sampler: str = "serial",
    num_workers: int = 2,
    device: str = "cpu",
    autocast: str | None = "bfloat16",
    channels_last: bool = False,
    compile: bool = False,
    seed: int = 0,
    label: str | None = None,
):
    """``Run(env_id, PPO(...), sampler=sampler, config=RunConfig(mode=mode))``, timed: a
    ``Throughput`` whose stages sum the run's per-iteration ``time/env``, ``time/inference``,
    ``time/learn`` and ``time/batch_wait`` (as ``wait``) over the timed iterations.

    The run's first iteration is the warm-up (sampler start, first collect, first update); the
    run is stopped at the first iteration that ends ``seconds`` after it. Steps per second are
    env steps over whole iterations between those two ends. Metrics and the final checkpoint go
    to a temporary folder, removed afterwards.
    """
    import torch

    from workbench.envs import env_spaces
    from workbench.learners import PPO
    from workbench.models import ActorCritic
    from workbench.runs import Run, RunConfig, RunSettings

    obs_space, action_space = env_spaces(env_id)
    torch.manual_seed(seed)
    model = ActorCritic(obs_space.shape, int(action_space.n))
    config = hp.ppo_config(autocast=autocast, channels_last=channels_last, compile=compile)
    algo = PPO(model, config, device=device, seed=seed)
    settings = RunSettings(
        num_workers=num_workers if sampler != "serial" else 1,
        num_envs=hp.num_envs,
        horizon=hp.num_steps,
        num_minibatches=hp.num_minibatches,
        learner_devices=(device,),
    )
    rows: list[tuple[float, dict]] = []
    with tempfile.TemporaryDirectory(prefix="training_throughput-") as runs_dir:
        run = Run(
            env_id,
            algo,
            sampler=sampler,
            settings=settings,
            config=RunConfig(
                total_steps=10**12,
                mode=mode,
                runs_dir=runs_dir,
                name=f"{mode}-{sampler}",
                seed=seed,
            ),
            sampler_options={} if sampler == "parallel" else {"device": device},
        )

        @run.on_row
        def stop_when_measured(row: dict) -> None:
            if "event" in row:
                return
            rows.append((time.perf_counter(), row))
            if len(rows) > 1 and rows[-1][0] - rows[0][0] >= seconds:
                run.stop(wait=False)

        run.run()
    if len(rows) < 2:
        raise RuntimeError(
            f"the run ended after {len(rows)} iteration(s); nothing was timed ({run.status})"
        )
    timed = [row for _, row in rows[1:]]
    elapsed = rows[-1][0] - rows[0][0]
    steps = rows[-1][1]["charts/env_steps"] - rows[0][1]["charts/env_steps"]
    stages = {
        "env": sum(r["time/env"] for r in timed),
        "inference": sum(r["time/inference"] for r in timed),
        "learn": sum(r["time/learn"] for r in timed),
        "wait": sum(r["time/batch_wait"] for r in timed),
        "total": elapsed,
    }
    workers = f"{num_workers}w x " if sampler != "serial" else ""
    precision = autocast or "fp32"
    details = {
        "kind": mode,
        "sampler": sampler,
        "num_workers": num_workers if sampler != "serial" else None,
        "device": device,
        "precision": precision,
        "channels_last": channels_last,
        "compile": compile,
        "torch_threads": torch.get_num_threads(),
        "num_envs": hp.num_envs,
        "horizon": hp.num_steps,
        "policy_lag": max(r["charts/policy_lag"] for r in timed),
    }
    short = {"bfloat16": "bf16", "float16": "fp16"}.get(precision, precision)
    label = label or (
        f"{mode}: Run, {sampler} {workers}B={hp.num_envs}, {short}"
        + (", NHWC" if channels_last else "")
        + (", compiled" if compile else "")
        + f", torch={torch.get_num_threads()}"
    )
    return _result(label, steps, elapsed, len(timed), stages, env_id, details)


# --- the table ------------------------------------------------------------------------------------

HEADER = (
    f"{'':2}{'measurement':<58}{'steps/s':>8}{'frames/s':>9}{'s/iter':>7}"
    f"{'env':>6}{'infer':>6}{'learn':>6}{'wait':>6}"
)


def row(measured) -> str:
    n = max(1, measured.details["iterations"])
    per = {k: v / n for k, v in measured.stages.items()}
    return (
        f"{'':2}{measured.label:<58}{measured.steps_per_second:>8,.0f}"
        f"{measured.frames_per_second:>9,.0f}{per['total']:>7.2f}{per['env']:>6.2f}"
        f"{per['inference']:>6.2f}{per['learn']:>6.2f}{per['wait']:>6.2f}"
    )


def best_of(repeats: int, measure):
    """The fastest of ``repeats`` calls: noise on a shared machine only ever slows a run."""
    return max((measure() for _ in range(repeats)), key=lambda m: m.steps_per_second)


def ratios(best: dict) -> dict[str, float]:
    """``vs_plain``: the faster workbench mode over the plain loop; ``async_vs_sync``: async over
    sync; each kind at its best thread count."""
    fastest = max(best["sync"].steps_per_second, best["async"].steps_per_second)
    return {
        "vs_plain": fastest / best["plain"].steps_per_second,
        "async_vs_sync": best["async"].steps_per_second / best["sync"].steps_per_second,
    }


# --- the command ----------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--seconds",
        type=float,
        default=20.0,
        help="timed seconds per row, after a warm-up iteration (default 20)",
    )
    parser.add_argument(
        "--repeats", type=int, default=1, help="measurements per row, best kept (default 1)"
    )
    parser.add_argument(
        "--out", default="data/training_throughput.json", help="where to write the JSON results"
    )
    parser.add_argument(
        "--device",
        default="cpu",
        help="cpu (default) or cuda[:N]: the learner and the inference go there",
    )
    parser.add_argument(
        "--sampler",
        choices=["serial", "parallel", "batched", "alternating"],
        default=None,
        help="the workbench sampler (default: serial on the CPU, batched with cuda)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=2,
        help="worker processes of a non-serial sampler (default 2)",
    )
    parser.add_argument(
        "--autocast",
        choices=["measured", "bfloat16", "float16", "none"],
        default="measured",
        help="the workbench learner's precision (default: measured, the fastest of float32 and "
        "bfloat16, contiguous and channels-last, timed on this CPU by "
        "workbench.learners.choose_precision; bfloat16 on cuda; float16 needs cuda)",
    )
    parser.add_argument(
        "--channels-last",
        action="store_true",
        help="the workbench learner's model in NHWC memory format (with a fixed --autocast)",
    )
    parser.add_argument(
        "--threads",
        default=None,
        help="comma-separated torch thread counts, each row measured at each (default: 1 and one "
        "per core)",
    )
    parser.add_argument(
        "--plain-vector",
        choices=["sync", "async"],
        default="sync",
        help="the plain loop's gymnasium vector env (default sync, as CleanRL)",
    )
    parser.add_argument(
        "--also-fp32",
        action="store_true",
        help="add rows: the sync Run with a float32 learner (what the learner's speed-ups bring)",
    )
    parser.add_argument("--env", default=ENV_ID, help=f"gymnasium id (default {ENV_ID})")
    parser.add_argument(
        "--num-envs", type=int, default=Hyperparameters.num_envs, help="B (default 8, CleanRL's)"
    )
    parser.add_argument(
        "--horizon", type=int, default=Hyperparameters.num_steps, help="T (default 128, CleanRL's)"
    )
    args = parser.parse_args(argv)
    if not args.seconds > 0:
        parser.error("--seconds must be positive.")
    if args.repeats < 1:
        parser.error("--repeats must be at least 1.")
    if args.threads is not None:
        try:
            args.threads = sorted({int(t) for t in args.threads.split(",") if t.strip()})
        except ValueError:
            parser.error(
                f"--threads takes comma-separated positive ints, e.g. 1,2; got {args.threads!r}"
            )
        if not args.threads or min(args.threads) < 1:
            parser.error(
                f"--threads takes comma-separated positive ints, e.g. 1,2; got {args.threads!r}"
            )
    if args.sampler is None:
        args.sampler = "batched" if args.device.startswith("cuda") else "serial"
    if args.autocast == "none":
        args.autocast = None
    if args.autocast == "measured" and args.device.startswith("cuda"):
        args.autocast = "bfloat16"
    return args


def measured_precision(env_id: str, hp) -> tuple[str | None, bool, bool, dict]:
    """The learner precision this CPU runs fastest (one NatureCNN minibatch step, timed; then
    compiled, kept where 10% faster): autocast, channels_last, compile, the rates."""
    from workbench.envs import env_spaces
    from workbench.learners import choose_precision
    from workbench.measure.throughput import torch_threads
    from workbench.models import ActorCritic

    observation_space, action_space = env_spaces(env_id)
    model = ActorCritic(observation_space.shape, action_space.n)
    minibatch = hp.batch_size // hp.num_minibatches
    with torch_threads(1):  # the learner's threads in the rows that matter (see above)
        choice = choose_precision(model, observation_space.shape, minibatch, try_compile=True)
    return choice.autocast, choice.channels_last, choice.compile, choice.rates


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch  # noqa: F401  (after OMP_WAIT_POLICY is set)

    from workbench.course.budget import budget_name
    from workbench.measure.throughput import torch_threads
    from workbench.system import machine_info, resolve_device

    device = str(resolve_device(args.device))
    machine = machine_info()
    threads = args.threads or sorted({1, machine.cores})
    hp = Hyperparameters(num_envs=args.num_envs, num_steps=args.horizon)
    load_before = os.getloadavg()
    started = time.perf_counter()
    print(
        f"machine: {machine.cpu_model}, {machine.cores} cores, torch {machine.torch}, "
        f"device {device}, "
        f"load average {load_before[0]:.2f}; best of {args.repeats} x {args.seconds:g} s per row"
    )
    print(
        f"{args.env}: PPO, B={hp.num_envs} T={hp.num_steps}, {hp.update_epochs} epochs x "
        f"{hp.num_minibatches} minibatches; stages in seconds per iteration"
    )
    precision_rates, compile = None, False
    if args.autocast == "measured":
        args.autocast, args.channels_last, compile, precision_rates = measured_precision(
            args.env, hp
        )
        shown = ", ".join(f"{k} {v:,.0f}" for k, v in precision_rates.items())
        print(
            f"learner precision, measured (samples/s of one minibatch step): {shown}; chose "
            f"{args.autocast or 'float32'}{', channels_last' if args.channels_last else ''}"
            f"{', compiled' if compile else ''}"
        )
    print(HEADER, flush=True)
    run_kwargs = dict(
        sampler=args.sampler,
        num_workers=args.workers,
        device=device,
        autocast=args.autocast,
        channels_last=args.channels_last,
        compile=compile,
    )
    measures = {
        "plain": lambda: plain_loop(
            args.env, args.seconds, hp, device=device, vector=args.plain_vector
        ),
        "sync": lambda: measure_run(args.env, args.seconds, hp, mode="sync", **run_kwargs),
        "async": lambda: measure_run(args.env, args.seconds, hp, mode="async", **run_kwargs),
    }
    if args.also_fp32:
        fp32 = {**run_kwargs, "autocast": None, "channels_last": False, "compile": False}
        measures["sync_fp32"] = lambda: measure_run(args.env, args.seconds, hp, mode="sync", **fp32)
    rows: dict[str, list] = {}
    try:
        for kind, measure in measures.items():  # every kind at every thread count: the same chance
            for count in threads:
                with torch_threads(count):
                    measured = best_of(args.repeats, measure)
                measured.details["row"] = kind
                rows.setdefault(kind, []).append(measured)
                print(row(measured), flush=True)
    except KeyboardInterrupt:
        print("\ninterrupted: every env and sampler was closed; nothing written.", file=sys.stderr)
        return 130
    best = {
        kind: max(measured, key=lambda m: m.steps_per_second) for kind, measured in rows.items()
    }
    found = ratios(best)
    report = {
        **record.provenance("training_throughput"),
        "machine": dataclasses.asdict(machine),
        "workbench_budget": budget_name(),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
        "load_average_before": list(load_before),
        "load_average_after": list(os.getloadavg()),
        "env_id": args.env,
        "device": device,
        "seconds": args.seconds,
        "repeats": args.repeats,
        "torch_threads": threads,
        "hyperparameters": dataclasses.asdict(hp),
        "workbench": {k: v for k, v in run_kwargs.items() if k != "device"},
        "precision_rates": precision_rates,
        "results": {kind: [m.to_dict() for m in measured] for kind, measured in rows.items()},
        "best": {kind: m.label for kind, m in best.items()},
        "ratios": found,
        "wall_seconds": time.perf_counter() - started,
    }
    record.write(report, args.out)
    print(
        f"\nwrote {args.out} ({report['wall_seconds']:.0f} s; "
        f"load average after {report['load_average_after'][0]:.2f})"
    )
    for kind, measured in best.items():
        print(f"best {kind}: {measured.label} at {measured.steps_per_second:,.0f} steps/s")
    print(f"ratios: vs_plain={found['vs_plain']:.2f} async_vs_sync={found['async_vs_sync']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
