"""It learns: recipes (workbench.runs.recipes) at several seeds, against their targets and budgets.

    .venv/bin/python benchmarks/learning.py     # the classic-control recipes, seeds 0 1 2
    .venv/bin/python benchmarks/learning.py --recipes ppo-cartpole --seeds 0 1 2 3 4
    .venv/bin/python benchmarks/learning.py --recipes ppo-pong --seeds 0 --max-seconds 3600

The CI tests run the classic-control recipes at one seed; this checks them at several, and runs
the Atari ones (an hour each on 2 cores), which are left out unless named. Each run trains with
its recipe's sampler until the target, the step budget or ``--max-seconds`` of wall clock.

It prints a table (steps to the target per seed, wall time; a progress line every
``--log-every`` seconds during long runs) and a last line ``learning: <solved>/<runs> solved``,
and writes ``--out`` (JSON, after every run, so an interrupted hour keeps what it learned) with
command, commit, machine and date, and per run the learning curve: env steps, frames, mean
return of the last 20 episodes and wall seconds, a point every ``--curve-every`` seconds (and
the last one), plus how far it got (``stopped``: target, budget, time or interrupted). Exits 1 if
any run missed its target. Later algorithms (the DQN family, Ape-X, SEED learners) join by adding
a recipe (Ape-X runs: ``workbench.apex.APEX_RECIPES``; SEED runs: ``workbench.seed.SEED_RECIPES``).
A checkpoint at a stage of learning, and runs that continue it: ``--target R --keep-checkpoint
PATH`` stops at a return of R and keeps the run's checkpoint; ``--resume-from PATH`` continues it
once per seed (the seed picks the envs and the sampling; ``resumed_at_env_steps`` says where), with
``--max-env-steps`` and ``--train-through`` for a fixed length (notebook 09's ci run is sized from
such a record). A lever probe: ``--set config.learner.learning_rate=3e-4 --out data/probe_x.json``
runs the recipe with that setting changed (a dotted path in the recipe, a Python literal; repeat for
more) and records what it changed under the recipe's ``settings``. Every kind runs through
``recipe.run(seed, max_seconds=, on_update=)`` (``runs.recipes.run_recipe``), its run writing its
metrics under ``$WORKBENCH_RUNS_DIR`` (else ``runs/``).
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import json
import os
import shutil
import sys
import time

import record  # this folder is sys.path[0] when the script runs

# Idle OpenMP threads must sleep, not spin on the cores the envs need (measured on the 2-core
# machine: +20-28% end to end); set before anything imports torch (samplers' workers inherit it).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def all_recipes() -> dict:
    """Sampler-driven recipes (``workbench.runs.recipes``), Ape-X runs (``workbench.apex``) and SEED
    runs (``workbench.seed``), by name."""
    from workbench.apex import APEX_RECIPES
    from workbench.runs.recipes import RECIPES
    from workbench.seed import SEED_RECIPES

    return {**RECIPES, **APEX_RECIPES, **SEED_RECIPES}


def default_recipes() -> list[str]:
    """The recipes a plain run checks: those on vector observations (minutes, not hours)."""
    from workbench.envs import is_atari

    return [name for name, recipe in all_recipes().items() if not is_atari(recipe.env_id)]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    RECIPES = all_recipes()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--recipes",
        nargs="+",
        default=None,
        choices=list(RECIPES),
        help=f"default: {' '.join(default_recipes())} (Atari recipes only when named)",
    )
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument(
        "--max-seconds",
        type=float,
        default=None,
        help="wall-clock limit per run; the run stops after the update that passes it",
    )
    parser.add_argument(
        "--curve-every",
        type=float,
        default=10.0,
        help="seconds between recorded points of the learning curve (0: every update; default 10)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch threads for every recipe (default: each recipe's torch_threads; 1 for all "
        "so far)",
    )
    parser.add_argument(
        "--log-every",
        type=float,
        default=60.0,
        help="seconds between progress lines during a run (0: none; default 60)",
    )
    parser.add_argument(
        "--train-through",
        action="store_true",
        help="do not stop at the target: train to the budget or --max-seconds (a fixed budget "
        "whose final checkpoint benchmarks/evaluate.py plays); the time to the target is still "
        "recorded",
    )
    parser.add_argument(
        "--merge",
        action="store_true",
        help="keep the runs already in --out (other seeds, other recipes) and replace only those "
        "of the seeds run now: three seeds recorded at different times end in one file",
    )
    parser.add_argument(
        "--out",
        default=None,
        help="where to write the JSON results (default data/learning.json for the default "
        "recipes, else data/learning_<recipes>.json, so a Pong run keeps the CartPole file)",
    )
    parser.add_argument(
        "--max-env-steps",
        type=int,
        default=None,
        help="stop each run at this many env steps (counted from 0, a resumed run's included), "
        "sooner than its recipe's budget, which still sets its learning rate's annealing",
    )
    parser.add_argument(
        "--resume-from",
        default=None,
        help="continue this checkpoint of the recipe's run (one recipe), once per seed: the "
        "seed picks the envs' seeds",
    )
    parser.add_argument(
        "--target",
        type=float,
        default=None,
        help="stop each run where its return reaches this instead of its recipe's target (a "
        "checkpoint at a stage of learning: with --keep-checkpoint)",
    )
    parser.add_argument(
        "--keep-checkpoint",
        default=None,
        help="copy each run's final checkpoint here ({seed} in the path is replaced)",
    )
    parser.add_argument(
        "--device",
        default=None,
        help="the learner's device for every named recipe that has one (Ape-X, SEED: cpu, cuda, "
        "auto), in place of the recipe's; a recipe that learns in its own processes refuses",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="change one setting of every named recipe for this command (repeat for more): a "
        "dotted path in the recipe and a Python literal, e.g. config.learner.learning_rate=3e-4 or "
        "config.min_replay_ratio=4; a lever probe, recorded in its own --out with what it changed",
    )
    args = parser.parse_args(argv)
    if args.set and args.out is None:
        parser.error(
            "--set runs a recipe other than the one its default record holds: write it to a file "
            "of its own with --out (e.g. data/probe_<lever>.json)."
        )
    if args.device is not None:
        fixed = [name for name in args.recipes or [] if not hasattr(RECIPES[name], "device")]
        if fixed or args.recipes is None:
            parser.error(
                f"--device moves an Ape-X or SEED learner; {', '.join(fixed) or 'the defaults'} "
                "choose their device in their config: name Ape-X or SEED recipes alone."
            )
    if args.resume_from is not None and len(args.recipes or []) != 1:
        parser.error("--resume-from continues one recipe's checkpoint: name that recipe alone.")
    if args.recipes is None:
        args.recipes = default_recipes()
    try:  # a wrong --set fails here, not an hour into the runs
        args.settings = [parse_setting(text) for text in args.set]
        for name in args.recipes:
            with_settings(RECIPES[name], args.settings)
    except (ValueError, TypeError) as error:
        parser.error(str(error))
    if args.out is None:
        named = sorted(args.recipes) != sorted(default_recipes())
        args.out = (
            "data/learning_" + "_".join(r.replace("-", "_") for r in args.recipes) + ".json"
            if named
            else "data/learning.json"
        )
    if args.max_seconds is not None and not args.max_seconds > 0:
        parser.error("--max-seconds must be positive.")
    return args


def parse_setting(text: str) -> tuple[str, object]:
    """``FIELD=VALUE`` of ``--set``: the dotted path and the value as a Python literal (a bare word
    stays a string)."""
    path, sep, value = text.partition("=")
    if not sep or not path.strip():
        raise ValueError(
            f"--set takes FIELD=VALUE, e.g. config.learner.learning_rate=3e-4; got {text!r}"
        )
    try:
        parsed = ast.literal_eval(value.strip())
    except (ValueError, SyntaxError):
        parsed = value.strip()
    return path.strip(), parsed


def setting_value(current: object, value: object, where: str) -> object:
    """``value`` in the type of the setting it replaces: an int stays an int, a float a float, a
    flag a flag (``4`` for a float setting is ``4.0``; ``2.5`` for an integer one is an error)."""
    if current is None:
        return value
    numbers = (int, float)
    if isinstance(current, bool) or isinstance(value, bool):
        if isinstance(current, bool) and isinstance(value, bool):
            return value
    elif isinstance(current, numbers) and isinstance(value, numbers):
        if isinstance(current, float):
            return float(value)
        if value == int(value):
            return int(value)
    elif not isinstance(current, numbers):
        return value
    raise ValueError(
        f"--set {where}={value!r}: the setting holds {current!r} ({type(current).__name__}); "
        "give a value of that type"
    )


def with_settings(recipe, settings: list[tuple[str, object]]):
    """``recipe`` with each ``(dotted path, value)`` of ``--set`` replaced, through
    ``dataclasses.replace`` at every level (so each config checks its new value)."""

    def replaced(obj, keys: list[str], value: object, where: str):
        names = (
            [f.name for f in dataclasses.fields(obj) if f.init]
            if dataclasses.is_dataclass(obj)
            else []
        )
        if keys[0] not in names:
            raise ValueError(
                f"--set {where}: {type(obj).__name__} has no setting {keys[0]!r}"
                + (f"; its settings: {', '.join(names)}" if names else "")
            )
        current = getattr(obj, keys[0])
        if len(keys) > 1:
            value = replaced(current, keys[1:], value, where)
        else:
            value = setting_value(current, value, where)
        return dataclasses.replace(obj, **{keys[0]: value})

    for path, value in settings:
        recipe = replaced(recipe, path.split("."), value, path)
    return recipe


def chosen_recipe(recipe, args: argparse.Namespace):
    """The recipe as this command runs it: its settings (``--set``), target and learner's device
    as the options say."""
    recipe = with_settings(recipe, getattr(args, "settings", []))
    if args.target is not None:
        recipe = dataclasses.replace(recipe, target_return=args.target)
    if args.device is not None:
        recipe = dataclasses.replace(recipe, device=args.device)
    return recipe


class Curve:
    """The learning curve of one run, thinned to a point every ``every`` seconds (the last point
    of the run is always kept: ``finish``), with progress lines every ``log_every`` seconds."""

    def __init__(
        self,
        *,
        frameskip: int,
        every: float,
        log_every: float,
        prefix: str,
        levels: tuple[float, ...] = (),
    ) -> None:
        self.frameskip, self.every, self.levels = frameskip, every, levels
        self.log_every, self.prefix = log_every, prefix
        self.points: list[dict] = []
        self.last: dict | None = None
        self.reached: dict[float, float] = {}  # return -> wall seconds of the first point there
        self._next_log = log_every if log_every > 0 else None

    def __call__(self, point: dict) -> None:
        self.last = {**point, "frames": point["env_steps"] * self.frameskip}
        if point["mean_return"] is not None:
            for level in self.levels:
                if point["mean_return"] >= level and level not in self.reached:
                    self.reached[level] = point["seconds"]
        if not self.points or point["seconds"] - self.points[-1]["seconds"] >= self.every:
            self.points.append(self.last)
        if self._next_log is not None and point["seconds"] >= self._next_log:
            shown = "n/a" if point["mean_return"] is None else f"{point['mean_return']:.1f}"
            print(
                f"  {self.prefix}: {point['env_steps']:,} steps ({self.last['frames']:,} frames), "
                f"return(last 20) {shown}, {point['episodes']} episodes, {point['seconds']:.0f} s",
                flush=True,
            )
            # the next multiple of log_every: a resumed run's first point is already at its
            # checkpoint's seconds, and must not print a line per point to catch up
            self._next_log = (point["seconds"] // self.log_every + 1) * self.log_every

    def seconds_to(self, level: float) -> float | None:
        """Wall seconds of the first point whose return reached ``level`` (every point counts,
        not only the thinned ones); None if none did."""
        return self.reached.get(level)

    def finish(self) -> list[dict]:
        if self.last is not None and (not self.points or self.points[-1] is not self.last):
            self.points.append(self.last)
        return self.points


PROVENANCE = ("benchmark", "command", "git_commit", "date", "machine")


def kept_with_provenance(earlier: dict) -> dict:
    """The recipes of an earlier results file, each run carrying the command, commit, date and
    machine that made it: a merge replaces the file's header, so runs recorded before runs carried
    their own provenance take it from the header they were written under."""
    header = {key: earlier[key] for key in PROVENANCE if key in earlier}
    for entry in earlier["recipes"].values():
        for run in entry["runs"]:
            for key, value in header.items():
                run.setdefault(key, value)
    return earlier["recipes"]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    from workbench.envs import AtariOptions, is_atari
    from workbench.system import machine_info

    RECIPES = all_recipes()

    machine = machine_info()
    provenance = {**record.provenance("learning"), "machine": dataclasses.asdict(machine)}
    report = {**provenance, "max_seconds": args.max_seconds, "recipes": {}}
    if args.merge and os.path.exists(args.out):
        with open(args.out) as f:
            report["recipes"] = kept_with_provenance(json.load(f))
    print(
        f"{'recipe':<16}{'seed':>5}{'target':>9}{'budget':>11}{'steps to target':>17}"
        f"{'seconds':>9}  stopped"
    )
    solved = runs = 0
    interrupted = False
    resumed_at = None
    if args.resume_from is not None:
        from workbench.runs.checkpoints import load_checkpoint_file

        resumed_at = int(load_checkpoint_file(args.resume_from)["env_steps"])
    for name in args.recipes:
        recipe = chosen_recipe(RECIPES[name], args)
        atari = is_atari(recipe.env_id)
        env_options = dict(getattr(recipe, "env_options", ()))
        frameskip = env_options.get("frameskip", AtariOptions.frameskip) if atari else 1
        # The recipe's choice (small MLPs: one thread is fastest and deterministic; see ppo-pong for
        # why one also for the CNN on a shared machine), unless --threads says otherwise.
        torch.set_num_threads(args.threads or recipe.torch_threads or machine.cores)
        earlier = report["recipes"].get(name, {}).get("runs", [])
        entry = report["recipes"][name] = {
            "env_id": recipe.env_id,
            "env_options": env_options,
            "model_options": dict(getattr(recipe, "model_options", ())),
            "mode": getattr(recipe, "mode", None),
            **recipe.describe(),
            "config": dataclasses.asdict(recipe.config),
            # a DQN recipe's replay, ratio and exploration (its ReplayAgent's)
            **(
                {"replay": dataclasses.asdict(recipe.replay)}
                if getattr(recipe, "replay", None) is not None
                else {}
            ),
            "total_steps": recipe.total_steps,
            "frameskip": frameskip,
            "target_return": recipe.target_return,
            "stop_at_target": not args.train_through,
            "torch_threads": torch.get_num_threads(),
            "device": getattr(recipe, "device", None),
            "note": recipe.note,
            "settings": dict(args.settings),  # --set: what this record changed in the recipe
            "runs": [run for run in earlier if run["seed"] not in args.seeds],
        }
        for seed in args.seeds:
            curve = Curve(
                frameskip=frameskip,
                every=args.curve_every,
                log_every=args.log_every,
                prefix=f"{name} seed {seed}",
                levels=(0.0, recipe.target_return),
            )
            started = time.perf_counter()
            try:
                result = recipe.run(
                    seed,
                    max_seconds=args.max_seconds,
                    on_update=curve,
                    stop_at_target=not args.train_through,
                    **({} if args.max_env_steps is None else {"max_env_steps": args.max_env_steps}),
                    **({} if args.resume_from is None else {"resume_from": args.resume_from}),
                )
            except KeyboardInterrupt:
                interrupted = True
                result = None
            seconds = time.perf_counter() - started
            points = curve.finish()
            last = points[-1] if points else None
            steps = result["steps_to_target"] if result else None
            ok = steps is not None and steps <= recipe.total_steps
            solved, runs = solved + ok, runs + 1
            stopped = result["stopped"] if result else "interrupted"
            shown = f"{steps:,}" if steps is not None else "not reached"
            print(
                f"{name:<16}{seed:>5}{recipe.target_return:>9g}{recipe.total_steps:>11,}"
                f"{shown:>17}{seconds:>9.1f}"
                f"  {stopped}",
                flush=True,
            )
            run = result["run"] if result else None
            if run is not None and args.keep_checkpoint:
                kept = args.keep_checkpoint.replace("{seed}", str(seed))
                os.makedirs(os.path.dirname(os.path.abspath(kept)), exist_ok=True)
                shutil.copyfile(run.checkpoint_path, kept)
                print(f"kept {run.checkpoint_path} as {kept}", flush=True)
            learner = getattr(run, "learner", None)
            # a ReplayAgent holds the learner whose config this is (its own is the replay's)
            learner_config = getattr(getattr(learner, "learner", learner), "config", None)
            entry["runs"].append(
                {
                    "seed": seed,
                    **provenance,
                    "learner_config": (
                        dataclasses.asdict(learner_config)
                        if dataclasses.is_dataclass(learner_config)
                        else None
                    ),
                    # Ape-X and SEED: the run's own settings, with the precision it measured
                    "run_config": (
                        dataclasses.asdict(run.config)
                        if dataclasses.is_dataclass(getattr(run, "config", None))
                        else None
                    ),
                    "run_dir": str(run.dir) if run is not None else None,
                    "resumed_from": args.resume_from,
                    "resumed_at_env_steps": resumed_at,
                    "kept_checkpoint": (
                        args.keep_checkpoint.replace("{seed}", str(seed))
                        if args.keep_checkpoint
                        else None
                    ),
                    "torch_threads": torch.get_num_threads(),  # the recipe's, or its measured
                    "steps_to_target": steps,
                    "seconds_to_target": curve.seconds_to(recipe.target_return),
                    "seconds_to_zero": curve.seconds_to(0.0),
                    "solved": ok,
                    "stopped": stopped,
                    "seconds": seconds,
                    "env_steps": last["env_steps"] if last else 0,
                    "frames": last["frames"] if last else 0,
                    "final_mean_return": last["mean_return"] if last else None,
                    "curve": points,
                }
            )
            entry["runs"].sort(key=lambda run: run["seed"])
            record.write(report, args.out)  # after every run: a long one is never lost
            if interrupted:
                break
        if interrupted:
            break
    record.write(report, args.out)
    print(f"wrote {args.out}")
    if interrupted:
        print(
            "interrupted: the runs so far (the last one partial) are in the file.", file=sys.stderr
        )
        return 130
    print(f"learning: {solved}/{runs} solved")
    return 0 if solved == runs else 1


if __name__ == "__main__":
    sys.exit(main())
