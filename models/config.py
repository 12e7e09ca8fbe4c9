"""``TransformerConfig``: every architecture knob of the models, validated when the config is made."""
from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Mapping
from typing import Any, Optional

import jax.numpy as jnp

import attention as attn

NORMS = ("pre", "post", "admin")
NORM_TYPES = ("layernorm", "rmsnorm")
POSITIONS = ("sinusoidal", "learned", "rope", "none")
ACTIVATIONS = ("relu", "gelu", "gelu_exact", "silu")
ROPE_SCALING_TYPES = ("linear", "llama3")
DTYPES = ("float32", "bfloat16", "float16", "float64")
ATTENTION_GROUPS = ("encoder_self", "decoder_self", "cross", "pool")
# Planted faults for the health monitor's calibration (configs/faults.py): "" (none), "no_padding_mask" (every
# attention sees the padding keys: the segment ids of the forward pass are dropped), "causal_leak" (decoder
# self-attention also sees the next token). Only the teacher-forced forward pass (training and scoring) has them;
# incremental decoding keeps the correct masks.
FAULTS = ("", "no_padding_mask", "causal_leak")


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def check_head_groups(owner: str, num_heads: int, num_kv_heads: int) -> None:
    """ValueError unless the query heads split into whole groups per key/value head (GQA/MQA)."""
    if num_heads % num_kv_heads != 0:
        raise ValueError(f"{owner}.num_heads={num_heads} must be a multiple of num_kv_heads={num_kv_heads} (each "
                         f"key/value head serves a group of query heads)")


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _check_impl(implementation: Any) -> None:
    if not isinstance(implementation, str) or not implementation:
        raise ValueError(f"TransformerConfig.attention_impl must be a backend name or 'auto'; got {implementation!r}")


def _options_tuple(options: Any) -> tuple:
    """``attention_options`` (a dict or pairs) as sorted, hashable ``(name, value)`` pairs."""
    given = options
    if isinstance(options, Mapping):
        options = tuple(sorted(options.items()))
    if not isinstance(options, (tuple, list)) or not all(
        isinstance(item, (tuple, list)) and len(item) == 2 and isinstance(item[0], str) for item in options
    ):
        raise ValueError(
            f"TransformerConfig.attention_options must be a dict of backend keyword arguments; got {given!r}"
        )
    return tuple((k, tuple(v) if isinstance(v, list) else v) for k, v in options)


_ROPE_SCALING_KEYS = {"linear": ("factor",),
                      "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")}


