"""The package from the terminal: ``python -m workbench train | evaluate | list``.

    python -m workbench list
    python -m workbench train ppo-cartpole --seed 0              # to its target or its budget
    python -m workbench train ppo-cartpole --resume runs/NAME    # continue a run's checkpoint
    python -m workbench evaluate runs/NAME --games 10            # its policy plays whole games

``train`` runs a recipe of any registry (``runs.recipes.RECIPES``, ``seed.SEED_RECIPES``,
``apex.APEX_RECIPES``) as the API does (``recipe.make_run``, then ``run.run(**limits)``): the same
limits, counted from the run's start (a resumed run's steps included), the same folder
(``<runs_dir>/<name>/``: ``metrics.jsonl``, ``checkpoint.pt``), plus ``recipe.json``, which names
the recipe so that ``evaluate`` and ``--resume`` need not be told. A resumed run is a continuation
of its own, in a fresh folder beside the checkpoint's (the API's rule); ``--name`` of the
checkpoint's own run continues in that folder instead (its metrics file grows). The first Ctrl-C
stops at the end of the step, the checkpoint kept, and prints the command that continues it.

Exit status of ``train``: 0 when the run reached its target, or ended at a limit the command
named (``--env-steps``, ``--updates``, ``--seconds``; the recipe's budget under ``--no-target``);
1 when it ran out of the recipe's own budget below its target (the recipe's claim missed), or
failed; 130 when Ctrl-C stopped it; 2 for bad input (a one-line error naming the fix).
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import shlex
import sys
from pathlib import Path
from typing import Any

__all__ = ["RECIPE_FILE", "UsageError", "all_recipes", "main", "recipe_named", "recipe_of"]

RECIPE_FILE = "recipe.json"
"""What ``train`` writes into a run's folder: the recipe, its registry, the seed, the command."""


class UsageError(Exception):
    """Bad input: printed as one line naming the fix, exit status 2."""


def all_recipes() -> dict[str, tuple[str, Any]]:
    """Every recipe by name, with its kind (``Run``, ``SEED``, ``Ape-X``). Imported here, not at
    the top: the registries import torch, which ``--help`` need not wait for."""
    from workbench.apex import APEX_RECIPES
    from workbench.runs.recipes import RECIPES
    from workbench.seed import SEED_RECIPES

    registries = (("Run", RECIPES), ("SEED", SEED_RECIPES), ("Ape-X", APEX_RECIPES))
    return {name: (kind, recipe) for kind, found in registries for name, recipe in found.items()}


def recipe_named(name: str) -> tuple[str, Any]:
    """The kind and recipe called ``name``; an unknown name names the close ones."""
    recipes = all_recipes()
    if name not in recipes:
        close = difflib.get_close_matches(name, list(recipes), n=3, cutoff=0.5)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise UsageError(
            f"unknown recipe {name!r}{hint}; `python -m workbench list` shows every recipe"
        )
    return recipes[name]


def run_folder(checkpoint: str) -> Path:
    """The folder of a checkpoint given as a file or as a run's folder; it must exist."""
    path = Path(checkpoint)
    if not path.exists():
        raise UsageError(
            f"no checkpoint at {checkpoint}: pass a run's folder (runs/<name>) or its "
            "checkpoint.pt, as `python -m workbench train` prints it"
        )
    return path if path.is_dir() else path.parent


def recipe_of(checkpoint: str) -> str | None:
    """The recipe that ``train`` recorded beside ``checkpoint`` (None: no ``recipe.json``)."""
    recorded = run_folder(checkpoint) / RECIPE_FILE
    return json.loads(recorded.read_text())["recipe"] if recorded.is_file() else None


# --- train --------------------------------------------------------------------------------------

RUN_KINDS = {"Run": "run", "SEED": "seed", "Ape-X": "apex"}  # a registry's runs' ``kind``
ENDINGS = {"target": "reached its target", "env_steps": "at its env-step limit", "stop": "stopped"}
ENDINGS.update(updates="at its update limit", seconds="at its time limit")


