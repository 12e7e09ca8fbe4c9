"""The evaluators tasks compose, shared by training and eval.py.

A task lists its evaluators (``Task.evaluators(final)``: ``(name, arguments)`` entries of ``EVALUATORS``, as
big_vision configs list theirs); ``Evaluator.evaluate`` builds and runs them in order, logs their scalars once
and returns them. ``Evaluator`` itself is what they share: the run's setup, data, logger, compiled eval step and
host-local parameters; a task that decodes gets a ``TranslationEvaluator`` (``for_task``), which adds
decoding, BLEU and heatmaps, so the other tasks never build translation code.

- ``loss`` (every task): teacher-forced loss, perplexity, token accuracy and sequence accuracy on the positions
  the task scores, over a split's evaluation batches; optionally the loss per sequence position.
- ``bleu`` and ``heatmaps`` (translation): decoding (greedy or beam search) of a split's sources, scored with sacreBLEU's BLEU and chrF
  against the raw references (signatures logged); sample translations; attention heatmaps (``reference``
  backend weights) for a few fixed examples, as PNG files in ``<workdir>/heatmaps/`` and W&B images.

With several hosts, each host decodes its share of the decoding batches with its own full copy of the
parameters, the hypotheses are gathered, and every host scores the full set; only the lead process writes
files.
"""
from __future__ import annotations

import logging
import math
import os
from typing import Any, Mapping, Optional, Sequence

import flax.nnx as nnx
import jax
import jax.numpy as jnp
import numpy as np

import attention as attn
import models
from engine import explorer, logs
from engine import sharding as sharding_lib
from engine.heatmaps import plot_attention_grid

log = logging.getLogger("attnlab")

GROUPS = ("encoder_self", "decoder_self", "cross")


def round_up(n: int, multiple: int) -> int:
    return max(multiple, -(-n // multiple) * multiple)


def write_hypotheses(path: str, hypotheses: Sequence[str]) -> None:
    """``hypotheses`` to ``path``, one per line in order (a newline inside one becomes a space)."""
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(h.replace("\n", " ") for h in hypotheses) + "\n")


def score(hypotheses: Sequence[str], references: Sequence[str]) -> dict[str, Any]:
    """sacreBLEU corpus BLEU and chrF with their signatures."""
    import sacrebleu

    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses for {len(references)} references")
    bleu = sacrebleu.metrics.BLEU()
    chrf = sacrebleu.metrics.CHRF()
    b = bleu.corpus_score(list(hypotheses), [list(references)])
    c = chrf.corpus_score(list(hypotheses), [list(references)])
    return {"bleu": float(b.score), "chrf": float(c.score), "bleu_signature": str(bleu.get_signature()),
            "chrf_signature": str(chrf.get_signature()), "bleu_text": str(b)}


def describe_decoding(e, decode: Optional[str] = None) -> str:
    """What decoding ``config.eval`` (``e``) asks for, in words: "greedy search" or "beam search (beam 4,
    length penalty 0.6)"; ``decode`` overrides ``e.decode``."""
    decode = decode or e.decode
    if decode == "beam":
        return f"beam search (beam {int(e.beam_size)}, length penalty {float(e.length_penalty):g})"
    return "greedy search"


def log_decoding(e, split: str, limit: int) -> None:
    """One log line saying what an evaluation round decodes and how."""
    what = f"the first {limit} {split} sentences" if limit else f"the {split} split"
    log.info("decoding %s with %s (config.eval.decode)", what, describe_decoding(e))


def cut_at_eos(ids: Sequence[int], eos_id: int, pad_id: int) -> list[int]:
    out = []
    for i in ids:
        i = int(i)
        if i == eos_id:
            break
        if i != pad_id:
            out.append(i)
    return out


def host_local(tree):
    """On several hosts, a full copy of ``tree`` on this host's first device, so each process can decode on
    its own (decoding is not sharded); on one host, ``tree`` unchanged."""
    if jax.process_count() == 1:
        return tree
    from jax.experimental import multihost_utils

    def is_key(x) -> bool:
        return hasattr(x, "dtype") and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)

    raw = jax.tree.map(lambda x: jax.random.key_data(x) if is_key(x) else x, tree)  # gathers take no key dtype
    full = jax.device_put(multihost_utils.process_allgather(raw, tiled=True), jax.local_devices()[0])
    return jax.tree.map(lambda x, f: jax.random.wrap_key_data(f, impl=jax.random.key_impl(x)) if is_key(x) else f,
                        tree, full)


