"""Interventions on attention, passed at call time: ``model(..., interventions=Interventions(...))``.

Two kinds, for any group ("encoder_self", "decoder_self", "cross", "pool"), layer and head:

- a head mask (Michel et al., 2019): ``head_mask[group]`` is a float array [L, H] that multiplies each head's
  output before the output projection; 1 everywhere changes nothing, 0 removes a head, and the gradient of a
  loss with respect to it is the head importance. Works on every attention backend and kind.
- a weight override (``WeightOverride``): the attention weights of chosen heads of one (group, layer) are
  replaced by a given matrix, the uniform distribution over visible keys, a random permutation of each row's
  weights among its visible keys, or a function of the original weights; the output is then weights @ V.
  The original weights are the softmax of the layer's logits computed as the ``reference`` backend does, so
  overrides need ``attention_kind="softmax"`` (any backend); attention dropout is not applied to them.

``Interventions`` is a pytree: head masks, given matrices and permutation keys are leaves (so they can be
traced, differentiated and vmapped); groups, layers, kinds, heads and functions are static.
Without interventions (``None``) the models run exactly the program they run without this module.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Mapping, Optional

import jax
import jax.numpy as jnp

GROUPS = ("encoder_self", "decoder_self", "cross", "pool")
OVERRIDE_KINDS = ("given", "uniform", "permute", "function")

# fn(weights [B, H, Tq, Tk], visible [B, H, Tq, Tk] bool) -> new weights [B, H, Tq, Tk]
WeightFunction = Callable[[jax.Array, jax.Array], jax.Array]


def _check_group(owner: str, group: str) -> None:
    if group not in GROUPS:
        raise ValueError(f"{owner}: group {group!r} is not an attention group; expected one of {GROUPS}")


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class WeightOverride:
    """Replace the attention weights of ``heads`` (None = all) of ``group`` layer ``layer``.

    kind "given": ``value`` [B, H, Tq, Tk] (or broadcastable to it) is used at visible keys, 0 elsewhere.
    kind "uniform": 1 / (visible keys) at each visible key. kind "permute": each row's weights shuffled among
    its visible keys with ``key`` (a jax PRNG key). kind "function": ``fn(weights, visible)``, the result
    zeroed at invisible keys.
    """

    group: str = dataclasses.field(metadata=dict(static=True))
    layer: int = dataclasses.field(metadata=dict(static=True))
    kind: str = dataclasses.field(metadata=dict(static=True))
    heads: Optional[tuple[int, ...]] = dataclasses.field(default=None, metadata=dict(static=True))
    fn: Optional[WeightFunction] = dataclasses.field(default=None, metadata=dict(static=True))
    value: Optional[jax.Array] = None
    key: Optional[jax.Array] = None

    def __post_init__(self):
        _check_group("WeightOverride", self.group)
        if not isinstance(self.layer, int) or isinstance(self.layer, bool) or self.layer < 0:
            raise ValueError(f"WeightOverride: layer must be an int >= 0; got {self.layer!r}")
        if self.kind not in OVERRIDE_KINDS:
            raise ValueError(f"WeightOverride: kind={self.kind!r}; expected one of {OVERRIDE_KINDS}")
        needs = {"given": ("value", self.value), "permute": ("key", self.key), "function": ("fn", self.fn)}
        if self.kind in needs and needs[self.kind][1] is None:
            raise ValueError(f"WeightOverride: kind={self.kind!r} needs {needs[self.kind][0]}=...")
        if self.heads is not None:
            object.__setattr__(self, "heads", tuple(int(h) for h in self.heads))

    def apply(self, p: jax.Array, visible: jax.Array) -> jax.Array:
        """p: weights [B, H, Tq, Tk] float, visible: [B, H, Tq, Tk] bool -> the overridden weights."""
        if self.kind == "uniform":
            new = visible / jnp.maximum(jnp.sum(visible, axis=-1, keepdims=True), 1)
        elif self.kind == "given":
            new = jnp.broadcast_to(jnp.asarray(self.value, p.dtype), p.shape)
        elif self.kind == "function":
            new = self.fn(p, visible)
        else:
            new = permute_visible(p, visible, self.key)
        new = jnp.where(visible, new, 0.0).astype(p.dtype)
        if self.heads is None:
            return new
        H = p.shape[1]
        bad = [h for h in self.heads if not 0 <= h < H]
        if bad:
            raise ValueError(f"WeightOverride({self.group}, layer {self.layer}): heads {bad} out of range [0, {H})")
        chosen = jnp.isin(jnp.arange(H), jnp.asarray(self.heads))[None, :, None, None]
        return jnp.where(chosen, new, p)


def permute_visible(p: jax.Array, visible: jax.Array, key: jax.Array) -> jax.Array:
    """Each row of p [..., Tk] with its values at visible keys randomly permuted among those keys (a
    different permutation per row); invisible entries come back 0."""
    order = jnp.argsort(~visible, axis=-1, stable=True)  # visible key indices first, ascending
    u = jax.random.uniform(key, p.shape)
    shuffled = jnp.argsort(jnp.where(visible, u, 2.0), axis=-1)  # visible keys first, in random order
    values = jnp.take_along_axis(jnp.where(visible, p, 0.0), shuffled, axis=-1)
    return jnp.take_along_axis(values, jnp.argsort(order, axis=-1), axis=-1)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class LayerIntervention:
    """What one attention layer applies: a head mask [H] (or None) and a weight override (or None)."""

    head_mask: Optional[jax.Array] = None
    override: Optional[WeightOverride] = None


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Interventions:
    """Head masks (``{group: [L, H] floats}``) and weight overrides, for ``model(..., interventions=...)``."""

    head_mask: Mapping[str, jax.Array] = dataclasses.field(default_factory=dict)
    overrides: tuple[WeightOverride, ...] = ()

    def __post_init__(self):
        for group in self.head_mask:
            _check_group("Interventions.head_mask", group)
        object.__setattr__(self, "overrides", tuple(self.overrides))
        seen = set()
        for o in self.overrides:
            if not isinstance(o, WeightOverride):
                raise ValueError(f"Interventions.overrides must hold WeightOverride values; got {type(o).__name__}")
            if (o.group, o.layer) in seen:
                raise ValueError(f"Interventions: two weight overrides for ({o.group!r}, layer {o.layer}); "
                                 f"combine them into one (a 'function' override)")
            seen.add((o.group, o.layer))

    def check(self, shapes: Mapping[str, tuple[int, int]]) -> None:
        """ValueError unless every group named exists in ``shapes`` ({group: (layers, heads)}) with matching
        head-mask shapes and layer indices in range."""
        for group, mask in self.head_mask.items():
            if group not in shapes:
                raise ValueError(f"Interventions: this model has no {group!r} attention; its groups are "
                                 f"{tuple(shapes)}")
            if tuple(jnp.shape(mask)) != tuple(shapes[group]):
                raise ValueError(f"Interventions.head_mask[{group!r}] has shape {tuple(jnp.shape(mask))}; "
                                 f"expected [layers, heads] = {tuple(shapes[group])}")
        for o in self.overrides:
            if o.group not in shapes:
                raise ValueError(f"WeightOverride: this model has no {o.group!r} attention; its groups are "
                                 f"{tuple(shapes)}")
            if o.layer >= shapes[o.group][0]:
                raise ValueError(f"WeightOverride({o.group!r}): layer {o.layer} out of range; the model has "
                                 f"{shapes[o.group][0]} layers")

    def at(self, group: str, layer: int) -> Optional[LayerIntervention]:
        """The intervention on ``group`` layer ``layer``, or None when there is none."""
        mask = self.head_mask.get(group)
        override = next((o for o in self.overrides if o.group == group and o.layer == layer), None)
        if mask is None and override is None:
            return None
        return LayerIntervention(None if mask is None else mask[layer], override)


def at(interventions: Optional[Interventions], group: str, layer: int) -> Optional[LayerIntervention]:
    """``interventions.at(group, layer)``, or None without interventions."""
    return None if interventions is None else interventions.at(group, layer)


def head_shapes(model) -> dict[str, tuple[int, int]]:
    """{group: (layers, heads)} of a model's attention groups (EncoderDecoder, DecoderOnly, EncoderClassifier)."""
    out = {}
    encoder = getattr(model, "encoder", None)
    if encoder is not None and len(encoder.layers):
        out["encoder_self"] = (len(encoder.layers), encoder.layers[0].self_attention.num_heads)
    decoder = getattr(model, "decoder", None)
    if decoder is not None and len(decoder.layers):
        first = decoder.layers[0]
        out["decoder_self"] = (len(decoder.layers), first.self_attention.num_heads)
        if first.cross_attention is not None:
            out["cross"] = (len(decoder.layers), first.cross_attention.num_heads)
    pool = getattr(model, "pool", None)
    if pool is not None:
        out["pool"] = (1, pool.num_heads)
    return out


def unit_head_mask(model) -> dict[str, jax.Array]:
    """Head masks of ones ([L, H] float32 per group of ``model``): the identity, and the point at which
    Michel et al.'s importance (the gradient with respect to the mask) is taken."""
    return {g: jnp.ones(shape, jnp.float32) for g, shape in head_shapes(model).items()}
