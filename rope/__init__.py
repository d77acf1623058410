"""Pluggable rotary position embeddings.

``rope.available()`` lists the implementations, ``rope.build(name, head_dim, max_seq_len, ...)``
makes one, ``rope.check_args(...)`` validates the same arguments without building. This package
knows nothing of training.

Standalone use in a model of one's own: ``rope.rope_triton(q, k, seq_len, theta)`` or
``rope.apply(q, k, seq_len, theta, impl=..., variant=...)`` rotate (B, T, H, D) tensors (a module per
setting is built once and reused), and ``rope.RoPEAttention(d_model, n_heads, impl=...)`` is a causal
self-attention layer with RoPE and an optional KV cache. ``rope.attention_with_rope(q, k_cache, v_cache,
positions, rotary)`` attends un-rotated queries over a cache of rotated keys, rotating them in the kernel.

Discovery rule: importing ``rope`` imports every module (and subpackage) directly under ``rope/``
whose name does not start with an underscore, and an implementation registers itself with
``@register("name")`` when its module is imported. So adding one is a file here (a caller that lists its
choices in files of its own, such as a config per implementation, adds one there); nothing here lists the
implementations.
"""

from rope.base import RopeArgumentError, RotaryEmbedding, label, rope_frequencies
from rope.registry import (
    RopePluginWarning,
    available,
    build,
    check_args,
    discover,
    get,
    load_plugins,
    plugin_failures,
    register,
)

discover(__name__, __path__)

# The standalone API (the seed repo's names): ``discover`` has just imported its modules,
# rope/functional.py, rope/attention.py and rope/fused_attention.py, which binds them here by those names
# (this file imports from nothing but rope.base and rope.registry, so it never lists modules).
apply = functional.apply  # noqa: F821
rope_triton = functional.rope_triton  # noqa: F821
RoPEAttention = attention.RoPEAttention  # noqa: F821
attention_with_rope = fused_attention.attention_with_rope  # noqa: F821
#: The most new queries one ``attention_with_rope`` call takes (a decode step, or a chunk of a prefill).
ATTENTION_MAX_QUERIES = fused_attention.MAX_QUERIES  # noqa: F821
#: The widest head it takes.
ATTENTION_MAX_HEAD_DIM = fused_attention.MAX_HEAD_DIM  # noqa: F821
attention_unavailable_reason = fused_attention.unavailable_reason  # noqa: F821
causal_mask = attention.causal_mask  # noqa: F821

__all__ = [
    "ATTENTION_MAX_QUERIES",
    "ATTENTION_MAX_HEAD_DIM",
    "RoPEAttention",
    "RopeArgumentError",
    "RopePluginWarning",
    "RotaryEmbedding",
    "apply",
    "attention_unavailable_reason",
    "attention_with_rope",
    "available",
    "build",
    "causal_mask",
    "check_args",
    "get",
    "label",
    "plugin_failures",
    "register",
    "rope_frequencies",
    "rope_triton",
]

# last: a plugin module may use any of the above (``import rope; @rope.register(...)``)
load_plugins()  # implementations installed packages declare (entry points "ropelab.rope"); a broken one only warns