class Evaluator:
    """What the evaluators of one run (or of eval.py) share: the setup, data, logger, compiled eval step and
    host-local parameters, and the loss metrics every task has. ``for_task`` builds the right one
    (``TranslationEvaluator`` for a task that decodes)."""

    def __init__(self, setup, data, logger, workdir: Optional[str]):
        from engine.steps import make_eval_step

        self.setup = setup
        self.config = setup.config
        self.task = setup.task
        self.data = data
        self.logger = logger
        self.workdir = workdir
        self.per_position = bool(self.config.eval.position_loss)
        self.eval_step = make_eval_step(setup, per_position=self.per_position)
        self._ref_graphdef = None
        self._eval_batches: dict[str, list] = {}
        self._local: tuple = (None, None)  # (params, their host-local copy)
        self._local_rest = None

    def local_params(self, params):
        """``host_local(params)`` (a collective with several hosts: every host calls it), kept for the last
        ``params`` so an evaluation round gathers them once; also makes ``self.local_rest``."""
        if self._local_rest is None:
            self._local_rest = host_local(self.setup.rest)
        if self._local[0] is not params:
            self._local = (params, host_local(params))
        return self._local[1]

    @property
    def local_rest(self):
        """The host-local copy of the model's non-parameter state (after a ``local_params`` call)."""
        return self._local_rest

    # ---------------------------------------------------------------------------------------- loss
    def batches(self, split: str) -> list:
        """The evaluation batches of ``split`` (host arrays), capped at ``eval.max_batches``; cached."""
        if split not in self._eval_batches:
            batches = self.task.eval_batches(self.data, split)
            if self.config.eval.max_batches:
                batches = batches[: self.config.eval.max_batches]
            self._eval_batches[split] = batches
        return self._eval_batches[split]

    def loss_metrics(self, params, split: str) -> dict[str, Any]:
        """Teacher-forced loss, perplexity, token accuracy and sequence accuracy on the positions the task
        scores; with ``eval.position_loss`` also ``<split>/position_loss`` (a list: mean NLL per position)."""
        from engine.steps import to_device

        sums = None
        for batch in logs.progress(self.batches(split), f"{split} loss", unit="batches",
                                   enabled=jax.process_index() == 0):
            terms = self.eval_step(params, to_device(batch, self.setup.mesh, self.setup.layout))
            sums = terms if sums is None else jax.tree.map(jnp.add, sums, terms)
        if sums is None:
            raise ValueError(f"split {split!r} has no evaluation batches")
        sums = jax.device_get(sums)
        w = max(float(sums["weight_sum"]), 1.0)
        nll = float(sums["nll_sum"]) / w
        out: dict[str, Any] = {
            f"{split}/loss": float(sums["loss_sum"]) / w, f"{split}/nll": nll,
            f"{split}/perplexity": math.exp(min(nll, 50.0)), f"{split}/accuracy": float(sums["correct"]) / w,
            f"{split}/sequence_accuracy": float(sums["seq_correct"]) / max(float(sums["seq_count"]), 1.0)}
        if self.per_position:
            count = np.asarray(sums["position_count"], np.float64)
            per_pos = np.where(count > 0, np.asarray(sums["position_nll"], np.float64) / np.maximum(count, 1), np.nan)
            context = sharding_lib.context_size(self.setup.mesh)
            if self.setup.layout == "zigzag" and context > 1:  # back to natural order
                per_pos = per_pos[np.argsort(attn.ring.zigzag_indices(len(per_pos), context))]
            out[f"{split}/position_loss"] = [float(x) for x in per_pos]
        return out

    def reference_model(self, params) -> nnx.Module:
        """The model with the ``reference`` attention backend (full weights), sharing ``params``."""
        from engine.state import reference_graphdef

        if self._ref_graphdef is None:
            self._ref_graphdef = reference_graphdef(self.setup)
        return nnx.merge(self._ref_graphdef, self.local_params(params), self.local_rest)

    # ---------------------------------------------------------------------------------------- all
    def run(self, specs, params, step: int) -> dict[str, Any]:
        """The evaluators ``specs`` ((name, arguments) of ``EVALUATORS``) in order: scalars are logged once, after
        every evaluator that scores and before those that draw (``artifacts``); returns the merged results."""
        evaluators = [make_evaluator(name, args) for name, args in specs]
        results: dict[str, Any] = {}
        try:
            for e in (e for e in evaluators if not e.artifacts):
                results.update(e(self, params, step))
            self.logger.log(step, {k: v for k, v in results.items() if not isinstance(v, str) and v is not None})
            for e in (e for e in evaluators if e.artifacts):
                results.update(e(self, params, step))
        finally:
            self._local = (None, None)
        return results

    def evaluate(self, params, step: int, *, final: bool) -> dict[str, Any]:
        """One evaluation round of the task's evaluators (``Task.evaluators(final)``); returns the results."""
        results = self.run(self.task.evaluators(final), params, step)
        shown = ("/bleu", "/chrf")  # bleu_round printed these with their signatures
        if jax.process_index() == 0:  # every process holds the same results: the lead prints them
            log.info("eval step %d: %s", step, _fmt({k: v for k, v in results.items() if not k.endswith(shown)}))
        return results


