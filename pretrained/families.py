"""Per-family mapping from a checkpoint's ``config.json`` to a ``models.TransformerConfig``.

``model_config(hf, ...)`` returns ``(family, TransformerConfig)`` for GPT-2, Llama / Qwen2 / Mistral-style
decoders, Marian and BERT; a config field whose value attnlab does not implement raises
``UnsupportedCheckpoint`` naming the field (checked before any weight is read).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import models

FAMILIES = ("gpt2", "llama", "marian", "bert")
# config.json "model_type" -> family
MODEL_TYPES = {"gpt2": "gpt2", "llama": "llama", "qwen2": "llama", "mistral": "llama", "marian": "marian",
               "bert": "bert"}
_ACTIVATIONS = {"gelu_new": "gelu", "gelu_pytorch_tanh": "gelu", "gelu": "gelu_exact", "silu": "silu",
                "swish": "silu", "relu": "relu"}


class UnsupportedCheckpoint(ValueError):
    """A checkpoint uses a feature attnlab does not implement; the message names the config field."""


def _unsupported(field: str, value: Any, why: str) -> UnsupportedCheckpoint:
    return UnsupportedCheckpoint(f"unsupported checkpoint config: {field}={value!r} ({why})")


def family_of(hf: Mapping[str, Any]) -> str:
    """The attnlab family of a ``config.json`` dict, from its ``model_type``."""
    model_type = hf.get("model_type")
    if model_type not in MODEL_TYPES:
        raise _unsupported("model_type", model_type, f"attnlab loads {sorted(MODEL_TYPES)}")
    return MODEL_TYPES[model_type]


def _activation(field: str, value: Any) -> str:
    if value not in _ACTIVATIONS:
        raise _unsupported(field, value, f"implemented: {sorted(_ACTIVATIONS)}")
    return _ACTIVATIONS[value]


def _require(hf: Mapping[str, Any], field: str, allowed: tuple, why: str) -> None:
    if hf.get(field, allowed[0]) not in allowed:
        raise _unsupported(field, hf.get(field), why)


def _first_id(value: Any, default: int) -> int:
    """A token id from a config field that may be None, an int or a list of ints (the first is used)."""
    if isinstance(value, (list, tuple)):
        value = value[0] if value else None
    return default if value is None else int(value)


def _rope(hf: Mapping[str, Any]) -> tuple[float, dict]:
    """(theta, rope_scaling dict) from ``rope_parameters`` (transformers >= 5) or ``rope_theta`` /
    ``rope_scaling`` (older files)."""
    params = dict(hf.get("rope_parameters") or {})
    theta = float(params.pop("rope_theta", hf.get("rope_theta", 10000.0)))
    scaling = dict(hf.get("rope_scaling") or {})
    scaling.update(params)
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind == "default":
        return theta, {}
    if kind not in models.config.ROPE_SCALING_TYPES:
        raise _unsupported("rope_scaling.rope_type", kind, f"implemented: default, "
                           f"{', '.join(models.config.ROPE_SCALING_TYPES)}")
    scaling["rope_type"] = kind
    return theta, {k: v for k, v in scaling.items() if k != "type"}


def _gpt2(hf, common):
    for field in ("scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn", "add_cross_attention"):
        _require(hf, field, (False,), "only the standard GPT-2 attention is implemented")
    _require(hf, "scale_attn_weights", (True,), "unscaled attention logits are not mapped")
    d = hf["n_embd"]
    eos = _first_id(hf.get("eos_token_id"), 0)
    return models.TransformerConfig(
        vocab_size=hf["vocab_size"], d_model=d, num_heads=hf["n_head"], d_ff=hf.get("n_inner") or 4 * d,
        num_encoder_layers=0, num_decoder_layers=hf["n_layer"], norm="pre", norm_type="layernorm",
        norm_epsilon=hf.get("layer_norm_epsilon", 1e-5), position="learned", max_len=hf["n_positions"],
        activation=_activation("activation_function", hf.get("activation_function", "gelu_new")),
        use_bias=True, tie_output=True, scale_embeddings=False, pad_id=_first_id(hf.get("pad_token_id"), eos),
        bos_id=_first_id(hf.get("bos_token_id"), eos), eos_id=eos, **common)


def _llama(hf, common):
    if hf.get("use_sliding_window") or (hf.get("model_type") == "mistral" and hf.get("sliding_window")):
        raise _unsupported("sliding_window", hf.get("sliding_window"), "sliding-window attention layers are not "
                           "implemented")
    layer_types = set(hf.get("layer_types") or ["full_attention"])
    if layer_types != {"full_attention"}:
        raise _unsupported("layer_types", sorted(layer_types), "only full_attention layers are implemented")
    _require(hf, "pretraining_tp", (1, None), "tensor-parallel slicing of the checkpoint is not implemented")
    _require(hf, "partial_rotary_factor", (1.0, 1, None), "RoPE on part of the head is not implemented")
    _require(hf, "mlp_bias", (False,), "MLP biases are not mapped")
    heads = hf["num_attention_heads"]
    head_dim = hf.get("head_dim") or hf["hidden_size"] // heads
    theta, scaling = _rope(hf)
    eos = _first_id(hf.get("eos_token_id"), 0)
    if hf.get("model_type") != "qwen2":
        _require(hf, "attention_bias", (False,), "a bias on o_proj is not mapped (Qwen2's q/k/v biases are)")
    return models.TransformerConfig(
        vocab_size=hf["vocab_size"], d_model=hf["hidden_size"], num_heads=heads,
        num_kv_heads=hf.get("num_key_value_heads") or heads, qk_dim=head_dim, v_dim=head_dim,
        d_ff=hf["intermediate_size"], num_encoder_layers=0, num_decoder_layers=hf["num_hidden_layers"], norm="pre",
        norm_type="rmsnorm", norm_epsilon=hf.get("rms_norm_eps", 1e-6), position="rope", rope_base=theta,
        rope_scaling=scaling, max_len=hf.get("max_position_embeddings", 4096),
        activation=_activation("hidden_act", hf.get("hidden_act", "silu")), gated_mlp=True,
        use_bias=False, qkv_bias=hf.get("model_type") == "qwen2",
        tie_output=bool(hf.get("tie_word_embeddings", False)), scale_embeddings=False,
        pad_id=_first_id(hf.get("pad_token_id"), eos), bos_id=_first_id(hf.get("bos_token_id"), eos), eos_id=eos,
        **common)


def _marian(hf, common):
    for a, b in (("encoder_attention_heads", "decoder_attention_heads"), ("encoder_ffn_dim", "decoder_ffn_dim")):
        if hf.get(a) != hf.get(b):
            raise _unsupported(b, hf.get(b), f"differs from {a}={hf.get(a)}; attnlab's stacks share one width")
    if hf.get("decoder_vocab_size") not in (None, hf["vocab_size"]) or not hf.get(
            "share_encoder_decoder_embeddings", True):
        raise _unsupported("share_encoder_decoder_embeddings", hf.get("share_encoder_decoder_embeddings"),
                           "separate source and target vocabularies are not implemented")
    for field in ("normalize_before", "add_layernorm_embedding", "normalize_embedding"):
        _require(hf, field, (False, None), "Marian is loaded as post-LN without an embedding norm")
    _require(hf, "static_position_embeddings", (True, None), "learned Marian positions are not mapped")
    pad = int(hf["pad_token_id"])
    return models.TransformerConfig(
        vocab_size=hf["vocab_size"], d_model=hf["d_model"], num_heads=hf["encoder_attention_heads"],
        d_ff=hf["encoder_ffn_dim"], num_encoder_layers=hf["encoder_layers"], num_decoder_layers=hf["decoder_layers"],
        norm="post", norm_type="layernorm", norm_epsilon=1e-5, position="sinusoidal",
        max_len=hf.get("max_position_embeddings", 512),
        activation=_activation("activation_function", hf.get("activation_function", "gelu")), use_bias=True,
        share_embeddings=True, tie_output=bool(hf.get("tie_word_embeddings", True)),
        scale_embeddings=bool(hf.get("scale_embedding", False)), final_logits_bias=True, pad_id=pad,
        bos_id=_first_id(hf.get("decoder_start_token_id"), pad), eos_id=_first_id(hf.get("eos_token_id"), 0),
        **common)


def _bert(hf, common):
    _require(hf, "position_embedding_type", ("absolute",), "only absolute learned positions are implemented")
    _require(hf, "is_decoder", (False,), "BERT as a decoder is not implemented")
    _require(hf, "add_cross_attention", (False,), "BERT with cross-attention is not implemented")
    pad = _first_id(hf.get("pad_token_id"), 0)
    return models.TransformerConfig(
        vocab_size=hf["vocab_size"], d_model=hf["hidden_size"], num_heads=hf["num_attention_heads"],
        d_ff=hf["intermediate_size"], num_encoder_layers=hf["num_hidden_layers"], num_decoder_layers=0,
        norm="post", norm_type="layernorm", norm_epsilon=hf.get("layer_norm_eps", 1e-12), position="learned",
        max_len=hf.get("max_position_embeddings", 512), activation=_activation("hidden_act", hf.get("hidden_act", "gelu")),
        use_bias=True, tie_output=bool(hf.get("tie_word_embeddings", True)), scale_embeddings=False,
        token_types=hf.get("type_vocab_size", 2), embed_norm=True, pad_id=pad, bos_id=pad, eos_id=pad, **common)


_BUILDERS = {"gpt2": _gpt2, "llama": _llama, "marian": _marian, "bert": _bert}


def model_config(hf: Mapping[str, Any], *, attention_impl: str = "auto", dtype: str = "float32"
                 ) -> tuple[str, models.TransformerConfig]:
    """(family, TransformerConfig) of a ``config.json`` dict; dropout is off (analysis, not training)."""
    if hf.get("alibi") or hf.get("position_embedding_type") == "alibi":
        raise _unsupported("alibi", True, "ALiBi position biases are not implemented")
    family = family_of(hf)
    common = dict(dropout_rate=0.0, attention_dropout_rate=0.0, attention_impl=attention_impl, dtype=dtype,
                  param_dtype=dtype)
    return family, _BUILDERS[family](hf, common)
