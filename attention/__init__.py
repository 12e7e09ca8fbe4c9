"""attnlab's attention: pure functions on [batch, seq, heads, head_dim] arrays.

``attention(q, k, v, mask, implementation=...)`` is the one entry point; ``Mask`` is the structured mask
every backend takes; ``AttentionStats`` are the per-row statistics every backend can return. Attention kinds
(softmax, additive, linear, hard, ...) are registered by name (``available_kinds``, ``check_kind``), one module
each in ``attention/kinds/``. ``ring`` holds the
context-parallel backend's layout helpers (``to_zigzag``, ``from_zigzag``, ``zigzag_mask``).
"""
from attention.api import (AUTO_ORDER, FEATURES, Backend, Kind, KindCall, Request, attention, auto_order,
                           available_backends, available_kinds, check_kind, get_kind, kind_refusal, register_backend,
                           register_kind, select_backend)
from attention.mask import Mask
from attention.stats import (
    AttentionStats,
    collapsed_fraction,
    logit_mean_per_head,
    logit_std_per_head,
    max_logit_per_head,
    mean_entropy_per_head,
    normalized_entropy_per_head,
    sink_mass_per_head,
    uniform_entropy,
)

# Backends register themselves on import.
from attention import reference as _reference  # noqa: E402,F401
from attention import xla as _xla  # noqa: E402,F401
from attention.reference import reference_attention  # noqa: E402
from attention.heads import init_mha_params, merge_heads, multi_head_attention, split_heads  # noqa: E402
from attention.variants import (  # noqa: E402
    additive_attention,
    hard_attention,
    init_additive_params,
    linear_attention,
)
from attention import flash as _flash  # noqa: E402,F401
from attention import chunked as _chunked  # noqa: E402,F401
from attention import ring  # noqa: E402,F401
from attention import kinds as _kinds  # noqa: E402,F401  (attention kinds register themselves on import)
