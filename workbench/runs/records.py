"""What a run leaves on disk: ``metrics.jsonl`` (a header line per segment, then one row per
iteration or interval, and one per event) and its checkpoints (``checkpoints``).

One row schema for every run kind (``Run``, ``Apex``, ``Seed``), namespaced keys:

* ``charts/...``: progress and returns, the same keys for every kind: ``charts/iteration``,
  ``charts/env_steps``, ``charts/updates``, ``charts/wall_seconds``, ``charts/steps_per_second``,
  ``charts/updates_per_second``, ``charts/episodes`` (ended since the last row),
  ``charts/episode_return`` (their mean raw return), ``charts/mean_return`` (the mean of the last
  20 episodes; None until 20 have ended), and what each kind adds (``charts/policy_lag`` ...);
* ``losses/...``: the learner's; ``time/...``: seconds per stage;
* ``apex/...``, ``seed/...``, ``sampler/...``: what one system alone measures.

An event row has an ``"event"`` key (``settings``, ``settings_refused``, ``actors``, ``checkpoint``,
``actor_restart``, ``worker_restart``, ``resumed``) beside the counters at which it happened.
Non-finite numbers are written as null (strict JSON).
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import math
import os
import random
import subprocess
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch

from workbench.runs.checkpoints import load_checkpoint_file
from workbench.runs.control import default_runs_dir

__all__ = [
    "ResumePoint",
    "config_from_dict",
    "config_to_dict",
    "git_commit",
    "jsonable",
    "read_lines",
    "load_metrics",
    "resume_point",
    "rng_states",
    "set_rng_states",
]


def jsonable(value: Any) -> Any:
    """Strict JSON: NaN and infinities become null; tuples lists; tensors and numpy scalars
    numbers."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return jsonable(config_to_dict(value))
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (torch.Tensor, np.generic)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)


def read_lines(path: "str | os.PathLike") -> list[dict]:
    """Every line of a JSON-lines file, in order. An unfinished last line (a process killed while
    it wrote) is left out; a damaged line before it is an error that names the line."""
    with open(path) as f:
        lines = f.read().split("\n")
    records = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as error:
            if number == len(lines):  # no newline after it: the write was cut short
                break
            raise ValueError(
                f"{path}, line {number}, is not JSON ({error.msg}): the file was damaged. Keep "
                "a copy, then remove or repair that line."
            ) from error
    return records


def load_metrics(path: "str | os.PathLike") -> tuple[list[dict], list[dict]]:
    """``(headers, rows)`` from a run's ``metrics.jsonl`` (or its folder).

    A header line starts every segment of the run (its start, each restart or resume); rows are
    metric rows and event rows (with an ``"event"`` key). Non-finite numbers were written as null.
    An unfinished last line (``read_lines``) is left out.
    """
    path = Path(path)
    if path.is_dir():
        path = path / "metrics.jsonl"
    headers, rows = [], []
    for record in read_lines(path):
        (headers if record.get("type") == "header" else rows).append(record)
    return headers, rows


def git_commit() -> str:
    """The package's commit (read-only ``git rev-parse HEAD``), or ``"unknown"``."""
    try:
        result = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=Path(__file__).resolve().parent,
            env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"},
            capture_output=True,
            text=True,
            timeout=5,
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return result.stdout.strip() if result.returncode == 0 and result.stdout.strip() else "unknown"


# --------------------------------------------------------------------------------------------------
# Configs as plain data (headers, checkpoints)


def config_to_dict(config: Any) -> Any:
    """A dataclass config (nested ones included) as plain data that ``config_from_dict`` turns back
    into the same config: ``{"__class__": "module.Name", field: value, ...}``."""
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        out = {"__class__": f"{type(config).__module__}.{type(config).__qualname__}"}
        for field in dataclasses.fields(config):
            out[field.name] = config_to_dict(getattr(config, field.name))
        return out
    if isinstance(config, dict):
        return {k: config_to_dict(v) for k, v in config.items()}
    if isinstance(config, (list, tuple)):
        return type(config)(config_to_dict(v) for v in config)
    return config


