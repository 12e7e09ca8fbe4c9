"""Vaswani et al. (2017) Transformer base on WMT14 English -> German, for accelerators.

    python train.py --config=configs/translation_wmt14.py                  # base, 100k steps
    python train.py --config=configs/translation_wmt14.py:heads=16,qk_dim=32,v_dim=32   # Table 3 row (A)
    python train.py --config=configs/translation_wmt14.py:qk_dim=16        # Table 3 row (B)

Data: TFDS ``wmt14_translate/de-en`` (needs network and TensorFlow to prepare the dataset once; see the data
README). Model: d_model 512, 8 heads, d_ff 2048, 6+6 layers, post-LN, dropout 0.1, shared 37k BPE vocabulary;
Adam (0.9, 0.98, 1e-9) with warmup 4000 and the inverse-square-root schedule (peak (512 * 4000)^-0.5);
label smoothing 0.1; ~25k tokens per side per step; beam 4, length penalty 0.6. bfloat16 compute.
Arguments: heads, kv_heads, qk_dim, v_dim, steps, pair (de-en, fr-en, ...), reverse (X -> English), runlocal.
"""

import data
from engine.config import base_config, parse_arg, sibling_config

model_section = sibling_config(__file__, "_presets").model_section


def get_config(arg=None):
    a = parse_arg(arg, heads=8, kv_heads=0, qk_dim=0, v_dim=0, d_model=512, d_ff=2048, layers=6, dropout=0.1,
                  steps=100_000, pair="de-en", reverse=False, runlocal=False)
    c = base_config()
    c.task = "translation"
    foreign = a.pair.split("-")[0]
    c.data = data.default_translation_config()
    c.data.update(source="tfds", tfds_name=f"wmt14_translate/{a.pair}", source_lang="en", target_lang=foreign,
                  vocab_size=37000, spm_shared=True, max_source_len=256, max_target_len=256, packing=True,
                  batch_size=128, eval_batch_size=128, validation_split="validation", test_split="test")
    if a.reverse:
        c.data.source_lang, c.data.target_lang = foreign, "en"
    c.model = model_section(
        d_model=a.d_model, num_heads=a.heads, d_ff=a.d_ff, num_encoder_layers=a.layers, num_decoder_layers=a.layers,
        dropout_rate=a.dropout, norm="post", position="sinusoidal", max_len=256, dtype="bfloat16",
        num_kv_heads=a.kv_heads or None, qk_dim=a.qk_dim or None, v_dim=a.v_dim or None,
    )
    t = c.train
    t.optimizer = "adam"
    t.b1, t.b2, t.eps = 0.9, 0.98, 1e-9
    t.schedule = "rsqrt"
    t.warmup_steps = 4000
    t.learning_rate = (a.d_model * t.warmup_steps) ** -0.5
    t.label_smoothing = 0.1
    t.num_steps = a.steps
    t.log_every = 100
    t.stats_every = 1000
    t.eval_every = 10_000
    t.checkpoint_every = 5_000
    e = c.eval
    e.decode = "beam"
    e.beam_size = 4
    e.length_penalty = 0.6
    e.max_decode_extra = 50
    e.decode_batch_size = 256
    e.length_bucket = 32
    e.bleu_examples = 1000
    c.wandb.tags = ("translation", "wmt14", a.pair)
    if a.runlocal:
        c.model.update(d_model=64, d_ff=128, num_heads=4, num_encoder_layers=1, num_decoder_layers=1,
                       dtype="float32", qk_dim=None, v_dim=None)
        c.data.update(batch_size=8, eval_batch_size=8, vocab_size=8000)
        t.update(num_steps=20, warmup_steps=10, learning_rate=1e-3, log_every=5, stats_every=10, eval_every=0,
                 checkpoint_every=10)
        e.update(bleu_examples=64, decode_batch_size=16)
    return c
