"""Weight conversion: a checkpoint's tensors (PyTorch layout, ``safetensors``) to attnlab's NNX parameters.

``weight_map(family, cfg, names)`` gives, for every attnlab parameter path (``decoder/layers/0/self_attention/
query/kernel``), the checkpoint tensor it comes from and how its layout changes (a transposed ``nn.Linear``
weight reshaped into heads, a slice of GPT-2's fused ``c_attn``, ...). ``build_model`` fills an abstract
model from it, one tensor at a time, each placed with its sharding when a mesh is given.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

import models

# One parameter's source: (checkpoint tensor name, transform of that tensor into attnlab's layout).
Source = tuple[str, Callable[[np.ndarray], np.ndarray]]


class CheckpointMismatch(ValueError):
    """The checkpoint's tensors do not match its config (a missing tensor, a wrong shape)."""


def _same(x: np.ndarray) -> np.ndarray:
    return x


def _t(x: np.ndarray) -> np.ndarray:
    return x.T


def _heads_in(heads: int, dim: int, transpose: bool = True) -> Callable[[np.ndarray], np.ndarray]:
    """[H*D, d_model] torch Linear weight (or [d_model, H*D] with transpose=False) -> kernel [d_model, H, D]."""
    return lambda x: (x.T if transpose else x).reshape(-1, heads, dim)


def _heads_bias(heads: int, dim: int) -> Callable[[np.ndarray], np.ndarray]:
    return lambda x: x.reshape(heads, dim)


def _heads_out(heads: int, dim: int, transpose: bool = True) -> Callable[[np.ndarray], np.ndarray]:
    """[d_model, H*Dv] torch Linear weight (or [H*Dv, d_model]) -> kernel [H, Dv, d_model]."""
    return lambda x: (x.T if transpose else x).reshape(heads, dim, -1)


def _slice(i: int, n: int, then: Callable[[np.ndarray], np.ndarray]) -> Callable[[np.ndarray], np.ndarray]:
    """Part i of n equal parts of the last axis (GPT-2's fused c_attn), then ``then``."""
    return lambda x: then(np.split(x, n, axis=-1)[i])


def _vector(x: np.ndarray) -> np.ndarray:
    return x.reshape(-1)


def _attention(out: dict, prefix: str, cfg: models.TransformerConfig, names: Mapping[str, str], *, bias: bool,
               out_bias: bool) -> None:
    """q/k/v/out parameters of one attention module from separate torch Linear weights."""
    H, Hkv, Dk, Dv = cfg.num_heads, cfg.num_kv_heads, cfg.qk_dim, cfg.v_dim
    for ours, heads, dim in (("query", H, Dk), ("key", Hkv, Dk), ("value", Hkv, Dv)):
        out[f"{prefix}/{ours}/kernel"] = (names[ours] + ".weight", _heads_in(heads, dim))
        if bias:
            out[f"{prefix}/{ours}/bias"] = (names[ours] + ".bias", _heads_bias(heads, dim))
    out[f"{prefix}/out/kernel"] = (names["out"] + ".weight", _heads_out(H, Dv))
    if out_bias:
        out[f"{prefix}/out/bias"] = (names["out"] + ".bias", _same)


def _norm(out: dict, prefix: str, name: str, *, bias: bool = True) -> None:
    out[f"{prefix}/scale"] = (name + ".weight", _same)
    if bias:
        out[f"{prefix}/bias"] = (name + ".bias", _same)


def _linear(out: dict, prefix: str, name: str, *, bias: bool = True, conv1d: bool = False) -> None:
    """A torch Linear ([out, in]) or GPT-2 Conv1D ([in, out]) into an nnx.Linear kernel [in, out]."""
    out[f"{prefix}/kernel"] = (name + ".weight", _same if conv1d else _t)
    if bias:
        out[f"{prefix}/bias"] = (name + ".bias", _same)


def _gpt2(cfg, p: str) -> dict[str, Source]:
    out: dict[str, Source] = {"embed/embedding": (p + "wte.weight", _same),
                              "decoder/positions/table/embedding": (p + "wpe.weight", _same)}
    H, D = cfg.num_heads, cfg.qk_dim
    for i in range(cfg.num_decoder_layers):
        h, o = f"{p}h.{i}.", f"decoder/layers/{i}"
        for j, ours in enumerate(("query", "key", "value")):
            out[f"{o}/self_attention/{ours}/kernel"] = (h + "attn.c_attn.weight", _slice(j, 3, _heads_in(H, D, False)))
            out[f"{o}/self_attention/{ours}/bias"] = (h + "attn.c_attn.bias", _slice(j, 3, _heads_bias(H, D)))
        out[f"{o}/self_attention/out/kernel"] = (h + "attn.c_proj.weight", _heads_out(H, D, False))
        out[f"{o}/self_attention/out/bias"] = (h + "attn.c_proj.bias", _same)
        _norm(out, f"{o}/self_block/norm", h + "ln_1")
        _norm(out, f"{o}/mlp_block/norm", h + "ln_2")
        _linear(out, f"{o}/mlp/wi", h + "mlp.c_fc", conv1d=True)
        _linear(out, f"{o}/mlp/wo", h + "mlp.c_proj", conv1d=True)
    _norm(out, "decoder/final_norm", p + "ln_f")
    return out


