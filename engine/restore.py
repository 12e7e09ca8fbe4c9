"""eval.py's engine side: restore a checkpoint of a run and evaluate it with the task's evaluators."""
from __future__ import annotations

import json
import logging
import os
from typing import Any, Optional

import jax
import ml_collections
import numpy as np

from engine import checkpoint as ckpt_lib
from engine import config as config_lib
from engine import evaluation
from engine import metrics as metrics_lib
from engine import sharding as sharding_lib
from engine import writer as writer_lib
from engine.state import abstract_state, build
from engine.steps import make_stats_step, to_device
from engine.errors import ConfigError
from engine.tasks import get_task

log = logging.getLogger("attnlab")

# Config fields that change the model or the data it reads: a --config that differs from the run's in one of
# these cannot evaluate the run's checkpoints meaningfully.
MODEL_FIELDS = ("task", "seed", "model.", "data.")


def recorded_config(workdir: str) -> ml_collections.ConfigDict:
    """The config a run recorded in ``<workdir>/config.json`` when it started; ConfigError when it has none."""
    path = os.path.join(workdir, "config.json")
    if not os.path.exists(path):
        raise ConfigError(f"--workdir={workdir} has no config.json (every run records its config there when it "
                          f"starts); pass the run's config file with --config")
    with open(path) as f:
        return ml_collections.ConfigDict(json.load(f))


def config_differences(recorded: ml_collections.ConfigDict, given: ml_collections.ConfigDict
                       ) -> tuple[list[str], list[str]]:
    """Fields where ``given`` differs from ``recorded``, as "field: X in the run, Y in --config": (those of
    ``MODEL_FIELDS``, the others)."""
    def flat(c):
        return ckpt_lib.flatten_config(json.loads(c.to_json_best_effort()))

    a, b = flat(recorded), flat(given)
    diffs = [(k, f"{k}: {a.get(k)!r} in the run, {b.get(k)!r} in --config") for k in sorted(set(a) | set(b))
             if a.get(k) != b.get(k) and not k.startswith("wandb.")]
    return ([d for k, d in diffs if k.startswith(MODEL_FIELDS)],
            [d for k, d in diffs if not k.startswith(MODEL_FIELDS)])


def eval_config(workdir: str, given: Optional[ml_collections.ConfigDict]
                ) -> tuple[ml_collections.ConfigDict, list[str]]:
    """(config, lines to log): the config eval.py evaluates ``workdir`` with: the run's recorded one, or
    ``given`` (--config) when it matches the run in every model and data field; ConfigError naming the fields
    that differ otherwise. Other differences (eval.*, train.*) come back as lines, one per field, and
    ``given``'s values are used."""
    recorded = recorded_config(workdir)
    if given is None:
        return recorded, [f"config: the run's own, {os.path.join(workdir, 'config.json')}"]
    model, other = config_differences(recorded, given)
    if model:
        shown = "; ".join(model[:4]) + (f"; +{len(model) - 4} more" if len(model) > 4 else "")
        raise ConfigError(f"--config differs from the config the run trained with "
                          f"({os.path.join(workdir, 'config.json')}) in {len(model)} model/data field(s): {shown}. "
                          f"Leave out --config to use the run's own")
    return given, [f"config: {line} (using --config's)" for line in other]


def restore_run(config: ml_collections.ConfigDict, workdir: str, *, step: Optional[int] = None):
    """(task, data, setup, state, step) of ``workdir``'s checkpoint ``step`` (default: the latest)."""
    from attention import available_backends

    task = get_task(config)
    model_cfg = config_lib.validate(config, jax.device_count(), available_backends(), task)
    mesh = sharding_lib.make_mesh(config.mesh)
    data = task.build_data(workdir, jax.process_index(), jax.process_count())
    if hasattr(data, "describe"):
        log.info("%s", data.describe())
    setup, init = build(config, task, mesh, data.vocab_size, model_cfg)
    ckpt = ckpt_lib.Checkpointer(os.path.join(workdir, "checkpoints"), async_save=False, config=config)
    try:
        state, _, step = ckpt.restore(abstract_state(setup, init), step)
    finally:
        ckpt.close()
    return task, data, setup, state, step