class TranslationEvaluator(Evaluator):
    """The evaluators' shared state for a task that decodes (``Task.decodes``): besides the loss, decoding
    (greedy or beam search), BLEU/chrF and attention heatmaps of fixed examples."""

    # ------------------------------------------------------------------------------------ decoding
    def encode_sources(self, sources: Sequence[str]) -> list[list[int]]:
        """Source token ids as the training pipeline feeds them (piece ids + EOS, truncated)."""
        cfg = self.setup.model_cfg
        max_len = min(cfg.max_len, int(self.config.data.max_source_len))
        tok = self.data.source_tokenizer
        return [list(ids)[: max_len - 1] + [cfg.eos_id] for ids in tok.encode_batch(list(sources))]

    def encode_targets(self, targets: Sequence[str]) -> list[list[int]]:
        """Target token ids as training sees them (piece ids + EOS, truncated)."""
        cfg = self.setup.model_cfg
        max_len = min(cfg.max_len, int(self.config.data.max_target_len))
        return [list(ids)[: max_len - 1] + [cfg.eos_id] for ids in self.data.tokenizer.encode_batch(list(targets))]

    def translate(self, params, sources: Sequence[str], *, decode: Optional[str] = None,
                  interventions: Optional[models.Interventions] = None) -> list[str]:
        """Decode ``sources`` with the config's decoder (and ``interventions``: head masks, weight overrides);
        returns detokenized hypotheses in input order.

        Sentences are decoded in batches of ``eval.decode_batch_size`` in length order; with several hosts
        (each calls it with the same ``sources``) host p decodes batches p, p + hosts, ... (the same batches as
        one host, so the same hypotheses) and all hosts return all hypotheses."""
        e = self.config.eval
        decode = decode or e.decode
        cfg = self.setup.model_cfg
        model = nnx.merge(self.setup.graphdef, self.local_params(params), self.local_rest)
        ids = self.encode_sources(sources)
        order = np.argsort([len(x) for x in ids], kind="stable")
        bucket = int(e.length_bucket)
        bs = int(e.decode_batch_size)
        chunks = [order[start : start + bs] for start in range(0, len(order), bs)]
        hosts, me = jax.process_count(), jax.process_index()
        out: list[Optional[str]] = [None] * len(ids)
        desc = "decoding" if hosts == 1 else f"decoding (process 0's share of {len(order)}; {hosts} processes)"
        for chunk in logs.progress(chunks[me::hosts], desc, unit="sentences", size=len, enabled=me == 0):
            src_len = min(round_up(max(len(ids[i]) for i in chunk), bucket), cfg.max_len)
            arr = np.zeros((bs, src_len), np.int32)
            for row, i in enumerate(chunk):
                arr[row, : len(ids[i])] = ids[i]
            out_len = min(round_up(src_len + int(e.max_decode_extra), bucket), cfg.max_len)
            inputs = jnp.asarray(arr)
            if decode == "beam":
                tokens = models.beam_search(model, inputs, beam_size=int(e.beam_size), max_len=out_len,
                                            length_penalty=float(e.length_penalty), interventions=interventions)
            else:
                tokens = models.greedy_decode(model, inputs, max_len=out_len,
                                              inputs_segmentation=(inputs != cfg.pad_id).astype(jnp.int32),
                                              interventions=interventions)
            tokens = np.asarray(jax.device_get(tokens))
            for row, i in enumerate(chunk):
                out[i] = self.data.tokenizer.decode(cut_at_eos(tokens[row], cfg.eos_id, cfg.pad_id))
        if hosts > 1:
            from engine.runtime import allgather_strings

            def decoded_by(p: int) -> list[int]:
                return [i for chunk in chunks[p::hosts] for i in chunk]

            for p, hyps in enumerate(allgather_strings([out[i] for i in decoded_by(me)])):
                for i, h in zip(decoded_by(p), hyps):
                    out[i] = h
        return [o if o is not None else "" for o in out]

    def bleu(self, params, split: str, step: int, *, limit: int = 0, decode: Optional[str] = None,
             write: bool = True, interventions: Optional[models.Interventions] = None) -> dict[str, Any]:
        """Decode (the first ``limit`` of) ``split`` (with ``interventions``) and score it: sacreBLEU's scores
        and signatures, ``hypotheses`` (one per sentence, in order), ``samples`` and ``num_sentences``; with
        ``write``, the hypotheses also go to ``outputs/<split>_step<step>.txt`` (``hypotheses_path``); ``decoding``
        says how (``describe_decoding``)."""
        examples = list(self.data.examples(split))
        if limit:
            examples = examples[:limit]
        sources = [s for s, _ in examples]
        refs = [r for _, r in examples]
        hyps = self.translate(params, sources, decode=decode, interventions=interventions)
        result = score(hyps, refs)
        result["decoding"] = describe_decoding(self.config.eval, decode)
        if write and self.workdir is not None and jax.process_index() == 0:
            outdir = os.path.join(self.workdir, "outputs")
            os.makedirs(outdir, exist_ok=True)
            path = os.path.join(outdir, f"{split}_step{step}.txt")
            write_hypotheses(path, hyps)
            result["hypotheses_path"] = path
        result["hypotheses"] = hyps
        result["samples"] = list(zip(sources, refs, hyps))[: int(self.config.eval.num_samples)]
        result["num_sentences"] = len(hyps)
        return result

    def bleu_round(self, params, split: str, step: int, *, limit: int, prefix: str) -> dict[str, Any]:
        """``bleu`` plus its logging (event, samples table, log lines); returns ``<prefix>/bleu``, chrF and the
        signatures."""
        log_decoding(self.config.eval, split, limit)
        r = self.bleu(params, split, step, limit=limit)
        self.logger.log_event(step, "bleu", split=split, sentences=r["num_sentences"], bleu=r["bleu"],
                              chrf=r["chrf"], bleu_signature=r["bleu_signature"],
                              chrf_signature=r["chrf_signature"], hypotheses=r.get("hypotheses_path"))
        self.logger.log_table(step, f"{prefix}/samples", ["source", "reference", "hypothesis"], r["samples"])
        if jax.process_index() == 0:  # every process holds the same hypotheses: the lead prints them
            log.info("%s BLEU %.2f chrF %.2f on %d sentences (%s; %s)", split, r["bleu"], r["chrf"],
                     r["num_sentences"], r["bleu_signature"], r["chrf_signature"])
            for src, ref, hyp in r["samples"]:
                log.info("  SRC %s\n  REF %s\n  HYP %s", src, ref, hyp)
        return {f"{prefix}/bleu": r["bleu"], f"{prefix}/chrf": r["chrf"], "bleu_signature": r["bleu_signature"],
                "chrf_signature": r["chrf_signature"]}

    # ------------------------------------------------------------------------------------ heatmaps
    def attention_stats(self, params, pairs: Sequence[tuple[str, str]]) -> tuple[dict, list, list]:
        """Teacher-forced attention statistics with weights for (source, reference) pairs.

        Returns (group -> list per layer of ``AttentionStats`` with ``weights`` [N, H, Tq, Tk] on the host,
        source token ids, target token ids).
        """
        src = self.encode_sources([s for s, _ in pairs])
        tgt = self.encode_targets([r for _, r in pairs])
        batch = {k: jnp.asarray(v) for k, v in self.task.batch_from_ids(src, tgt).items()}
        _, stats = self.task.forward(self.reference_model(params), batch, deterministic=True, return_stats=True)
        return {g: jax.device_get(stats.get(g, [])) for g in GROUPS}, src, tgt

    def heatmaps(self, params, step: int, split: str, indices: Sequence[int] = ()) -> dict[str, str]:
        """Attention maps of examples ``indices`` of ``split`` (default: the first ``eval.heatmap_examples``):
        a PNG per group (layers x heads, tokens on the axes, colour bar) and an interactive explorer page per
        example (``heatmaps/step<N>_<split><i>.html``, logged as ``wandb.Html``); returns the PNGs' W&B key ->
        path. Needs a workdir."""
        examples = list(self.data.examples(split))
        indices = list(indices) or list(range(min(int(self.config.eval.heatmap_examples), len(examples))))
        if not indices or self.workdir is None:
            return {}
        self.local_params(params)  # a collective: every host takes part, the lead draws.
        if jax.process_index() != 0:
            return {}
        bad = [i for i in indices if not 0 <= i < len(examples)]
        if bad:
            raise ValueError(f"heatmap example indices {bad} out of range for split {split!r} ({len(examples)})")
        pairs = [examples[i] for i in indices]
        stats, src, tgt = self.attention_stats(params, pairs)
        src_tok, tgt_tok = self.data.source_tokenizer, self.data.tokenizer
        outdir = os.path.join(self.workdir, "heatmaps")
        os.makedirs(outdir, exist_ok=True)
        paths, pages = {}, {}
        for ex, index in logs.progress(list(enumerate(indices)), "attention heatmaps", unit="examples"):
            src_labels = [src_tok.id_to_piece(i) for i in src[ex]]
            tgt_labels = [tgt_tok.id_to_piece(i) for i in tgt[ex]]
            dec_in = ["<s>"] + tgt_labels[:-1]
            axes_labels = {"encoder_self": (src_labels, src_labels), "decoder_self": (dec_in, dec_in),
                           "cross": (dec_in, src_labels)}
            lengths = {g: (len(q), len(k)) for g, (q, k) in axes_labels.items()}
            maps, head_stats = explorer.example_view(stats, ex, lengths)  # {group: [L, H, Tq, Tk]}, per head
            for group, group_maps in maps.items():
                q_labels, k_labels = axes_labels[group]
                path = os.path.join(outdir, f"step{step}_{split}{index}_{group}.png")
                plot_attention_grid(group_maps, q_labels, k_labels, f"{group} (step {step}, {split} example {index})",
                                    path)
                paths[f"heatmaps/{split}{index}/{group}"] = path
            page = os.path.join(outdir, f"step{step}_{split}{index}.html")
            explorer.write_explorer(page, maps, {g: axes_labels[g] for g in maps}, head_stats,
                                    f"step {step}, {split} example {index}")
            pages[f"explorer/{split}{index}"] = page
        self.logger.log_html(step, pages)
        return paths

