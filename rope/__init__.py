"""Pluggable rotary position embeddings.

``rope.available()`` lists the implementations, ``rope.build(name, head_dim, max_seq_len, ...)``
makes one. This package knows nothing of training.
"""

# Importing an implementation module registers it.
from rope import (
    reference,  # noqa: E402,F401
    triton_rope,  # noqa: E402,F401
)
from rope.base import RotaryEmbedding, label, rope_frequencies
from rope.registry import available, build, get, register

__all__ = ["RotaryEmbedding", "available", "build", "get", "label", "register", "rope_frequencies"]
