"""The doctor, the explorer and translation evaluation on a pretrained checkpoint.

``PretrainedTask`` answers what the analyses ask of a task: its kind ("lm", "translation" or "mlm"), batches
of Bible text in the checkpoint's own token ids, the vocabulary's pieces and special ids, and translation
with BLEU for Marian. ``run`` is what ``eval.py --pretrained`` calls.
"""
from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator, Sequence
from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

import models
from data import bible
from pretrained import Pretrained, load

KINDS = {"gpt2": "lm", "llama": "lm", "marian": "translation", "bert": "mlm"}


def bible_pairs(split: str) -> list[tuple[str, str]]:
    """(Spanish, English) verses of ``split`` ("train", "validation", "test") of our Bible corpus, in order."""
    return [(es, en) for book, chapter, _, es, en in bible.read_pairs(bible.CORPUS_PATH)
            if bible.chapter_split(book, chapter) == split]


def banned_tokens(p: Pretrained) -> list[int]:
    """The single-token ``bad_words_ids`` of ``p``'s checkpoint (opus-mt bans its padding token), from
    config.json or, where newer ``transformers`` keeps generation settings, generation_config.json."""
    banned = list(p.hf_config.get("bad_words_ids") or [])
    path = os.path.join(p.directory, "generation_config.json")
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            banned += json.load(f).get("bad_words_ids") or []
    return sorted({int(w[0]) for w in banned if len(w) == 1})


def decoding_model(p: Pretrained) -> nnx.Module:
    """``p``'s model for generation: its logit bias at ``banned_tokens(p)`` is -1e9, as the reference's
    ``generate`` bans them; ``p.model`` itself when nothing is banned (or it has no logit bias)."""
    banned = banned_tokens(p)
    if not banned or p.model.logits_bias is None:
        return p.model
    graphdef, state = nnx.split(p.model)
    model = nnx.merge(graphdef, jax.tree.map(lambda x: x, state))
    model.logits_bias[...] = model.logits_bias[...].at[jnp.asarray(banned)].set(-1e9)
    return model


