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
from engine.tasks import get_task

log = logging.getLogger("attnlab")


def restore_run(config: ml_collections.ConfigDict, workdir: str, *, step: Optional[int] = None):
    """(task, data, setup, state, step) of ``workdir``'s checkpoint ``step`` (default: the latest)."""
    from attention import available_backends

    task = get_task(config)
    config_lib.validate(config, jax.device_count(), available_backends(), task)
    mesh = sharding_lib.make_mesh(config.mesh)
    data = task.build_data(workdir, jax.process_index(), jax.process_count())
    if hasattr(data, "describe"):
        log.info("%s", data.describe())
    setup, init = build(config, task, mesh, data.vocab_size)
    ckpt = ckpt_lib.Checkpointer(os.path.join(workdir, "checkpoints"), async_save=False, config=config)
    try:
        state, _, step = ckpt.restore(abstract_state(setup, init), step)
    finally:
        ckpt.close()
    return task, data, setup, state, step


def evaluate_checkpoint(config: ml_collections.ConfigDict, workdir: str, *, step: Optional[int] = None,
                        split: Optional[str] = None, heatmap_examples: tuple[int, ...] = (),
                        stats_batches: int = 8) -> dict:
    """Restore a checkpoint of ``workdir`` and evaluate it on ``split`` (default: ``config.eval.split`` for
    translation; synthetic tasks have one evaluation set, reported as "validation").

    Writes ``<workdir>/eval/<split>_step<N>/`` (hypotheses, results.json, attention tables, heatmaps) and
    returns the results: loss/perplexity/accuracy, BLEU/chrF with signatures (translation), and per-layer,
    per-head attention summaries averaged over ``stats_batches`` batches of the split.
    """
    task, data, setup, state, step = restore_run(config, workdir, step=step)
    split = split or (config.eval.split if config.task == "translation" else "validation")
    params = state["params"]
    out_dir = os.path.join(workdir, "eval", f"{split}_step{step}")
    os.makedirs(out_dir, exist_ok=True)
    logger = writer_lib.MetricLogger(out_dir, config, process_index=jax.process_index(),
                                     run_name=os.path.basename(os.path.abspath(workdir)) + "-eval", job_type="eval")
    try:
        ev = evaluation.Evaluator(setup, data, logger, out_dir)
        results: dict[str, Any] = {"step": step, "split": split}
        results.update(ev.loss_metrics(params, split))
        if config.task == "translation":
            r = ev.bleu(params, split, step)
            results.update({f"{split}/bleu": r["bleu"], f"{split}/chrf": r["chrf"],
                            "bleu_signature": r["bleu_signature"], "chrf_signature": r["chrf_signature"],
                            "hypotheses_path": r.get("hypotheses_path"), "sentences": r["num_sentences"]})
            logger.log_table(step, f"{split}/samples", ["source", "reference", "hypothesis"], r["samples"])
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
        if config.task == "translation" and heatmap_examples:
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
    split = split or (config.eval.split if config.task == "translation" else "validation")
    tok = getattr(data, "tokenizer", None)
    out_dir = os.path.join(workdir, "eval", f"diagnose_step{step}")
    findings, summary = doctor.run_diagnosis(
        setup.model(state["params"]), task.eval_batches(data, split), out_dir,
        piece_labels=[tok.id_to_piece(i) for i in range(tok.vocab_size)] if tok is not None else None,
        thresholds=config.doctor, title=f"Attention doctor: {os.path.basename(os.path.abspath(workdir))}, step {step}",
        meta={"workdir": workdir, "split": split, "step": step},
        write=jax.process_index() == 0)  # several hosts: the lead writes shared files
    return {"step": step, "summary": summary, "out_dir": out_dir, "findings": findings}