def runs_folder(args: argparse.Namespace) -> Path:
    """Where the run's folder goes, checked before anything slow starts: ``--runs-dir``; else,
    resuming, beside the checkpoint's run (as SEED's and Ape-X's ``from_checkpoint`` place it, so
    every kind does the same); else the API's default (``$WORKBENCH_RUNS_DIR``, else ``runs``)."""
    from workbench.runs.control import default_runs_dir

    runs_dir, resumed = args.runs_dir, None
    if args.resume is not None:
        resumed = run_folder(args.resume)
        recorded = recipe_of(args.resume)
        if recorded not in (None, args.recipe):
            raise UsageError(f"{args.resume} is a run of {recorded}: train {recorded} --resume ...")
        if runs_dir is None and (resumed / "metrics.jsonl").is_file():
            runs_dir = str(resumed.parent)
    runs = Path(runs_dir if runs_dir is not None else default_runs_dir())
    taken = args.name and (runs / args.name / "metrics.jsonl").is_file()
    if taken and (resumed is None or resumed.resolve() != (runs / args.name).resolve()):
        raise UsageError(
            f"{runs / args.name} holds a run already: choose another --name, or continue it "
            f"with --resume {runs / args.name}"
        )
    return runs


def train(args: argparse.Namespace) -> int:
    """Run a recipe to its target or a limit (module docstring: the exit status)."""
    kind, recipe = recipe_named(args.recipe)
    if args.device is not None:
        if not hasattr(recipe, "device"):  # a Run recipe's learner lives in its sampler loop
            raise UsageError(f"--device moves an Ape-X or SEED learner; {args.recipe} is a Run")
        recipe = dataclasses.replace(recipe, device=args.device)
    runs = runs_folder(args)
    import torch

    from workbench.runs.checkpoints import CheckpointError, load_checkpoint_file
    from workbench.system import resolve_device, usable_cores

    torch.set_num_threads(recipe.torch_threads or usable_cores())  # as benchmarks/learning.py
    try:  # a device this machine lacks: the one line that names the fix, not a traceback
        resolve_device(args.device or "cpu")
    except ValueError as error:
        raise UsageError(str(error).replace("device=", "--device ")) from None
    resuming = {} if args.resume is None else {"resume_from": args.resume}
    try:
        if args.resume is not None:  # another kind's checkpoint fails deep inside: say so first
            saved = load_checkpoint_file(args.resume).get("kind")
            if saved != RUN_KINDS[kind]:
                raise ValueError(f"a {saved} run's checkpoint; {args.recipe} makes {kind} runs")
        run = recipe.make_run(args.seed, runs_dir=str(runs), name=args.name, **resuming)
    except (ValueError, KeyError, TypeError, OSError, CheckpointError) as error:
        if args.resume is None:  # not the input's fault: a bug, with its traceback
            raise
        raise UsageError(
            f"cannot continue {args.resume} ({type(error).__name__}: {error}); is {args.recipe} "
            "the recipe it was made from?"
        ) from None
    target = None if args.no_target else args.target
    target = recipe.target_return if target is None and not args.no_target else target
    limits = dict(env_steps=args.env_steps or recipe.total_steps, updates=args.updates)
    limits.update(seconds=args.seconds, target_return=target)
    try:  # a limit a resumed run has passed (the API's check, here before any file is written)
        counters = (args.resume or run.name, run.env_steps, run.updates, run.wall_seconds)
        run.limits.replace(**limits).refuse_passed(limits, *counters)
    except ValueError as error:
        if not any(run.dir.iterdir()):  # the fresh folder make_run made: not left behind empty
            run.dir.rmdir()
        message = str(error)
        for name in ("env_steps", "updates", "seconds"):  # in the options' words
            message = message.replace(f"{name}=", f"--{name.replace('_', '-')} ")
        raise UsageError(message) from None
    run.log_every = args.log_every
    if args.checkpoint_seconds is not None:
        run.checkpoints.every_seconds = args.checkpoint_seconds
    recorded = {"recipe": args.recipe, "kind": kind, "seed": args.seed, "resumed": args.resume}
    command = shlex.join(["python", "-m", "workbench", *args.argv])
    (run.dir / RECIPE_FILE).write_text(json.dumps({**recorded, "command": command}, indent=1))
    until = [f"{limits['env_steps']:,} env steps"]
    until += [f"{args.updates:,} updates"] if args.updates else []
    until += [f"{args.seconds:g} s"] if args.seconds else []
    until += [f"a return of {target:g} ({run.target_metric})"] if target is not None else []
    print(f"{args.recipe} ({kind}), seed {args.seed}, run folder {run.dir}", flush=True)
    print(f"  until {' or '.join(until)}", flush=True)
    try:
        run.run(**limits)
    except Exception as error:  # the lifecycle printed its traceback: its gist, and the folder
        print(f"{args.recipe} failed ({type(error).__name__}: {error}); {run.dir}", file=sys.stderr)
        return 1
    return summary(args, run, target)


