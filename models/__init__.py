"""attnlab's models: Flax NNX Transformers built on ``attention/``.

``TransformerConfig`` holds every knob; ``EncoderDecoder``, ``DecoderOnly``, ``EncoderOnly`` and ``EncoderClassifier``
are the models;
``cross_entropy`` is the loss; ``greedy_decode`` / ``beam_search`` decode with a KV cache;
``count_params`` / ``param_count_formula`` count parameters; ``admin_initialize`` sets the residual scales of
``norm="admin"`` models from one forward pass; ``Interventions`` / ``WeightOverride`` mask heads and
replace attention weights at call time (``model(..., interventions=...)``).
"""
from models.attention import MultiHeadAttention
from models.classifier import EncoderClassifier
from models.config import TransformerConfig
from models.interventions import Interventions, WeightOverride, head_shapes, unit_head_mask
from models.decoding import beam_search, greedy_decode, length_penalty_factor, lm_beam_search, lm_greedy_decode
from models.layers import MLP, apply_rope, positions_from_segmentation, sinusoidal_encoding
from models.losses import cross_entropy
from models.params import count_params, param_count_breakdown, param_count_formula
from models.transformer import (DecodeCache, Decoder, DecoderOnly, Encoder, EncoderDecoder, EncoderOnly, admin_initialize,
                                shift_right)

__all__ = [
    "DecodeCache", "Decoder", "DecoderOnly", "Encoder", "EncoderClassifier", "EncoderDecoder", "EncoderOnly", "Interventions", "MLP",
    "MultiHeadAttention", "WeightOverride",
    "TransformerConfig", "admin_initialize", "apply_rope", "beam_search", "count_params", "cross_entropy",
    "greedy_decode", "lm_beam_search", "lm_greedy_decode",
    "length_penalty_factor", "param_count_breakdown", "param_count_formula", "positions_from_segmentation",
    "head_shapes", "shift_right", "sinusoidal_encoding", "unit_head_mask",
]
