"""Sequence classification: which part of the Bible a verse comes from (the explanation studies' task).

An encoder (d_model 64, 2 layers, 4 heads) with an attention-pooling classifier (``models.EncoderClassifier``:
one learned query attends over the encoded verse) on the bundled corpus's English verses, labelled by
testament (2 classes) or by book group (8 classes); splits are the translation corpus's whole chapters.

    python train.py --config=configs/classification.py
    python train.py --config=configs/classification.py:label=book_group,language=es
    python train.py --config=configs/classification.py:quick       # a few steps, for tests

Evaluation: accuracy on the validation split during training, on test and validation at the end
(``test/accuracy``). Arguments: label, language, heads, layers, d_model, steps, quick.
"""
import data
from engine.config import base_config, parse_arg, sibling_config

model_section = sibling_config(__file__, "_presets").model_section


def get_config(arg=None):
    a = parse_arg(arg, label="testament", language="en", heads=4, layers=2, d_model=64, steps=2000, quick=False)
    c = base_config()
    c.task = "classification"
    c.data = data.default_classification_config()
    c.data.update(label=a.label, language=a.language, vocab_size=4000, max_len=64, batch_size=32,
                  eval_batch_size=64)
    c.model = model_section(
        d_model=a.d_model, num_heads=a.heads, d_ff=4 * a.d_model, num_encoder_layers=a.layers, num_decoder_layers=0,
        dropout_rate=0.1, norm="pre", position="sinusoidal", max_len=64)
    t = c.train
    t.update(optimizer="adamw", schedule="cosine", learning_rate=1e-3, warmup_steps=100, weight_decay=0.01,
             grad_clip_norm=1.0, label_smoothing=0.0, num_steps=a.steps, log_every=50, stats_every=200,
             eval_every=500, checkpoint_every=500)
    c.wandb.tags = ("classification", "bible_es_en", a.label)
    if a.quick:
        c.data.update(vocab_size=500, max_len=32, batch_size=8, eval_batch_size=64)
        c.model.update(d_model=32, d_ff=64, num_heads=2, num_encoder_layers=1, max_len=32)
        t.update(num_steps=min(a.steps, 10), warmup_steps=2, log_every=5, stats_every=5, eval_every=0,
                 checkpoint_every=0)
        c.eval.max_batches = 2
    return c