def config_from_dict(data: Any) -> Any:
    """The config ``config_to_dict`` described (classes are looked up in ``workbench`` only; a
    field a class has ``renamed`` since is read under its name now, and one it has ``retired``,
    moved to another config, is left out). Any other field is refused with a ``ValueError`` that
    names it and the class's fields: a mistyped or foreign field is never dropped unseen."""
    if isinstance(data, dict) and "__class__" in data:
        module_name, _, name = data["__class__"].rpartition(".")
        if not module_name.startswith("workbench."):
            raise ValueError(
                f"a saved config names {data['__class__']!r}, outside workbench; refused"
            )
        cls = getattr(importlib.import_module(module_name), name)
        renamed = getattr(cls, "renamed", {})  # a field's earlier name, as an old file has it
        fields = {
            renamed.get(k, k): config_from_dict(v) for k, v in data.items() if k != "__class__"
        }
        init = {f.name for f in dataclasses.fields(cls) if f.init}
        unknown = sorted(set(fields) - init - set(getattr(cls, "retired", ())))
        if unknown:
            raise ValueError(
                f"a saved {name} has field(s) {unknown} that {name} does not have (its fields: "
                f"{sorted(init)}); a field that moved to another config belongs in {name}.retired, "
                "a renamed one in its renamed"
            )
        return cls(**{k: v for k, v in fields.items() if k in init})
    if isinstance(data, dict):
        return {k: config_from_dict(v) for k, v in data.items()}
    if isinstance(data, list):
        return [config_from_dict(v) for v in data]
    return data


# --------------------------------------------------------------------------------------------------
# Checkpoints


def rng_states() -> dict[str, Any]:
    """Generators' states in types ``torch.load(weights_only=True)`` accepts."""
    kind, keys, position, has_gauss, gauss = np.random.get_state()
    states = {
        "torch": torch.get_rng_state(),
        "numpy": (kind, torch.from_numpy(keys.astype(np.int64)), position, has_gauss, gauss),
        "python": random.getstate(),
    }
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def set_rng_states(states: dict[str, Any], reseed: int | None = None) -> None:
    """Restore saved RNG states; ``reseed`` then seeds torch anew (a continuation at another seed
    draws its own samples, not the saved run's)."""
    torch.set_rng_state(states["torch"])
    kind, keys, position, has_gauss, gauss = states["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), position, has_gauss, gauss))
    random.setstate(states["python"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])
    if reseed is not None:
        torch.manual_seed(reseed)


class ResumePoint(NamedTuple):
    """What a run needs to continue a checkpoint (``resume_point``)."""

    saved: dict[str, Any]  # the loaded checkpoint
    config: Any
    runs_dir: str
    name: str | None  # None: a fresh name (a continuation of its own)


def resume_point(
    path: "str | os.PathLike",
    config: Any = None,
    runs_dir: "str | None" = None,
    seed: "int | None" = None,
) -> ResumePoint:
    """What a run needs to continue a checkpoint (a file, or a run's folder): the loaded
    checkpoint, the config (``config``, or the saved one), the runs folder to write in
    (``runs_dir``; else the one the checkpoint's run lives in; a checkpoint kept apart from its
    run, such as ``data/seed_vtrace_pong_fast_climb.pt``, starts its folder in the default runs
    folder, not beside the file) and the name. Without ``seed`` the same run goes on (its name,
    so its metrics file grows); with it a continuation of its own: the config's seed replaced,
    so that seed picks the envs and the sampling, under a fresh name."""
    saved = load_checkpoint_file(path)
    if config is None:
        config = config_from_dict(saved["state"]["config"])
    if seed is not None:
        config = dataclasses.replace(config, seed=seed)
    if runs_dir is None:
        folder = Path(path) if Path(path).is_dir() else Path(path).parent
        in_its_run = (folder / "metrics.jsonl").is_file()
        runs_dir = str(folder.parent) if in_its_run else default_runs_dir()
    return ResumePoint(saved, config, runs_dir, saved["name"] if seed is None else None)
