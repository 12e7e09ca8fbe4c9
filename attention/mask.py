"""The structured attention mask shared by every backend.

A key j is visible to query i when every part of the mask allows it (the parts compose by AND):

- ``causal``: ``kv_pos[j] <= q_pos[i]``.
- ``window=(left, right)``: ``q_pos[i] - left <= kv_pos[j] <= q_pos[i] + right``; an int ``w`` means
  ``(w, w)`` and ``None`` on one side leaves that side open.
- ``q_segment_ids`` / ``kv_segment_ids`` (``[B, Tq]`` / ``[B, Tk]`` ints): ids must match and be non-zero;
  0 marks padding. Packed sequences get distinct ids. Either side may be given alone.
- ``dense``: an arbitrary boolean array broadcastable to ``[B, H, Tq, Tk]`` (only some backends take it).

Positions default to ``arange(Tq)`` and ``arange(Tk)`` (top-left aligned). Pass ``q_positions`` /
``kv_positions`` (``[B, Tq]`` / ``[B, Tk]`` ints) for packed sequences or for decoding with a KV cache, where
the new queries sit at the end of the cache.
"""
from __future__ import annotations

import dataclasses
from typing import Optional, Union

import jax
import jax.numpy as jnp
import numpy as np

Window = Optional[tuple[Optional[int], Optional[int]]]


def _normalize_window(window: Union[None, int, tuple]) -> Window:
    if window is None:
        return None
    if isinstance(window, (int, np.integer)) and not isinstance(window, bool):
        window = (int(window), int(window))
    if not (isinstance(window, (tuple, list)) and len(window) == 2):
        raise ValueError(f"Mask.window must be None, an int or a (left, right) pair; got {window!r}")
    left, right = window
    for name, side in (("left", left), ("right", right)):
        if side is not None and (not isinstance(side, (int, np.integer)) or isinstance(side, bool) or side < 0):
            raise ValueError(f"Mask.window {name} side must be None or an int >= 0; got {side!r}")
    if left is None and right is None:
        return None
    return (None if left is None else int(left), None if right is None else int(right))


