"""Presets the config files build on: ``config.model`` with the model's defaults, the synthetic
decoder-only set-up and the reproductions' small decoder. Config files are not a package, so one loads this
module by path, like any sibling config::

    from engine.config import sibling_config

    presets = sibling_config(__file__, "_presets")
    c = presets.small_decoder_config("mqar", ...)

The leading underscore marks it as a helper, not an experiment (it has no ``get_config``).
"""
from __future__ import annotations

import dataclasses
from typing import Any

import ml_collections

import data
import models
from engine.config import base_config


def model_section(**fields: Any) -> ml_collections.ConfigDict:
    """``config.model``: ``models.TransformerConfig``'s fields with its defaults (vocab_size comes from the
    data), overridden by ``fields`` that are not None.

    num_kv_heads / qk_dim / v_dim / attention_scale stay unset (None: derived) unless given; they are typed
    placeholders so ``--config.model.qk_dim=32`` works on the command line.
    """
    typed = {"num_kv_heads": int, "qk_dim": int, "v_dim": int, "attention_scale": float}
    d = {}
    for f in dataclasses.fields(models.TransformerConfig):
        if not f.init or f.name == "vocab_size":
            continue
        default = f.default
        if f.name == "attention_options":
            default = ml_collections.ConfigDict()
        d[f.name] = ml_collections.config_dict.placeholder(typed[f.name]) if f.name in typed else default
    m = ml_collections.ConfigDict(d)
    for key, value in fields.items():
        if value is not None:
            m[key] = value
    return m


def synthetic_config(task: str, *, heads: int, qk_dim: int, layers: int, d_model: int, steps: int,
                     runlocal: bool) -> ml_collections.ConfigDict:
    """A decoder-only config for a synthetic task of ``data.build_synthetic`` (CPU-sized)."""
    c = base_config()
    c.task = "lm"
    c.data = data.default_synthetic_config()
    c.data.task = task
    c.data.batch_size = 64
    c.model = model_section(
        d_model=d_model, num_heads=heads, d_ff=4 * d_model, num_encoder_layers=0, num_decoder_layers=layers,
        dropout_rate=0.0, position="learned", max_len=c.data.seq_len, qk_dim=qk_dim or None, v_dim=qk_dim or None,
    )
    t = c.train
    t.optimizer = "adamw"
    t.schedule = "cosine"
    t.learning_rate = 1e-3
    t.warmup_steps = 100
    t.weight_decay = 0.01
    t.grad_clip_norm = 1.0
    t.label_smoothing = 0.0
    t.num_steps = steps
    t.log_every = 50
    t.stats_every = 100
    t.eval_every = 500
    t.checkpoint_every = 1000
    c.wandb.tags = ("synthetic", task)
    if runlocal:
        c.model.update(d_model=32, d_ff=64, num_decoder_layers=min(layers, 2))
        c.data.batch_size = 16
        t.update(num_steps=min(steps, 20), warmup_steps=5, log_every=5, stats_every=10, eval_every=10,
                 checkpoint_every=10)
    return c


def small_decoder_config(task: str, *, quick: bool, d_model: int, heads: int, layers: int, learning_rate: float,
                         steps: int, batch_size: int, seq_len: int, vocab: int, log_every: int,
                         num_eval_batches: int = 8, schedule: str = "cosine", warmup_steps: int = 0,
                         qk_dim: int = 0, v_dim: int = 0) -> ml_collections.ConfigDict:
    """The reproductions' set-up: a small pre-LN decoder without dropout on a synthetic task, AdamW (0.9,
    0.95, eps 1e-8, no weight decay, no clipping), warmup (default steps // 10) then ``schedule``, attention
    statistics and the health monitor at every logged step, one device, evaluation at the end.
    ``quick``: the caller passes tiny sizes; this only shortens logging so a test runs in seconds."""
    c = base_config()
    c.task = "lm"
    c.data = data.default_synthetic_config()
    c.data.update(task=task, batch_size=batch_size, seq_len=seq_len, vocab_size=vocab, batch_multiple=1,
                  num_eval_batches=num_eval_batches, prefetch=0 if quick else 2)
    c.model = model_section(
        d_model=d_model, num_heads=heads, d_ff=4 * d_model, num_encoder_layers=0, num_decoder_layers=layers,
        dropout_rate=0.0, position="learned", max_len=seq_len, qk_dim=qk_dim or None, v_dim=v_dim or None,
        attention_impl="xla")
    t = c.train
    t.update(optimizer="adamw", schedule=schedule, learning_rate=float(learning_rate), b2=0.95, eps=1e-8,
             weight_decay=0.0, grad_clip_norm=0.0, final_lr_fraction=0.1, label_smoothing=0.0, num_steps=steps,
             warmup_steps=warmup_steps or max(1, steps // 10), log_every=log_every, stats_every=log_every,
             eval_every=0, checkpoint_every=0, peak_flops=1e12 if quick else 0.0)
    c.mesh.data = 1
    c.wandb.tags = ("reproduction", task)
    return c
