"""The keys and values of the tokens a model has already seen, for incremental decoding.

Why: generating token n+1 by running the whole prefix again costs O(n) per token in every layer;
keeping each layer's (rotated) keys and values turns a decode step into one position through the
model. The cache is preallocated for ``max_len`` positions (no reallocation per token) and lives
outside the model, so the training path, which never passes one, is untouched.

One offset (``length``) serves the whole batch: the rows of a batch are decoded in lockstep, and
the new tokens sit at absolute positions ``length .. length + T - 1``, which is what RoPE rotates
them by (its ``positions=`` argument).
"""

from __future__ import annotations

import torch
from torch import Tensor


class KVCache:
    """Keys and values of ``n_layer`` attention layers for up to ``max_len`` positions.

    Buffers are (n_layer, B, n_kv_head, max_len, head_dim), the layout scaled-dot-product attention
    reads, allocated on the first write in the dtype of the keys written (float32, or bfloat16 under
    autocast). :meth:`layer` gives one layer its view; the model calls :meth:`advance` once all layers
    have written a step.
    """

    def __init__(self, n_layer: int, max_len: int) -> None:
        for name, value in (("n_layer", n_layer), ("max_len", max_len)):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"KVCache {name} must be a positive int, got {value!r}")
        self.n_layer, self.max_len = n_layer, max_len
        self.length = 0  # positions cached so far (the same for every row and layer)
        self.keys: Tensor | None = None
        self.values: Tensor | None = None

    def positions(self, T: int, device: torch.device) -> Tensor:
        """Absolute positions of the next ``T`` tokens, shape (T,), for RoPE's ``positions=``."""
        return torch.arange(self.length, self.length + T, device=device)

    def check_room(self, T: int) -> None:
        """Refuse a step that would run past ``max_len`` (the caller stops generating before this)."""
        if self.length + T > self.max_len:
            raise ValueError(f"KV cache full: {self.length} cached + {T} new positions > max_len={self.max_len}")

    def layer(self, index: int) -> LayerKV:
        return LayerKV(self, index)

    def write(self, index: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Store layer ``index``'s new (B, T, H_kv, D) keys and values after the cached ones; return
        every cached key and value of the layer so far, (B, H_kv, length + T, D) views."""
        B, T, H, D = k.shape
        if self.keys is None:
            shape = (self.n_layer, B, H, self.max_len, D)
            self.keys = k.new_empty(shape)
            self.values = v.new_empty(shape)
        end = self.length + T
        self.keys[index, :, :, self.length:end] = k.transpose(1, 2)
        self.values[index, :, :, self.length:end] = v.transpose(1, 2)
        return self.keys[index, :, :, :end], self.values[index, :, :, :end]

    def advance(self, T: int) -> None:
        """Count the ``T`` positions every layer has now written."""
        self.length += T


class LayerKV:
    """One layer's handle on a :class:`KVCache`: where its new tokens start, and where they go."""

    def __init__(self, cache: KVCache, index: int) -> None:
        self.cache, self.index = cache, index

    @property
    def start(self) -> int:
        return self.cache.length

    def write(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        return self.cache.write(self.index, k, v)
