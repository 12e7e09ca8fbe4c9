"""Parameter counts: measured on a model, and from closed-form formulas of a ``TransformerConfig``."""
from __future__ import annotations

import jax
import numpy as np
from flax import nnx

import attention as attn

from models.config import TransformerConfig

MODEL_KINDS = ("encoder_decoder", "decoder_only")


def count_params(model: nnx.Module) -> int:
    """Number of trainable scalars (``nnx.Param`` leaves; shared arrays counted once). Works on abstract
    models from ``nnx.eval_shape`` too."""
    return int(sum(np.prod(x.shape, dtype=np.int64) for x in jax.tree.leaves(nnx.state(model, nnx.Param))))


def attention_params(cfg: TransformerConfig) -> int:
    """One attention sublayer: W_Q [d, H*dk], W_K [d, Hkv*dk], W_V [d, Hkv*dv], W_O [H*dv, d], biases,
    the QK-LayerNorm scales and the attention kind's own per-head parameters (``kind_params``)."""
    d, h, hkv, dk, dv = cfg.d_model, cfg.num_heads, cfg.num_kv_heads, cfg.qk_dim, cfg.v_dim
    weights = d * h * dk + d * hkv * dk + d * hkv * dv + h * dv * d
    biases = (h * dk + hkv * dk + hkv * dv + d) if cfg.use_bias else 0
    qk_norm = 2 * dk if cfg.qk_layernorm else 0
    return weights + biases + qk_norm + kind_params(cfg)


def kind_params(cfg: TransformerConfig) -> int:
    """The attention kind's parameters in one attention sublayer, from the shapes its ``init`` makes (additive:
    w_q, w_k [H, dk, dk], v_a and b [H, dk]); 0 for kinds without parameters."""
    init = attn.get_kind(cfg.attention_kind).init
    if init is None:
        return 0
    shapes = jax.eval_shape(lambda key: init(key, cfg.num_heads, cfg.qk_dim, cfg.jnp_param_dtype, cfg.use_bias),
                            jax.random.key(0))
    return int(sum(np.prod(x.shape, dtype=np.int64) for x in jax.tree.leaves(shapes)))


def mlp_params(cfg: TransformerConfig) -> int:
    """Feed-forward block: W_1 [d, d_ff], W_2 [d_ff, d], their biases and the block's norm and Admin scale (0
    in an attention-only model)."""
    if cfg.attention_only:
        return 0
    return 2 * cfg.d_model * cfg.d_ff + ((cfg.d_ff + cfg.d_model) if cfg.use_bias else 0) + sublayer_params(cfg)


def norm_params(cfg: TransformerConfig) -> int:
    """One LayerNorm (scale and bias: 2d) or RMSNorm (scale: d)."""
    return cfg.d_model * (2 if cfg.norm_type == "layernorm" else 1)


def sublayer_params(cfg: TransformerConfig) -> int:
    """One residual sublayer's own parameters: its norm, plus the Admin residual scale (d) when norm="admin"."""
    return norm_params(cfg) + (cfg.d_model if cfg.norm == "admin" else 0)


def param_count_breakdown(cfg: TransformerConfig, model: str = "encoder_decoder") -> dict[str, int]:
    """Parameters per part, from formulas. model: "encoder_decoder" or "decoder_only"."""
    if model not in MODEL_KINDS:
        raise ValueError(f"param_count_breakdown: model must be one of {MODEL_KINDS}; got {model!r}")
    table = cfg.vocab_size * cfg.d_model
    positions = cfg.max_len * cfg.d_model if cfg.position == "learned" else 0
    final_norm = norm_params(cfg) if cfg.norm == "pre" else 0
    enc_layer = attention_params(cfg) + mlp_params(cfg) + sublayer_params(cfg)
    if model == "encoder_decoder":
        dec_layer = 2 * attention_params(cfg) + mlp_params(cfg) + 2 * sublayer_params(cfg)
        parts = {
            "embeddings": table * (1 if cfg.share_embeddings else 2),
            "positions": 2 * positions,
            "encoder": cfg.num_encoder_layers * enc_layer + final_norm,
            "decoder": cfg.num_decoder_layers * dec_layer + final_norm,
        }
    else:
        dec_layer = attention_params(cfg) + mlp_params(cfg) + sublayer_params(cfg)
        parts = {"embeddings": table, "positions": positions, "decoder": cfg.num_decoder_layers * dec_layer + final_norm}
    parts["output"] = 0 if cfg.tie_output else cfg.d_model * cfg.vocab_size
    return parts


def param_count_formula(cfg: TransformerConfig, model: str = "encoder_decoder") -> int:
    """Total parameters from formulas; equals ``count_params`` of the built model."""
    return sum(param_count_breakdown(cfg, model).values())