class LossMetrics:
    """Loss, perplexity, accuracy and sequence accuracy of ``split`` (``Evaluator.loss_metrics``)."""

    artifacts = False

    def __init__(self, split: str):
        self.split = split

    def __call__(self, ev: Evaluator, params, step: int) -> dict[str, Any]:
        return ev.loss_metrics(params, self.split)


class Bleu:
    """Decode (the first ``limit`` sentences of) ``split`` and score BLEU/chrF as ``<prefix>/bleu``,
    ``<prefix>/chrf`` with their signatures. ``detail`` (eval.py): also the hypotheses file, sentence count and
    decoding, and the samples table without the log lines of a training round."""

    artifacts = False

    def __init__(self, split: str, prefix: str, limit: int = 0, detail: bool = False):
        self.split, self.prefix, self.limit, self.detail = split, prefix, int(limit), bool(detail)

    def __call__(self, ev: Evaluator, params, step: int) -> dict[str, Any]:
        if not self.detail:
            return ev.bleu_round(params, self.split, step, limit=self.limit, prefix=self.prefix)
        log_decoding(ev.config.eval, self.split, self.limit)
        r = ev.bleu(params, self.split, step, limit=self.limit)
        ev.logger.log_table(step, f"{self.split}/samples", ["source", "reference", "hypothesis"], r["samples"])
        return {f"{self.prefix}/bleu": r["bleu"], f"{self.prefix}/chrf": r["chrf"],
                "bleu_signature": r["bleu_signature"], "chrf_signature": r["chrf_signature"],
                "hypotheses_path": r.get("hypotheses_path"), "sentences": r["num_sentences"],
                "decoding": r["decoding"]}


