"""Short in-process experiments through the engine: a config file (with ``:quick`` sizes and a ``sweep``),
``engine.run`` in-process for each point, and a view of the returned history for a report. These points leave no
record; a study whose points must be committed trains them with ``studies.points.run_point(..., record=...,
in_process=True)`` instead.
"""
from __future__ import annotations

import math
import os
from typing import Any, Mapping, Optional

import ml_collections
import numpy as np

import engine
from studies.points import Point, load_config_module, split_config_spec, sweep_points
from studies.report import REPO


def config_path(name: str) -> str:
    """``configs/<name>.py`` of this checkout."""
    return os.path.join(REPO, "configs", f"{name}.py")


def load(spec: str) -> ml_collections.ConfigDict:
    """The config of ``"configs/x.py:arg"``."""
    path, arg = split_config_spec(spec)
    return load_config_module(path).get_config(arg)


def with_overrides(config: ml_collections.ConfigDict, overrides: Mapping[str, Any]) -> ml_collections.ConfigDict:
    """A copy of ``config`` with dotted-field overrides (``{"model.num_heads": 4}``) applied."""
    config = ml_collections.ConfigDict(config.to_dict())
    for key, value in overrides.items():
        *parents, last = key.split(".")
        node = config
        for p in parents:
            node = node[p]
        if last not in node:
            raise ValueError(f"sweep point sets {key!r}, which the config does not have")
        node[last] = value
    return config


def points(spec: str) -> list[Point]:
    """The sweep points of ``spec``'s config."""
    return sweep_points(spec)


def run_point(spec: str, overrides: Mapping[str, Any], workdir: Optional[str] = None) -> dict[str, Any]:
    """``engine.run`` of ``spec``'s config with ``overrides``; returns ``history(result)`` (see below)."""
    config = with_overrides(load(spec), overrides)
    result = engine.run(config, workdir)
    return history(result, config)


def history(result: Mapping[str, Any], config: ml_collections.ConfigDict) -> dict[str, Any]:
    """What the reports read from an ``engine.run`` result, as lists over the logged steps:

    ``step``, ``loss`` (mean training loss of the interval), ``lr``, ``grad_norm``; ``stats_step`` with
    ``entropy`` / ``norm_entropy`` / ``max_logit`` ([L, H] of ``decoder_self`` at that step); ``warnings``
    (health warnings); ``diverged_step`` (first non-finite step, else None); ``eval_loss`` / ``eval_accuracy``
    (NaN when diverged); ``position_loss_step`` / ``position_loss`` (evaluations with
    ``eval.position_loss``) and ``eval_position_loss`` (the final one, or None); ``params``, ``seconds``.
    """
    train = [r for r in result["history"] if "train/loss" in r and "event" not in r]
    evals = [r for r in result["history"] if "validation/position_loss" in r and "event" not in r]
    diverged = result.get("diverged_step")
    summaries = [(s, rec["decoder_self"]) for s, rec in result["attention"] if "decoder_self" in rec]
    out = {
        "step": [r["step"] for r in train],
        "loss": [float(r["train/loss"]) if isinstance(r["train/loss"], (int, float)) else math.nan for r in train],
        "lr": [r["train/learning_rate"] for r in train],
        "grad_norm": [r["train/grad_norm"] for r in train],
        "stats_step": [s + 1 for s, _ in summaries],
        "entropy": [np.asarray(x["entropy"]) for _, x in summaries],
        "norm_entropy": [np.asarray(x["norm_entropy"]) for _, x in summaries],
        "max_logit": [np.asarray(x["max_logit"]) for _, x in summaries],
        "warnings": list(result["health_warnings"]),
        "diverged_step": diverged,
        "eval_loss": math.nan if diverged is not None else result.get("validation/loss", math.nan),
        "eval_accuracy": math.nan if diverged is not None else result.get("validation/accuracy", math.nan),
        "position_loss_step": [r["step"] for r in evals],
        "position_loss": [np.asarray(r["validation/position_loss"], np.float64) for r in evals],
        "params": result["params"],
        "seconds": 60.0 * result["wall_minutes"],
        "config": config,
    }
    out["eval_position_loss"] = out["position_loss"][-1] if evals and diverged is None else None
    return out
