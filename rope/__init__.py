"""Pluggable rotary position embeddings.

``rope.available()`` lists the implementations, ``rope.build(name, head_dim, max_seq_len, ...)``
makes one, ``rope.check_args(...)`` validates the same arguments without building. This package
knows nothing of training.

Discovery rule: importing ``rope`` imports every module (and subpackage) directly under ``rope/``
whose name does not start with an underscore, and an implementation registers itself with
``@register("name")`` when its module is imported. So adding one is a file here plus its
``conf/rope/<name>.yaml``; nothing here lists the implementations.
"""

from rope.base import RopeArgumentError, RotaryEmbedding, label, rope_frequencies
from rope.registry import available, build, check_args, discover, get, register

discover(__name__, __path__)

__all__ = [
    "RopeArgumentError",
    "RotaryEmbedding",
    "available",
    "build",
    "check_args",
    "get",
    "label",
    "register",
    "rope_frequencies",
]