def _check_rope_scaling(value: Any) -> tuple:
    """``rope_scaling`` as sorted (key, value) items; ValueError naming the bad type or missing key."""
    if isinstance(value, Mapping):
        value = tuple(sorted(value.items()))
    if not isinstance(value, (tuple, list)) or not all(isinstance(i, (tuple, list)) and len(i) == 2 for i in value):
        raise ValueError(f"TransformerConfig.rope_scaling must be a dict (rope_type, factor, ...) or empty; got {value!r}")
    d = dict(value)
    if not d:
        return ()
    kind = d.get("rope_type")
    if kind not in ROPE_SCALING_TYPES:
        raise ValueError(f"TransformerConfig.rope_scaling: rope_type={kind!r} is not implemented; expected one of "
                         f"{ROPE_SCALING_TYPES}")
    missing = [k for k in _ROPE_SCALING_KEYS[kind] if not _is_number(d.get(k))]
    if missing:
        raise ValueError(f"TransformerConfig.rope_scaling: rope_type={kind!r} needs numbers {missing}; got {d}")
    return tuple(sorted((k, v) for k, v in d.items() if k == "rope_type" or k in _ROPE_SCALING_KEYS[kind]))


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
    """Architecture of ``EncoderDecoder`` / ``DecoderOnly``. Invalid values raise ``ValueError`` on creation.

    Widths: ``num_heads`` query heads of ``qk_dim`` (d_k) each; ``num_kv_heads`` key/value heads (MQA/GQA;
    None = ``num_heads``); ``v_dim`` (d_v) per head. ``qk_dim`` / ``v_dim`` default to ``d_model // num_heads``
    and are otherwise independent of ``d_model``. After creation ``num_kv_heads``, ``qk_dim`` and ``v_dim`` hold
    the resolved ints.

    ``norm``: "pre" (LayerNorm before each sublayer, plus a final one), "post" (Vaswani et al.) or "admin" (post-LN
    with a learned per-channel residual scale ``omega``, ``LN(omega * x + f(x))``, set from one forward pass by
    ``models.admin_initialize``: Liu et al. 2020, "Understanding the Difficulty of Training Transformers").
    ``norm_type``: "layernorm" or "rmsnorm". ``position``: "sinusoidal", "learned" (a table of ``max_len``
    rows per side), "rope" (rotary, on self-attention queries/keys; ``rope_base``) or "none".
    ``share_embeddings``: one token table for source and target. ``tie_output``: the pre-softmax projection is
    the (target) token table, transposed. ``scale_embeddings``: multiply token embeddings by sqrt(d_model).
    ``attention_impl``: an ``attention`` backend name or "auto"; ``attention_options``: extra keyword
    arguments for that backend (e.g. block sizes). ``attention_scale``: logit scale (None = 1/sqrt(qk_dim),
    1.0 = unscaled). ``qk_layernorm``: LayerNorm (scale only) on each head's queries and keys.
    ``dropout_rate``: residual/embedding dropout; ``attention_dropout_rate``: dropout on attention weights.
    ``attention_kind``: a registered attention kind (``attention.available_kinds()``): "softmax" (scaled dot
    product through ``attention.attention`` and its backends), "additive" (Bahdanau scores, per-head
    parameters), "linear" (kernelized, O(T); no statistics, no custom positions, so no KV-cache decoding),
    "hard" (straight-through Gumbel: one sampled key per query; samples from the dropout stream in training and
    with a fixed key when deterministic), ...; each kind lists what it cannot do (``attention.kind_refusal``).
    Kinds other than "softmax" ignore ``attention_impl``. ``attention_only``: no feed-forward sublayers (attention-only models,
    Elhage et al. 2021). ``uniform_attention_groups``: attention groups ("encoder_self", "decoder_self",
    "cross", "pool") whose weights are frozen to uniform over the visible keys, in training and evaluation
    (Wiegreffe & Pinter's uniform baseline; the groups' query/key projections then go unused).
    ``fault``: a planted mask fault for calibrating the health monitor (``FAULTS``; "" = none).
    ``dtype``: computation dtype; ``param_dtype``: parameter dtype.

    Fields for pretrained checkpoints (``pretrained/``): ``activation`` "gelu" is the tanh approximation,
    "gelu_exact" the erf form. ``gated_mlp``: the feed-forward block is ``wo(act(wi x) * wg x)`` (SwiGLU with
    "silu"). ``qkv_bias``: biases on the query/key/value projections (None = ``use_bias``; ``use_bias`` then
    covers the output projection, the MLP and the output layer). ``rope_scaling``: a dict with ``rope_type``
    "linear" (``factor``) or "llama3" (``factor``, ``low_freq_factor``, ``high_freq_factor``,
    ``original_max_position_embeddings``) rescaling RoPE's frequencies; empty = none. ``token_types``: rows of
    a token-type (segment) embedding table added to the encoder input (0 = none). ``embed_norm``: a norm after
    the embeddings and positions of each stack. ``final_logits_bias``: a bias [vocab_size] added to the logits.
    """

    vocab_size: int
    d_model: int = 512
    num_heads: int = 8
    num_kv_heads: Optional[int] = None
    qk_dim: Optional[int] = None
    v_dim: Optional[int] = None
    d_ff: int = 2048
    num_encoder_layers: int = 6
    num_decoder_layers: int = 6
    dropout_rate: float = 0.1
    attention_dropout_rate: float = 0.0
    norm: str = "pre"
    norm_type: str = "layernorm"
    norm_epsilon: float = 1e-6
    position: str = "sinusoidal"
    rope_base: float = 10000.0
    rope_scaling: tuple = ()
    max_len: int = 256
    activation: str = "relu"
    use_bias: bool = True
    share_embeddings: bool = True
    tie_output: bool = True
    scale_embeddings: bool = True
    attention_impl: str = "auto"
    attention_options: tuple = ()
    attention_scale: Optional[float] = None
    qk_layernorm: bool = False
    attention_kind: str = "softmax"
    attention_only: bool = False
    uniform_attention_groups: tuple = ()
    gated_mlp: bool = False
    qkv_bias: Optional[bool] = None
    token_types: int = 0
    embed_norm: bool = False
    final_logits_bias: bool = False
    fault: str = ""
    pad_id: int = 0
    bos_id: int = 2
    eos_id: int = 1
    dtype: str = "float32"
    param_dtype: str = "float32"
    # Names of the fields above that were None and got their derived value (see ``replace``).
    _derived: frozenset = dataclasses.field(default=frozenset(), init=False, repr=False, compare=False)

    def __post_init__(self):
        set_ = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731
        set_("_derived", frozenset(n for n in ("num_kv_heads", "qk_dim", "v_dim") if getattr(self, n) is None))
        for name in ("vocab_size", "d_model", "num_heads", "d_ff", "max_len"):
            value = getattr(self, name)
            if not _is_int(value) or value <= 0:
                raise ValueError(f"TransformerConfig.{name} must be a positive int; got {value!r}")
        for name in ("num_encoder_layers", "num_decoder_layers"):
            value = getattr(self, name)
            if not _is_int(value) or value < 0:
                raise ValueError(f"TransformerConfig.{name} must be an int >= 0; got {value!r}")
        if self.num_kv_heads is None:
            set_("num_kv_heads", self.num_heads)
        if not _is_int(self.num_kv_heads) or self.num_kv_heads <= 0:
            raise ValueError(f"TransformerConfig.num_kv_heads must be a positive int or None; got {self.num_kv_heads!r}")
        check_head_groups("TransformerConfig", self.num_heads, self.num_kv_heads)
        for name in ("qk_dim", "v_dim"):
            value = getattr(self, name)
            if value is None:
                if self.d_model % self.num_heads != 0:
                    raise ValueError(
                        f"TransformerConfig.{name}=None means d_model // num_heads, but d_model={self.d_model} is "
                        f"not divisible by num_heads={self.num_heads}; set {name} explicitly"
                    )
                set_(name, self.d_model // self.num_heads)
            elif not _is_int(value) or value <= 0:
                raise ValueError(f"TransformerConfig.{name} must be a positive int or None; got {value!r}")
        for name, choices in (("norm", NORMS), ("norm_type", NORM_TYPES), ("position", POSITIONS),
                              ("activation", ACTIVATIONS), ("dtype", DTYPES), ("param_dtype", DTYPES),
                              ("attention_kind", attn.available_kinds())):
            value = getattr(self, name)
            if not isinstance(value, str):
                try:
                    value = jnp.dtype(value).name
                except TypeError:
                    pass
                set_(name, value)
            if value not in choices:
                raise ValueError(f"TransformerConfig.{name} must be one of {choices}; got {value!r}")
        if self.position == "rope" and self.qk_dim % 2 != 0:
            raise ValueError(f"TransformerConfig.position='rope' needs an even qk_dim (it rotates pairs); got qk_dim={self.qk_dim}")
        for name in ("dropout_rate", "attention_dropout_rate"):
            value = getattr(self, name)
            if not _is_number(value) or not 0.0 <= value < 1.0:
                raise ValueError(f"TransformerConfig.{name} must be a float in [0, 1); got {value!r}")
        for name in ("norm_epsilon", "rope_base"):
            value = getattr(self, name)
            if not _is_number(value) or not value > 0:
                raise ValueError(f"TransformerConfig.{name} must be a positive float; got {value!r}")
        if self.attention_scale is not None and (
            not _is_number(self.attention_scale) or not math.isfinite(self.attention_scale) or self.attention_scale <= 0
        ):
            raise ValueError(f"TransformerConfig.attention_scale must be None or a positive float; got {self.attention_scale!r}")
        _check_impl(self.attention_impl)
        set_("attention_options", _options_tuple(self.attention_options))
        groups = self.uniform_attention_groups
        if isinstance(groups, str) or not isinstance(groups, (tuple, list)) or any(
                g not in ATTENTION_GROUPS for g in groups):
            raise ValueError(f"TransformerConfig.uniform_attention_groups must be a list of groups from "
                             f"{ATTENTION_GROUPS}; got {groups!r}")
        set_("uniform_attention_groups", tuple(groups))
        set_("rope_scaling", _check_rope_scaling(self.rope_scaling))
        if self.qkv_bias is not None and not isinstance(self.qkv_bias, bool):
            raise ValueError(f"TransformerConfig.qkv_bias must be None or a bool; got {self.qkv_bias!r}")
        if not _is_int(self.token_types) or self.token_types < 0:
            raise ValueError(f"TransformerConfig.token_types must be an int >= 0; got {self.token_types!r}")
        if self.fault not in FAULTS:
            raise ValueError(f"TransformerConfig.fault must be one of {FAULTS}; got {self.fault!r}")
        for name in ("use_bias", "share_embeddings", "tie_output", "scale_embeddings", "qk_layernorm",
                     "attention_only", "gated_mlp", "embed_norm", "final_logits_bias"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"TransformerConfig.{name} must be a bool; got {getattr(self, name)!r}")
        self._check_token_ids()

    def _check_token_ids(self) -> None:
        for name in ("pad_id", "bos_id", "eos_id"):
            value = getattr(self, name)
            if not _is_int(value) or not 0 <= value < self.vocab_size:
                raise ValueError(f"TransformerConfig.{name} must be a token id in [0, vocab_size={self.vocab_size}); got {value!r}")

    def bind(self, *, vocab_size: Optional[int] = None, attention_impl: Optional[str] = None,
             attention_options: Optional[Mapping[str, Any]] = None) -> "TransformerConfig":
        """A copy of this (validated) config with a run's settings that come after validation: the data's
        ``vocab_size``, another ``attention_impl`` (a reference model for heatmaps), ``attention_options``
        (the ring's mesh). Only the given values are checked; the other fields were validated when this
        config was made and are not checked again, so a run builds and validates its config once."""
        new = copy.copy(self)
        set_ = lambda name, value: object.__setattr__(new, name, value)  # noqa: E731
        if attention_impl is not None:
            _check_impl(attention_impl)
            set_("attention_impl", attention_impl)
        if attention_options is not None:
            set_("attention_options", _options_tuple(attention_options))
        if vocab_size is not None:
            if not _is_int(vocab_size) or vocab_size <= 0:
                raise ValueError(f"TransformerConfig.vocab_size must be a positive int; got {vocab_size!r}")
            set_("vocab_size", vocab_size)
            new._check_token_ids()
        return new

    # ---------------------------------------------------------------------------------------------- builders
    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "TransformerConfig":
        """From a dict or ``ml_collections.ConfigDict``; unknown keys raise ``ValueError`` listing the valid ones."""
        if hasattr(d, "to_dict"):
            d = d.to_dict()
        if not isinstance(d, Mapping):
            raise ValueError(f"TransformerConfig.from_dict expects a mapping; got {type(d).__name__}")
        fields = [f.name for f in dataclasses.fields(cls) if f.init]
        unknown = sorted(set(d) - set(fields))
        if unknown:
            raise ValueError(f"TransformerConfig.from_dict: unknown keys {unknown}; valid keys are {fields}")
        return cls(**dict(d))

    def to_dict(self) -> dict[str, Any]:
        """Plain dict that ``from_dict`` turns back into an equal config (derived widths stay None)."""
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.init}
        d.update({name: None for name in self._derived})
        d["attention_options"] = dict(self.attention_options)
        d["rope_scaling"] = dict(self.rope_scaling)
        return d

    def replace(self, **changes) -> "TransformerConfig":
        """A copy with ``changes``. Widths that were derived (None on creation) are derived again, so
        ``cfg.replace(num_heads=4)`` gives ``qk_dim = d_model // 4``; ``dataclasses.replace`` would keep them."""
        d = self.to_dict()
        d.update(changes)
        return type(self)(**d)

    @classmethod
    def base(cls, vocab_size: int = 37000, **overrides) -> "TransformerConfig":
        """Vaswani et al. (2017) Transformer base: 512/2048, 8 heads, 6+6 layers, dropout 0.1, post-LN.

        Train it with label smoothing 0.1 (an argument of ``cross_entropy``).
        """
        fields = dict(
            vocab_size=vocab_size, d_model=512, num_heads=8, d_ff=2048, num_encoder_layers=6,
            num_decoder_layers=6, dropout_rate=0.1, attention_dropout_rate=0.0, norm="post",
            position="sinusoidal", share_embeddings=True, tie_output=True, scale_embeddings=True,
        )
        fields.update(overrides)
        return cls(**fields)

    @classmethod
    def big(cls, vocab_size: int = 37000, **overrides) -> "TransformerConfig":
        """Vaswani et al. (2017) Transformer big: 1024/4096, 16 heads, 6+6 layers, dropout 0.3, post-LN."""
        fields = dict(d_model=1024, num_heads=16, d_ff=4096, dropout_rate=0.3)
        fields.update(overrides)
        return cls.base(vocab_size, **fields)

    # ------------------------------------------------------------------------------------------------ derived
    @property
    def attention_qkv_bias(self) -> bool:
        """Whether the query/key/value projections have biases."""
        return self.use_bias if self.qkv_bias is None else self.qkv_bias

    @property
    def jnp_dtype(self):
        return jnp.dtype(self.dtype)

    @property
    def jnp_param_dtype(self):
        return jnp.dtype(self.param_dtype)
