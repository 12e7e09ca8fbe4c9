"""Decoder-only synthetic task: multi-query associative recall (MQAR, Arora et al. 2023 "Zoology").

    python train.py --config=configs/lm_mqar.py
    python train.py --config=configs/lm_mqar.py:pairs=16,heads=1,qk_dim=16

The model reads key-value pairs, then must answer queried keys with their values. Evaluation: accuracy on the
query positions (``validation/accuracy``) and on whole sequences. Arguments: pairs, seq_len, vocab, heads,
qk_dim, layers, d_model, steps, runlocal.
"""
from engine.config import parse_arg
from engine.config import synthetic_config


def get_config(arg=None):
    a = parse_arg(arg, pairs=8, seq_len=64, vocab=128, heads=2, qk_dim=0, layers=2, d_model=64, steps=3000,
                  runlocal=False)
    c = synthetic_config("mqar", heads=a.heads, qk_dim=a.qk_dim, layers=a.layers, d_model=a.d_model,
                         steps=a.steps, runlocal=a.runlocal)
    c.data.update(vocab_size=a.vocab, seq_len=a.seq_len, mqar_num_kv_pairs=a.pairs)
    c.model.max_len = a.seq_len
    return c