class Heatmaps:
    """Attention heatmaps and explorer pages of ``config.eval.heatmap_examples`` fixed examples of ``split``
    (logged as images and pages; no scalars)."""

    artifacts = True

    def __init__(self, split: str):
        self.split = split

    def __call__(self, ev: Evaluator, params, step: int) -> dict[str, Any]:
        images = ev.heatmaps(params, step, self.split)
        if images:
            ev.logger.log_images(step, images)
        return {}


EVALUATORS = {"loss": LossMetrics, "bleu": Bleu, "heatmaps": Heatmaps}


def for_task(setup, data, logger, workdir: Optional[str]) -> Evaluator:
    """The evaluators' shared state for ``setup.task``: a ``TranslationEvaluator`` when the task decodes."""
    cls = TranslationEvaluator if setup.task.decodes else Evaluator
    return cls(setup, data, logger, workdir)


def make_evaluator(name: str, args: Mapping[str, Any]):
    """The evaluator ``name`` of ``EVALUATORS`` built with ``args``; ValueError naming the known ones."""
    if name not in EVALUATORS:
        raise ValueError(f"evaluator {name!r} is unknown; expected one of {tuple(EVALUATORS)}")
    return EVALUATORS[name](**args)
def _fmt(results: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v:.4g}" for k, v in results.items() if isinstance(v, float))