def _llama(cfg, p: str) -> dict[str, Source]:
    out: dict[str, Source] = {"embed/embedding": (p + "embed_tokens.weight", _same)}
    for i in range(cfg.num_decoder_layers):
        h, o = f"{p}layers.{i}.", f"decoder/layers/{i}"
        _attention(out, f"{o}/self_attention", cfg, {k: h + f"self_attn.{n}_proj" for k, n in
                                                      (("query", "q"), ("key", "k"), ("value", "v"), ("out", "o"))},
                   bias=cfg.attention_qkv_bias, out_bias=cfg.use_bias)
        _norm(out, f"{o}/self_block/norm", h + "input_layernorm", bias=False)
        _norm(out, f"{o}/mlp_block/norm", h + "post_attention_layernorm", bias=False)
        _linear(out, f"{o}/mlp/wi", h + "mlp.gate_proj", bias=False)
        _linear(out, f"{o}/mlp/wg", h + "mlp.up_proj", bias=False)
        _linear(out, f"{o}/mlp/wo", h + "mlp.down_proj", bias=False)
    _norm(out, "decoder/final_norm", p + "norm", bias=False)
    if not cfg.tie_output:
        out["output/kernel"] = ("lm_head.weight", _t)
    return out


def _marian(cfg, p: str) -> dict[str, Source]:
    out: dict[str, Source] = {"source_embed/embedding": (p + "shared.weight", _same),
                              "logits_bias": ("final_logits_bias", _vector)}
    proj = lambda h: {k: h + n for k, n in (("query", "q_proj"), ("key", "k_proj"), ("value", "v_proj"),  # noqa: E731
                                             ("out", "out_proj"))}
    for side, n in (("encoder", cfg.num_encoder_layers), ("decoder", cfg.num_decoder_layers)):
        for i in range(n):
            h, o = f"{p}{side}.layers.{i}.", f"{side}/layers/{i}"
            first = "attention_block" if side == "encoder" else "self_block"
            _attention(out, f"{o}/self_attention", cfg, proj(h + "self_attn."), bias=True, out_bias=True)
            _norm(out, f"{o}/{first}/norm", h + "self_attn_layer_norm")
            if side == "decoder":
                _attention(out, f"{o}/cross_attention", cfg, proj(h + "encoder_attn."), bias=True, out_bias=True)
                _norm(out, f"{o}/cross_block/norm", h + "encoder_attn_layer_norm")
            _linear(out, f"{o}/mlp/wi", h + "fc1")
            _linear(out, f"{o}/mlp/wo", h + "fc2")
            _norm(out, f"{o}/mlp_block/norm", h + "final_layer_norm")
    if not cfg.tie_output:
        out["output/kernel"] = ("lm_head.weight", _t)
    return out


def _bert(cfg, p: str) -> dict[str, Source]:
    e = p + "embeddings."
    out: dict[str, Source] = {"embed/embedding": (e + "word_embeddings.weight", _same),
                              "token_type_embed/embedding": (e + "token_type_embeddings.weight", _same),
                              "encoder/positions/table/embedding": (e + "position_embeddings.weight", _same)}
    _norm(out, "encoder/positions/norm", e + "LayerNorm")
    for i in range(cfg.num_encoder_layers):
        h, o = f"{p}encoder.layer.{i}.", f"encoder/layers/{i}"
        _attention(out, f"{o}/self_attention", cfg, {"query": h + "attention.self.query", "key": h + "attention.self.key",
                                                      "value": h + "attention.self.value",
                                                      "out": h + "attention.output.dense"}, bias=True, out_bias=True)
        _norm(out, f"{o}/attention_block/norm", h + "attention.output.LayerNorm")
        _linear(out, f"{o}/mlp/wi", h + "intermediate.dense")
        _linear(out, f"{o}/mlp/wo", h + "output.dense")
        _norm(out, f"{o}/mlp_block/norm", h + "output.LayerNorm")
    _linear(out, "lm_dense", "cls.predictions.transform.dense")
    _norm(out, "lm_norm", "cls.predictions.transform.LayerNorm")
    out["lm_bias"] = ("cls.predictions.bias", _same)
    if not cfg.tie_output:
        out["output/kernel"] = ("cls.predictions.decoder.weight", _t)
    _linear(out, "pooler", p + "pooler.dense")
    _linear(out, "classifier", "classifier")
    return out


