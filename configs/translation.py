"""The main job: Spanish -> English on the embedded Bible corpus, sized for a 2-core CPU (~15 minutes).

    python train.py --config=configs/translation.py
    python train.py --config=configs/translation.py:heads=8,qk_dim=32      # config-file arguments
    python train.py --config=configs/translation.py --config.model.num_heads=8  # any field
    python train.py --config=configs/translation.py:runlocal                # a 1-minute smoke run

Arguments (``:key=value,...``): heads, kv_heads, qk_dim, v_dim, d_model, d_ff, layers (encoder and decoder),
minutes (training budget), steps, reverse (English -> Spanish), runlocal (tiny model, few steps).
"""
import data
from engine.config import base_config, parse_arg, sibling_config

model_section = sibling_config(__file__, "_presets").model_section


def get_config(arg=None):
    a = parse_arg(arg, heads=4, kv_heads=0, qk_dim=0, v_dim=0, d_model=128, d_ff=512, layers=3,
                  minutes=12.0, steps=100_000, reverse=False, runlocal=False)
    c = base_config()
    c.task = "translation"

    c.data = data.default_translation_config()
    if a.reverse:
        c.data.source_lang, c.data.target_lang = "en", "es"
    c.data.vocab_size = 8000
    c.data.max_source_len = 128
    c.data.max_target_len = 128
    c.data.packing = True
    c.data.batch_size = 8  # packed rows of 128 tokens: ~950 real tokens per side per step (many small updates)

    c.model = model_section(
        d_model=a.d_model, num_heads=a.heads, d_ff=a.d_ff, num_encoder_layers=a.layers, num_decoder_layers=a.layers,
        dropout_rate=0.0, norm="pre", position="sinusoidal", max_len=128,  # ~2 epochs: nothing to regularize
        num_kv_heads=a.kv_heads or None, qk_dim=a.qk_dim or None, v_dim=a.v_dim or None,
        qk_layernorm=True,  # bounded attention logits, so the high learning rate below stays stable
    )

    t = c.train
    t.optimizer = "adam"
    t.schedule = "rsqrt"
    t.learning_rate = 4e-3  # a short run: high peak; rsqrt keeps it above 1e-3 for ~1600 steps
    t.warmup_steps = 100
    t.label_smoothing = 0.1
    t.grad_clip_norm = 1.0
    t.num_steps = a.steps
    t.max_minutes = a.minutes
    t.log_every = 10
    t.stats_every = 50
    t.eval_every = 0  # no mid-run decoding on CPU: evaluate once at the end
    t.checkpoint_every = 200

    e = c.eval
    e.decode = "greedy"
    e.decode_batch_size = 128
    e.length_bucket = 128  # one decoding shape (source 128, output 128): a single compile
    e.max_decode_extra = 32
    e.bleu_examples = 200
    e.heatmap_examples = 2

    c.wandb.project = "attnlab"
    c.wandb.tags = ("translation", "bible_es_en", "cpu")

    if a.runlocal:
        c.model.update(d_model=64, d_ff=128, num_heads=min(a.heads, 4), num_encoder_layers=1, num_decoder_layers=1)
        c.data.batch_size = 8
        t.num_steps = min(a.steps, 20)
        t.max_minutes = 0.0
        t.warmup_steps = 10
        t.log_every = 5
        t.stats_every = 10
        t.checkpoint_every = 10
    return c
