"""attnlab vs transformers on random-weight checkpoints of each family: the table in docs/pretrained.md.

    python scripts/pretrained_equivalence.py [--d_model=64 --layers=2]

For each family writes a random-weight checkpoint with ``transformers`` (``pretrained.random_checkpoints``),
loads it with ``pretrained.load`` and reports: the parameter count, the time to load, the largest logit
difference relative to the largest reference logit over the real positions of a right-padded float32 batch
for each CPU backend, and whether 20 greedy tokens equal ``generate``'s (decoder families). The same
comparisons are asserted by tests/test_pretrained.py. Needs ``pip install '.[pretrained,reference]'``.
"""
from __future__ import annotations

import argparse
import tempfile

import jax
import jax.numpy as jnp
import numpy as np

import models
import pretrained
from pretrained import random_checkpoints

BACKENDS = ("reference", "xla", "chunked")
CLASSES = {"gpt2": "GPT2LMHeadModel", "llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM",
           "marian": "MarianMTModel", "bert": "BertForMaskedLM"}


def max_rel(ours, ref, mask) -> float:
    m = mask.astype(bool)
    return float(np.abs(ours - ref)[m].max() / np.abs(ref[m]).max())


def compare(family: str, directory: str) -> dict:
    import torch
    import transformers

    ref = getattr(transformers, CLASSES[family]).from_pretrained(directory, attn_implementation="eager").eval()
    row = {"family": family}
    rng = np.random.default_rng(0)
    lengths = np.array([12, 7, 10])
    for backend in BACKENDS:
        p = pretrained.load(directory, attention_impl=backend)
        V, pad = p.cfg.vocab_size, p.cfg.pad_id
        if backend == "reference":
            row["params"] = sum(x.size for x in jax.tree.leaves(p.model))
            row["load_s"] = p.load_seconds
        ids = rng.integers(3, V - 2, (3, 12))
        mask = (np.arange(12)[None] < lengths[:, None]).astype(np.int64)
        with torch.no_grad():
            if family == "marian":
                src = np.where(mask, ids, pad)
                dec = np.concatenate([np.full((3, 1), p.cfg.bos_id), ids[:, :-1]], 1)
                r = ref(input_ids=torch.tensor(src), attention_mask=torch.tensor(mask),
                        decoder_input_ids=torch.tensor(dec), decoder_attention_mask=torch.tensor(mask)).logits.numpy()
                ours = p.model(jnp.asarray(src), jnp.asarray(np.where(mask, ids, pad)))
            else:
                src = np.where(mask, ids, pad)
                r = ref(torch.tensor(src), attention_mask=torch.tensor(mask)).logits.numpy()
                ours = (p.model(jnp.asarray(src)) if family == "bert"
                        else p.model(jnp.asarray(src), segmentation=jnp.asarray(mask)))
        row[backend] = max_rel(np.asarray(ours), r, mask)
    if family != "bert":
        p = pretrained.load(directory)
        src = rng.integers(3, p.cfg.vocab_size - 2, (2, 6))
        with torch.no_grad():
            gen = ref.generate(torch.tensor(src), attention_mask=torch.ones(src.shape, dtype=torch.long),
                               max_new_tokens=20, min_new_tokens=20, do_sample=False, num_beams=1,
                               eos_token_id=None, pad_token_id=p.cfg.pad_id).numpy()
        if family == "marian":
            ours, theirs = models.greedy_decode(p.model, jnp.asarray(src), max_len=20), gen[:, 1:]
        else:
            ours, theirs = models.lm_greedy_decode(p.model, jnp.asarray(src), max_new_tokens=20), gen[:, 6:]
        row["greedy"] = "identical" if np.array_equal(np.asarray(ours), theirs) else "DIFFERENT"
    else:
        row["greedy"] = "n/a (encoder)"
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--d_model", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as root:
        for family in random_checkpoints.FAMILIES:
            d = random_checkpoints.make(family, f"{root}/{family}", d_model=args.d_model, layers=args.layers,
                                        d_ff=2 * args.d_model)
            rows.append(compare(family, d))
    print(f"d_model {args.d_model}, {args.layers} layers per stack, 4 heads (Llama/Qwen2: 2 key/value heads), "
          f"float32, batch 3 right-padded to 12 tokens (lengths 12, 7, 10)\n")
    print("| family | parameters | load s | max rel. logit diff: " + " | ".join(BACKENDS) + " | 20 greedy tokens |")
    print("|---|---|---|" + "---|" * len(BACKENDS) + "---|")
    for r in rows:
        print(f"| {r['family']} | {r['params']:,} | {r['load_s']:.2f} | " + " | ".join(f"{r[b]:.1e}" for b in BACKENDS)
              + f" | {r['greedy']} |")


if __name__ == "__main__":
    main()