# family -> (builder, name prefixes a checkpoint may use for the base model: with a task head, or bare)
_MAPS = {"gpt2": (_gpt2, ("transformer.", "")), "llama": (_llama, ("model.", "")),
         "marian": (_marian, ("model.", "")), "bert": (_bert, ("bert.", ""))}
# Checkpoint tensors that are deliberately not read (buffers, tied copies, sinusoids attnlab computes).
_IGNORED = ("attn.bias", "attn.masked_bias", "position_ids", "embed_positions.weight", "rotary_emb.inv_freq",
            "encoder.embed_tokens.weight", "decoder.embed_tokens.weight", "lm_head.weight",
            "cls.predictions.decoder.weight", "cls.predictions.decoder.bias", "pooler.dense.")


def weight_map(family: str, cfg: models.TransformerConfig, names: Iterable[str]) -> dict[str, Source]:
    """attnlab parameter path -> (checkpoint tensor name, layout transform), for the prefix ``names`` use."""
    builder, prefixes = _MAPS[family]
    names = set(names)
    for prefix in prefixes:
        mapping = builder(cfg, prefix)
        if any(src in names for src, _ in mapping.values()):
            return mapping
    raise CheckpointMismatch(f"no {family} tensors found in the checkpoint (looked for names starting with "
                             f"{[p for p in prefixes if p]}); got e.g. {sorted(names)[:5]}")


def _legacy_name(name: str, names: set) -> str:
    """``name``, or its older spelling when only that is in the checkpoint (LayerNorm ``gamma`` / ``beta``, as
    in bert-base-uncased's files)."""
    if name in names:
        return name
    for new, old in ((".weight", ".gamma"), (".bias", ".beta")):
        if name.endswith(new) and name[: -len(new)] + old in names:
            return name[: -len(new)] + old
    return name


def model_class(family: str) -> type:
    return {"gpt2": models.DecoderOnly, "llama": models.DecoderOnly, "marian": models.EncoderDecoder,
            "bert": models.EncoderOnly}[family]


def build_model(family: str, cfg: models.TransformerConfig, tensors: Callable[[str], np.ndarray],
                names: Iterable[str], *, num_classes: int = 0,
                sharding: Optional[Callable[[str, tuple], Any]] = None) -> nnx.Module:
    """The attnlab model of ``family`` with every parameter read from the checkpoint.

    tensors: name -> numpy array (read lazily, one at a time); names: the checkpoint's tensor names;
    num_classes: BERT's classification head (0: none); sharding: (parameter path, shape) -> the
    ``jax.sharding.Sharding`` to place it with (None: the default device). Raises ``CheckpointMismatch``
    naming a missing tensor, a tensor with no place in the model, or a shape that disagrees with the config.
    """
    names = set(names)
    kwargs = {}
    if family == "bert":
        kwargs = dict(lm_head="cls.predictions.bias" in names, num_classes=num_classes)
    cls = model_class(family)
    abstract = nnx.eval_shape(lambda: cls(cfg, **kwargs, rngs=nnx.Rngs(params=0)))
    graphdef, params, rest = nnx.split(abstract, nnx.Param, ...)
    mapping = weight_map(family, cfg, names)
    leaves, treedef = jax.tree_util.tree_flatten_with_path(params)
    dtype = cfg.jnp_param_dtype
    filled, used = [], set()
    for path, leaf in leaves:
        key = "/".join(str(getattr(k, "key", getattr(k, "name", getattr(k, "idx", k)))) for k in path)
        key = key[: -len("/value")] if key.endswith("/value") else key
        if key not in mapping:
            raise CheckpointMismatch(f"attnlab parameter {key} has no source in the {family} weight map")
        name, transform = mapping[key]
        name = _legacy_name(name, names)
        if name not in names:
            raise CheckpointMismatch(f"checkpoint has no tensor {name!r} (needed for {key})")
        used.add(name)
        value = np.asarray(transform(tensors(name)))
        if value.shape != tuple(leaf.shape):
            raise CheckpointMismatch(f"tensor {name!r} gives shape {value.shape} for {key}, but the config "
                                     f"implies {tuple(leaf.shape)}")
        value = (jnp.asarray(value, dtype) if sharding is None
                 else jax.device_put(value.astype(dtype), sharding(key, value.shape)))
        filled.append(value)
    unused = sorted(n for n in names - used if not any(n.endswith(i) or i in n for i in _IGNORED))
    if unused:
        raise CheckpointMismatch(f"{len(unused)} checkpoint tensors have no place in attnlab's {family} model "
                                 f"(an architecture variant it does not implement): {unused[:5]}")
    params = jax.tree_util.tree_unflatten(treedef, filled)
    return nnx.merge(graphdef, params, rest)