@dataclasses.dataclass(frozen=True)
class Mask:
    """Which keys each query may see. See the module docstring for the exact semantics.

    causal: bool; window: None | int | (left, right).
    q_segment_ids: [B, Tq] int, 0 = padding.     kv_segment_ids: [B, Tk] int, 0 = padding.
    q_positions:   [B, Tq] int.                   kv_positions:   [B, Tk] int.
    dense: bool, broadcastable to [B, H, Tq, Tk].
    """

    causal: bool = False
    window: Window = None
    q_segment_ids: Optional[jax.Array] = None
    kv_segment_ids: Optional[jax.Array] = None
    dense: Optional[jax.Array] = None
    q_positions: Optional[jax.Array] = None
    kv_positions: Optional[jax.Array] = None

    def __post_init__(self):
        if not isinstance(self.causal, (bool, np.bool_)):
            raise ValueError(f"Mask.causal must be a bool; got {self.causal!r}")
        object.__setattr__(self, "causal", bool(self.causal))
        object.__setattr__(self, "window", _normalize_window(self.window))

    # ----------------------------------------------------------------------------------------------- builders
    @classmethod
    def from_lengths(
        cls,
        q_lengths: Optional[jax.Array],
        kv_lengths: Optional[jax.Array],
        q_len: int,
        kv_len: int,
        *,
        causal: bool = False,
        window=None,
    ) -> "Mask":
        """Padding mask from per-example lengths ([B] ints); positions past a length are padding."""
        q_seg = None if q_lengths is None else (jnp.arange(q_len)[None, :] < jnp.asarray(q_lengths)[:, None])
        kv_seg = None if kv_lengths is None else (jnp.arange(kv_len)[None, :] < jnp.asarray(kv_lengths)[:, None])
        return cls(
            causal=causal,
            window=window,
            q_segment_ids=None if q_seg is None else q_seg.astype(jnp.int32),
            kv_segment_ids=None if kv_seg is None else kv_seg.astype(jnp.int32),
        )

    @classmethod
    def from_token_ids(
        cls,
        q_tokens: Optional[jax.Array],
        kv_tokens: Optional[jax.Array],
        *,
        pad_id: int = 0,
        causal: bool = False,
        window=None,
    ) -> "Mask":
        """Padding mask from token ids ([B, T] ints); tokens equal to ``pad_id`` are padding."""
        q_seg = None if q_tokens is None else (jnp.asarray(q_tokens) != pad_id).astype(jnp.int32)
        kv_seg = None if kv_tokens is None else (jnp.asarray(kv_tokens) != pad_id).astype(jnp.int32)
        return cls(causal=causal, window=window, q_segment_ids=q_seg, kv_segment_ids=kv_seg)

    def replace(self, **changes) -> "Mask":
        return dataclasses.replace(self, **changes)

    # --------------------------------------------------------------------------------------------- queries
    @property
    def is_structured_only(self) -> bool:
        """True when the mask has no dense part (every fast backend can take it)."""
        return self.dense is None

    @property
    def has_positions(self) -> bool:
        return self.q_positions is not None or self.kv_positions is not None

    @property
    def has_segments(self) -> bool:
        return self.q_segment_ids is not None or self.kv_segment_ids is not None

    def validate(self, batch: int, heads: int, q_len: int, kv_len: int) -> None:
        """Raise ValueError naming the field when an array part does not fit the attention shapes."""
        for name, expected in (
            ("q_segment_ids", (batch, q_len)),
            ("kv_segment_ids", (batch, kv_len)),
            ("q_positions", (batch, q_len)),
            ("kv_positions", (batch, kv_len)),
        ):
            arr = getattr(self, name)
            if arr is None:
                continue
            if tuple(arr.shape) != expected:
                raise ValueError(f"Mask.{name} has shape {tuple(arr.shape)}; expected [B, T] = {expected}")
            if not jnp.issubdtype(arr.dtype, jnp.integer) and arr.dtype != jnp.bool_:
                raise ValueError(f"Mask.{name} must be an integer array; got dtype {arr.dtype}")
        if self.dense is not None:
            d = self.dense
            if d.dtype != jnp.bool_:
                raise ValueError(f"Mask.dense must be a boolean array; got dtype {d.dtype}")
            if d.ndim > 4:
                raise ValueError(f"Mask.dense has shape {tuple(d.shape)}; expected at most 4 dims [B, H, Tq, Tk]")
            try:
                np.broadcast_shapes(tuple(d.shape), (batch, heads, q_len, kv_len))
            except ValueError:
                raise ValueError(
                    f"Mask.dense has shape {tuple(d.shape)}; expected broadcastable to "
                    f"[B, H, Tq, Tk] = {(batch, heads, q_len, kv_len)}"
                ) from None

    def positions(self, batch: int, q_len: int, kv_len: int) -> tuple[jax.Array, jax.Array]:
        """(q_pos [B, Tq], kv_pos [B, Tk]) int32, defaulting to aranges."""
        q_pos = self.q_positions
        kv_pos = self.kv_positions
        if q_pos is None:
            q_pos = jnp.broadcast_to(jnp.arange(q_len, dtype=jnp.int32), (batch, q_len))
        if kv_pos is None:
            kv_pos = jnp.broadcast_to(jnp.arange(kv_len, dtype=jnp.int32), (batch, kv_len))
        return q_pos.astype(jnp.int32), kv_pos.astype(jnp.int32)

    def structured_block(
        self,
        q_pos: jax.Array,
        kv_pos: jax.Array,
        q_seg: Optional[jax.Array],
        kv_seg: Optional[jax.Array],
    ) -> jax.Array:
        """Visibility of the structured parts for a block of rows and columns.

        q_pos: [B, bq], kv_pos: [B, bk], q_seg: [B, bq] | None, kv_seg: [B, bk] | None -> bool [B, bq, bk].
        The dense part is not included.
        """
        qp = q_pos[:, :, None]
        kp = kv_pos[:, None, :]
        vis = jnp.ones(jnp.broadcast_shapes(qp.shape, kp.shape), dtype=jnp.bool_)
        if self.causal:
            vis = vis & (kp <= qp)
        if self.window is not None:
            left, right = self.window
            if left is not None:
                vis = vis & (kp >= qp - left)
            if right is not None:
                vis = vis & (kp <= qp + right)
        if q_seg is not None and kv_seg is not None:
            vis = vis & (q_seg[:, :, None] == kv_seg[:, None, :]) & (q_seg[:, :, None] != 0)
        elif q_seg is not None:
            vis = vis & (q_seg[:, :, None] != 0)
        elif kv_seg is not None:
            vis = vis & (kv_seg[:, None, :] != 0)
        return vis

    def materialize(self, batch: int, heads: int, q_len: int, kv_len: int) -> jax.Array:
        """The full boolean mask, [B, 1 or H, Tq, Tk]. For reference backends and tests only."""
        q_pos, kv_pos = self.positions(batch, q_len, kv_len)
        vis = self.structured_block(q_pos, kv_pos, self.q_segment_ids, self.kv_segment_ids)[:, None]
        if self.dense is not None:
            d = self.dense
            d = d.reshape((1,) * (4 - d.ndim) + tuple(d.shape))
            vis = vis & d
            vis = jnp.broadcast_to(vis, (batch, vis.shape[1], q_len, kv_len))
        return vis


jax.tree_util.register_dataclass(
    Mask,
    data_fields=["q_segment_ids", "kv_segment_ids", "dense", "q_positions", "kv_positions"],
    meta_fields=["causal", "window"],
)
