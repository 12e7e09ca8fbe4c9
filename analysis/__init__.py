"""Analysis primitives over attention weights, trained models and training curves.

- ``analysis.heads``: previous-token and prefix-matching (induction) scores, the ``HeadScores`` hook, the ICL
  score and induction ablations.
- ``analysis.importance``: head masks, gradient importance, per-head attention behaviour and cross-attention
  overrides on a trained translation model (``Probe``, ``measure``), Spearman within and across layers.
- ``analysis.explanation``: Jain & Wallace's permutation, leave-one-out, gradient and adversarial tests of
  attention pooling.
- ``analysis.logits``: attention at initialization for different logit scales.
- ``analysis.curves``: phase changes, transitions, divergence and learning-rate sensitivity on curves.
- ``analysis.keep``: ``KeepModel``, a hook that keeps the trained model after ``engine.run``.
"""
from analysis.curves import (degradation_lr, divergence_step, first_step_at_most, half_final_step, lr_sensitivity,
                             phase_change_step, transition)
from analysis.explanation import explanation_measures, jsd, tvd
from analysis.heads import (HeadScores, ablation_heads, head_label, head_mask, icl_score, prefix_matching_score,
                            previous_token_score, top_heads)
from analysis.importance import (GROUPS, POSITIONAL, SELF_GROUPS, Probe, crop, cross_overrides, head_list, measure,
                                 normalise_per_layer, positional_fraction, spearman, within_layer_spearman)
from analysis.keep import KeepModel
from analysis.logits import SCALES, init_statistics, scale_name, scale_value

__all__ = [
    "GROUPS", "POSITIONAL", "SCALES", "SELF_GROUPS", "HeadScores", "KeepModel", "Probe", "ablation_heads", "crop",
    "cross_overrides", "degradation_lr", "divergence_step", "explanation_measures", "first_step_at_most",
    "half_final_step", "head_label", "head_list", "head_mask", "icl_score", "init_statistics", "jsd",
    "lr_sensitivity", "measure", "normalise_per_layer", "phase_change_step", "positional_fraction",
    "prefix_matching_score", "previous_token_score", "scale_name", "scale_value", "spearman", "top_heads",
    "transition", "tvd", "within_layer_spearman",
]