def evaluate_checkpoint(config: ml_collections.ConfigDict, workdir: str, *, step: Optional[int] = None,
                        split: Optional[str] = None, heatmap_examples: tuple[int, ...] = (),
                        stats_batches: int = 8) -> dict:
    """Restore a checkpoint of ``workdir`` and evaluate it on ``split`` (default: the task's
    ``default_split()``: ``config.eval.split`` for translation; synthetic tasks have one evaluation set,
    reported as "validation").

    Writes ``<workdir>/eval/<split>_step<N>/`` (hypotheses, results.json, attention tables, heatmaps) and
    returns the results: loss/perplexity/accuracy, what the task adds (``Task.evaluate_checkpoint``: BLEU/chrF
    with signatures for translation), and per-layer, per-head attention summaries averaged over
    ``stats_batches`` batches of the split.
    """
    task, data, setup, state, step = restore_run(config, workdir, step=step)
    split = split or task.default_split()
    params = state["params"]
    out_dir = os.path.join(workdir, "eval", f"{split}_step{step}")
    os.makedirs(out_dir, exist_ok=True)
    logger = writer_lib.MetricLogger(out_dir, config, process_index=jax.process_index(),
                                     run_name=os.path.basename(os.path.abspath(workdir)) + "-eval", job_type="eval")
    try:
        ev = evaluation.for_task(setup, data, logger, out_dir)
        results: dict[str, Any] = {"step": step, "split": split}
        results.update(ev.loss_metrics(params, split))
        for name, args in task.checkpoint_evaluators(split):
            results.update(evaluation.make_evaluator(name, args)(ev, params, step))
        stats_step = make_stats_step(setup, deterministic=True)
        batches = ev.batches(split)[:stats_batches]
        summaries = [jax.tree.map(np.asarray, jax.device_get(stats_step(state, to_device(b, setup.mesh, setup.layout))))
                     for b in batches]
        summary = jax.tree.map(lambda *xs: np.mean(np.stack(xs), axis=0), *summaries)
        tables = "\n\n".join(metrics_lib.format_table(summary, f) for f in metrics_lib.FIELDS)
        if jax.process_index() == 0:  # several hosts: the lead writes shared files
            with open(os.path.join(out_dir, "attention.txt"), "w") as f:
                f.write(tables + "\n")
        results["attention"] = jax.tree.map(lambda a: np.round(a, 5).tolist(), summary)
        logger.log(step, {k: v for k, v in results.items() if isinstance(v, float)}
                   | metrics_lib.flatten_summary(summary))
        if task.draws_heatmaps and heatmap_examples:
            images = ev.heatmaps(params, step, split, indices=heatmap_examples)
            logger.log_images(step, images)
            results["heatmaps"] = sorted(images.values())
        if jax.process_index() == 0:
            with open(os.path.join(out_dir, "results.json"), "w") as f:
                json.dump(results, f, indent=1)
        results["tables"] = tables
        results["out_dir"] = out_dir
        return results
    finally:
        logger.close()


def diagnose_checkpoint(config: ml_collections.ConfigDict, workdir: str, *, step: Optional[int] = None,
                        split: Optional[str] = None) -> dict:
    """The attention doctor (``engine.doctor``) on checkpoint ``step`` of ``workdir`` and batches of ``split``:
    writes ``<workdir>/eval/diagnose_step<N>/report.md`` and ``report.json``; returns ``{"step", "summary",
    "out_dir", "findings"}``."""
    from engine import doctor

    task, data, setup, state, step = restore_run(config, workdir, step=step)
    split = split or task.default_split()
    tok = getattr(data, "tokenizer", None)
    out_dir = os.path.join(workdir, "eval", f"diagnose_step{step}")
    findings, summary = doctor.run_diagnosis(
        setup.model(state["params"]), task.eval_batches(data, split), out_dir, task=task,
        piece_labels=[tok.id_to_piece(i) for i in range(tok.vocab_size)] if tok is not None else None,
        thresholds=config.doctor, title=f"Attention doctor: {os.path.basename(os.path.abspath(workdir))}, step {step}",
        meta={"workdir": workdir, "split": split, "step": step},
        write=jax.process_index() == 0)  # several hosts: the lead writes shared files
    return {"step": step, "summary": summary, "out_dir": out_dir, "findings": findings}