def summary(args: argparse.Namespace, run: Any, target: float | None) -> int:
    """Print how the run ended; return the exit status (module docstring)."""
    last = next((row for row in reversed(run.metrics) if "event" not in row), {})
    value = last.get(run.target_metric)
    reached = run.ended_by == "target"
    state = "reached" if reached else "not reached"
    goal = "no target" if target is None else f"target {target:g} {state}"
    print(
        f"{run.name}: {ENDINGS.get(run.ended_by, run.status)} after {run.env_steps:,} env steps, "
        f"{run.updates:,} updates, {run.wall_seconds:.0f} s; return "
        f"{'n/a' if value is None else f'{value:.1f}'} ({goal})\n"
        f"  metrics {run.metrics_path}\n  checkpoint {run.checkpoint_path}",
        flush=True,
    )
    if run.ended_by == "stop":
        again = ["python", "-m", "workbench", "train", args.recipe, "--seed", str(args.seed)]
        again += ["--resume", str(run.dir), "--name", run.name]  # on in its own folder
        for option in ("runs_dir", "device", "target"):
            if getattr(args, option) is not None:
                again += [f"--{option.replace('_', '-')}", str(getattr(args, option))]
        again += ["--no-target"] if args.no_target else []
        print(f"Continue it with:\n  {shlex.join(again)}", flush=True)
        return 130
    named = {"env_steps": args.env_steps, "updates": args.updates, "seconds": args.seconds}
    asked = named.get(run.ended_by) is not None or (args.no_target and run.ended_by == "env_steps")
    return 0 if reached or asked else 1


# --- evaluate -----------------------------------------------------------------------------------


def evaluate(args: argparse.Namespace) -> int:
    """Play ``--games`` whole games with a checkpoint's policy; print mean, std and returns."""
    name = args.recipe or recipe_of(args.checkpoint)
    if name is None:
        raise UsageError(
            f"{args.checkpoint} does not say which recipe made it (no {RECIPE_FILE} beside it: "
            "a run not started by `python -m workbench train`); name it with --recipe NAME "
            "(`python -m workbench list`)"
        )
    _, recipe = recipe_named(name)
    import torch

    from workbench.runs.evaluation import evaluate as play_games
    from workbench.runs.evaluation import load_policy

    torch.set_num_threads(1)  # one game's network at a time: small batches, no gain from more
    try:
        model = load_policy(recipe, args.checkpoint)
    except (ValueError, FileNotFoundError) as error:  # another recipe's env, no weights, no file
        raise UsageError(str(error)) from None
    except RuntimeError as error:  # unreadable, or weights of another network (load_state_dict)
        gist = str(error).splitlines()[0]
        raise UsageError(f"{gist}; is {name} the recipe {args.checkpoint} was made from?") from None
    options = dict(recipe.env_options)  # the training run's preprocessing (a tuple or a dict)
    greedy = not args.sampled
    result = play_games(
        model, recipe.env_id, games=args.games, env_options=options, deterministic=greedy
    )
    actions = "sampled" if args.sampled else "greedy"
    print(
        f"{name} on {recipe.env_id}, {args.games} games, {actions} actions: mean "
        f"{result.mean:.2f} (std {result.std:.2f}); returns {[round(r, 2) for r in result.returns]}"
    )
    return 0


