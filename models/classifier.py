"""``EncoderClassifier``: a Transformer encoder with an attention-pooling classifier."""
from __future__ import annotations

import math
from typing import Optional

import jax
import jax.numpy as jnp
from flax import nnx

import attention as attn
from models.attention import MultiHeadAttention
from models.config import TransformerConfig
from models.interventions import Interventions, at, head_shapes
from models.transformer import Encoder, _check_ids, _check_len, _embed, _segments_and_positions

class EncoderClassifier(nnx.Module):
    """A Transformer encoder with an attention-pooling classifier (the Jain & Wallace set-up with a
    Transformer encoder): one learned query attends over the encoded tokens (a single head of width d_model,
    softmax, padding masked), and a linear layer maps the pooled vector to class logits.

    ``model(inputs)``: inputs [B, S] token ids -> logits [B, num_classes], or ``(logits, stats)`` with
    ``stats = {"encoder_self": [...per layer], "pool": [one AttentionStats]}``; the pooling weights are the
    model's "explanation" of its prediction.
    """

    def __init__(self, cfg: TransformerConfig, num_classes: int, *, rngs: nnx.Rngs):
        if not isinstance(cfg, TransformerConfig):
            raise ValueError(f"EncoderClassifier expects a TransformerConfig; got {type(cfg).__name__}")
        if not isinstance(num_classes, int) or isinstance(num_classes, bool) or num_classes < 2:
            raise ValueError(f"EncoderClassifier: num_classes must be an int >= 2; got {num_classes!r}")
        self.cfg = cfg
        self.num_classes = num_classes
        self.embed = _embed(cfg, rngs)
        self.embed_scale = math.sqrt(cfg.d_model) if cfg.scale_embeddings else 1.0
        self.encoder = Encoder(cfg, rngs=rngs)
        self.pool_query = nnx.Param(nnx.initializers.normal(1.0)(rngs.params(), (cfg.d_model,), cfg.jnp_param_dtype))
        self.pool = MultiHeadAttention(
            cfg.d_model, 1, qk_dim=cfg.d_model, v_dim=cfg.d_model, use_bias=cfg.use_bias,
            implementation=cfg.attention_impl, backend_options=cfg.attention_options, dtype=cfg.jnp_dtype,
            param_dtype=cfg.jnp_param_dtype, uniform="pool" in cfg.uniform_attention_groups, rngs=rngs)
        self.classifier = nnx.Linear(cfg.d_model, num_classes, dtype=cfg.jnp_dtype, param_dtype=cfg.jnp_param_dtype,
                                     rngs=rngs)

    def __call__(
        self,
        inputs: jax.Array,
        *,
        inputs_segmentation: Optional[jax.Array] = None,
        inputs_position: Optional[jax.Array] = None,
        deterministic: bool = True,
        return_stats: bool = False,
        interventions: Optional[Interventions] = None,
    ):
        """inputs: [B, S] -> logits [B, num_classes] (or (logits, stats dict)).

        ``interventions``: head masks and attention-weight overrides (``models.interventions``); the pooling
        attention is group "pool", layer 0, head 0."""
        _check_ids("inputs", inputs)
        if interventions is not None:
            interventions.check(head_shapes(self))
        _check_len(self.cfg, "inputs", inputs.shape[1])
        seg, pos = _segments_and_positions(inputs, inputs_segmentation, inputs_position, self.cfg.pad_id)
        return self.classify_embedded(self.embed_tokens(inputs), seg, pos, deterministic=deterministic,
                                      return_stats=return_stats, interventions=interventions)

    def embed_tokens(self, inputs: jax.Array) -> jax.Array:
        """inputs: [B, S] token ids -> the scaled token embeddings [B, S, d_model] the encoder reads."""
        return self.embed(inputs) * jnp.asarray(self.embed_scale, self.cfg.jnp_dtype)

    def classify_embedded(self, x: jax.Array, seg: jax.Array, pos: jax.Array, *, deterministic: bool = True,
                          return_stats: bool = False, interventions: Optional[Interventions] = None):
        """The model after its token embedding (for gradients with respect to the inputs): x [B, S, d_model],
        seg [B, S] (0 = padding), pos [B, S] -> logits [B, num_classes] (or (logits, stats dict))."""
        B = x.shape[0]
        encoded, enc_stats = self.encoder(x, seg, pos, deterministic=deterministic, return_stats=return_stats,
                                          interventions=interventions)
        query = jnp.broadcast_to(self.pool_query[...].astype(self.cfg.jnp_dtype), (B, 1, self.cfg.d_model))
        mask = attn.Mask(q_segment_ids=jnp.ones((B, 1), jnp.int32), kv_segment_ids=(seg != 0).astype(jnp.int32))
        pooled, pool_stats = self.pool.attend(self.pool.queries(query), *self.pool.keys_values(encoded), mask,
                                              deterministic=deterministic, return_stats=return_stats,
                                              intervention=at(interventions, "pool", 0))
        logits = self.classifier(pooled[:, 0]).astype(jnp.float32)
        if not return_stats:
            return logits
        return logits, {"encoder_self": enc_stats, "pool": [pool_stats]}