class PretrainedTask:
    """A loaded checkpoint seen as a task. ``max_len``: tokens kept per sequence (and the decoding limit)."""

    def __init__(self, p: Pretrained, *, max_len: int = 64):
        if p.tokenizer is None:
            raise ValueError(f"{p.directory} has no tokenizer files (tokenizer.json, or Marian's *.spm + vocab.json); "
                             f"the analyses need text")
        self.p, self.kind, self.cfg = p, KINDS[p.family], p.cfg
        self.max_len = min(max_len, p.cfg.max_len) if p.cfg.position == "learned" else max_len

    # ------------------------------------------------------------------------------------------- vocabulary
    def piece_labels(self) -> list[str]:
        return [self.p.tokenizer.id_to_piece(i) for i in range(self.cfg.vocab_size)]

    def special_ids(self) -> list[int]:
        """BOS/EOS and the tokenizer's special tokens (``tokenizer.json``'s added tokens marked special: BERT's
        [CLS], [SEP], [MASK], ...)."""
        ids = {self.cfg.bos_id, self.cfg.eos_id}
        path = os.path.join(self.p.directory, "tokenizer.json")
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                ids |= {int(t["id"]) for t in json.load(f).get("added_tokens") or () if t.get("special")}
        return sorted(ids)

    # ---------------------------------------------------------------------------------------------- batches
    def _pad(self, rows: Sequence[Sequence[int]]) -> np.ndarray:
        T = max(len(r) for r in rows)
        out = np.full((len(rows), T), self.cfg.pad_id, np.int32)
        for i, r in enumerate(rows):
            out[i, :len(r)] = r
        return out

    def batch(self, pairs: Sequence[tuple[str, str]]) -> dict[str, np.ndarray]:
        """One batch of ``pairs`` (Spanish, English): translation {inputs, targets}; lm {inputs, segmentation}
        on the English side; mlm {inputs, inputs_segmentation} on the English side."""
        tok, L = self.p.tokenizer, self.max_len
        if self.kind == "translation":
            return {"inputs": self._pad([tok.encode(es)[:L] for es, _ in pairs]),
                    "targets": self._pad([tok.encode(en, target=True)[:L] for _, en in pairs])}
        ids = self._pad([tok.encode(en)[:L] for _, en in pairs])
        lengths = np.array([min(len(tok.encode(en)), L) for _, en in pairs])
        mask = (np.arange(ids.shape[1])[None] < lengths[:, None]).astype(np.int32)
        return {"inputs": ids, ("segmentation" if self.kind == "lm" else "inputs_segmentation"): mask}

    def batches(self, split: str, *, batch_size: int = 8, limit: int = 64) -> Iterator[dict[str, np.ndarray]]:
        pairs = bible_pairs(split)[:limit]
        for i in range(0, len(pairs), batch_size):
            yield self.batch(pairs[i:i + batch_size])

    # ----------------------------------------------------------------------------------------------- doctor
    def diagnose(self, out_dir: str, split: str) -> tuple[list, str]:
        """The attention doctor (``engine.doctor``) on batches of ``split``; writes report.md / report.json."""
        from engine import doctor

        return doctor.run_diagnosis(
            self.p.model, self.batches(split), out_dir, task=self.kind, special_ids=self.special_ids(),
            piece_labels=self.piece_labels(), title=f"Attention doctor: {os.path.basename(self.p.directory.rstrip('/'))}",
            meta={"pretrained": self.p.directory, "family": self.p.family, "split": split})

    # --------------------------------------------------------------------------------------------- explorer
    def explore(self, out_dir: str, split: str, rows: Sequence[int]) -> dict[int, str]:
        """Explorer pages (``engine.explorer``) for verses ``rows`` of ``split``, teacher-forced on the
        reference backend; returns row -> path."""
        from engine import explorer

        pairs = bible_pairs(split)
        bad = [r for r in rows if not 0 <= r < len(pairs)]
        if bad:
            raise ValueError(f"--examples {bad} out of range: split {split!r} has {len(pairs)} verses")
        batch = self.batch([pairs[r] for r in rows])
        piece = self.p.tokenizer.id_to_piece
        if self.kind != "mlm":
            paths = explorer.write_batch_explorers(self.p.model, batch, out_dir, rows=range(len(rows)),
                                                   source_piece=piece, target_piece=piece,
                                                   title=os.path.basename(self.p.directory.rstrip("/")))
            out = {}
            for i, path in paths.items():  # pages are written by batch row; name them by verse
                out[rows[i]] = os.path.join(out_dir, f"example{rows[i]}.html")
                os.replace(path, out[rows[i]]) if path != out[rows[i]] else None
            return out
        ref = load(self.p.directory, attention_impl="reference").model
        seg = batch["inputs_segmentation"]
        _, stats = ref.encode(jnp.asarray(batch["inputs"]), inputs_segmentation=jnp.asarray(seg), return_stats=True)
        stats = {"encoder_self": jax.device_get(stats)}
        out = {}
        for i, row in enumerate(rows):
            n = int(seg[i].sum())
            labels = [piece(int(t)) for t in batch["inputs"][i, :n]]
            weights, head_stats = explorer.example_view(stats, i, {"encoder_self": (n, n)})
            out[row] = explorer.write_explorer(os.path.join(out_dir, f"example{row}.html"), weights,
                                               {"encoder_self": (labels, labels)}, head_stats, title=f"row {row}")
        return out

    # ------------------------------------------------------------------------------------------ translation
    def translate(self, sources: Sequence[str], *, beam_size: int = 4, batch_size: int = 32) -> list[str]:
        """Marian: ``sources`` (Spanish) -> English hypotheses with attnlab's KV-cache beam search."""
        if self.kind != "translation":
            raise ValueError(f"translation needs an encoder-decoder checkpoint; this is {self.p.family}")
        model, tok = decoding_model(self.p), self.p.tokenizer
        ids = [tok.encode(s)[:self.max_len] for s in sources]
        order = np.argsort([len(x) for x in ids])
        out: list[Optional[str]] = [None] * len(ids)
        for i in range(0, len(order), batch_size):
            idx = order[i:i + batch_size]
            src = self._pad([ids[j] for j in idx])
            max_len = min(2 * src.shape[1] + 10, 512)
            if beam_size > 1:
                toks = models.beam_search(model, jnp.asarray(src), beam_size=beam_size, max_len=max_len)
            else:
                toks = models.greedy_decode(model, jnp.asarray(src), max_len=max_len)
            from engine.evaluation import cut_at_eos

            for j, row in zip(idx, np.asarray(toks)):
                out[j] = tok.decode(cut_at_eos(row, self.cfg.eos_id, self.cfg.pad_id))
        return [o or "" for o in out]


def run(path_or_id: str, out_dir: str, *, split: str = "test", diagnose: bool = False,
        examples: Sequence[int] = (), attention_impl: str = "auto", limit: int = 0, beam_size: int = 4
        ) -> dict[str, Any]:
    """``eval.py --pretrained``: load, then the doctor (``diagnose``), or explorer pages for ``examples`` and,
    for Marian, BLEU/chrF on ``limit`` verses (0: all) of our Bible ``split``. Writes into ``out_dir``;
    returns a summary dict (also written as results.json)."""
    from engine.evaluation import score, write_hypotheses

    p = load(path_or_id, attention_impl=attention_impl)
    task = PretrainedTask(p)
    os.makedirs(out_dir, exist_ok=True)
    r: dict[str, Any] = {"pretrained": path_or_id, "family": p.family, "load_seconds": round(p.load_seconds, 2),
                         "split": split, "out_dir": out_dir}
    if diagnose:
        findings, summary = task.diagnose(os.path.join(out_dir, "diagnose"), split)
        r.update(summary=summary, report=os.path.join(out_dir, "diagnose", "report.md"))
        return r
    if examples:
        r["explorer"] = {str(k): v for k, v in task.explore(os.path.join(out_dir, "explorer"), split, examples).items()}
    if task.kind == "translation":
        pairs = bible_pairs(split)
        pairs = pairs[:limit] if limit else pairs
        start = time.perf_counter()
        hyps = task.translate([es for es, _ in pairs], beam_size=beam_size)
        r["translate_seconds"] = round(time.perf_counter() - start, 1)
        r["hypotheses_path"] = os.path.join(out_dir, f"{split}.hyp.txt")
        write_hypotheses(r["hypotheses_path"], hyps)
        r.update({k: v for k, v in score(hyps, [en for _, en in pairs]).items() if k != "bleu_text"})
        r["sentences"] = len(pairs)
    with open(os.path.join(out_dir, "results.json"), "w", encoding="utf-8") as f:
        json.dump(r, f, indent=2)
    return r