# --- list ---------------------------------------------------------------------------------------


def list_recipes(args: argparse.Namespace) -> int:
    """One line per recipe: name, kind, env id, target, env-step budget, note (shortened)."""
    print(f"{'recipe':<34}{'kind':<7}{'env':<34}{'target':>8}{'budget':>12}  note")
    for name, (kind, recipe) in all_recipes().items():
        note = " ".join(recipe.note.split())
        note = note if len(note) <= 60 else note[:57] + "..."
        print(
            f"{name:<34}{kind:<7}{recipe.env_id:<34}{recipe.target_return:>8g}"
            f"{recipe.total_steps:>12,}  {note}"
        )
    return 0


# --- the parser ---------------------------------------------------------------------------------


def at_least(kind: type, low: int = 1) -> Any:
    """An argparse type: a number of ``kind`` >= ``low`` (a limit of 0 would end a run at once)."""

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not value >= low:
            raise argparse.ArgumentTypeError(f"{text} must be at least {low}")
        return value

    return parse


def parser() -> argparse.ArgumentParser:
    """The command line: the subcommands ``train``, ``evaluate`` and ``list``."""
    top = argparse.ArgumentParser(prog="python -m workbench", description="workbench's recipes")
    commands = top.add_subparsers(dest="command", required=True)
    t = commands.add_parser(
        "train",
        help="run a recipe to its target or a limit",
        description="Exit status: 0 at the target or at a limit given here; 1 at the recipe's "
        "own budget below its target, or failed; 130 after Ctrl-C (the checkpoint kept); 2 for "
        "bad input. Limits count from the run's start, a resumed run's steps included.",
    )
    t.add_argument("recipe", help="a recipe's name (python -m workbench list)")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--env-steps", type=at_least(int), help="default: the recipe's budget")
    t.add_argument("--updates", type=at_least(int))
    t.add_argument("--seconds", type=at_least(float), help="wall seconds of the run")
    goal = t.add_mutually_exclusive_group()
    goal.add_argument("--target", type=float, help="default: the recipe's target return")
    goal.add_argument("--no-target", action="store_true", help="train on past any return")
    t.add_argument("--runs-dir", help="default: $WORKBENCH_RUNS_DIR, else runs")
    t.add_argument("--name", help="the run's folder (default: the date and env id)")
    t.add_argument("--resume", metavar="PATH", help="continue a checkpoint or a run's folder")
    t.add_argument("--device", help="an Ape-X or SEED learner's device: cpu, cuda, auto")
    t.add_argument("--checkpoint-seconds", type=at_least(float), help="default: 300")
    t.add_argument(
        "--log-every", type=at_least(int, 0), default=1, help="a line every N rows; 0: none"
    )
    t.set_defaults(handler=train)
    e = commands.add_parser("evaluate", help="play whole games with a checkpoint's policy")
    e.add_argument("checkpoint", help="a run's folder or its checkpoint.pt")
    e.add_argument("--recipe", help="default: the one recipe.json in the run's folder names")
    e.add_argument("--games", type=at_least(int), default=10)
    actions = e.add_mutually_exclusive_group()
    actions.add_argument("--greedy", action="store_true", help="the likeliest action (default)")
    actions.add_argument("--sampled", action="store_true", help="actions as in training")
    e.set_defaults(handler=evaluate)
    commands.add_parser("list", help="every recipe of the three registries").set_defaults(
        handler=list_recipes
    )
    return top


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` and run the subcommand; bad input is one line on stderr, status 2."""
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser().parse_args(argv)
    args.argv = argv  # recorded in recipe.json
    try:
        return args.handler(args)
    except UsageError as error:
        print(f"python -m workbench {args.command}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # outside a run's loop (while it starts): nothing to keep yet
        print("interrupted before the run started", file=sys.stderr)
        return 130
