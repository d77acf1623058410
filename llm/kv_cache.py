"""The keys and values of the tokens a model has already seen, for incremental decoding.

Why: generating token n+1 by running the whole prefix again costs O(n) per token in every layer;
keeping each layer's (rotated) keys and values turns a decode step into one position through the
model. Both caches here are preallocated for ``max_len`` positions (no reallocation per token) and live
outside the model, so the training path, which never passes one, is untouched.

* :class:`KVCache` (``cache=dynamic``): attention reads the first ``length`` positions, a Python offset
  that each step's shapes follow. Simple, and eager only: a step's shapes change every token.
* :class:`StaticKVCache` (``cache=static``): attention reads the whole buffer, masked by the new tokens'
  positions, and a decode step reads its position from device memory. Nothing in a step depends on a host
  value, so the step can be captured once as a CUDA graph and replayed for every token
  (:class:`llm.generation.static.StaticDecoder`).

One offset (``length``) serves the whole batch: the rows of a batch are decoded in lockstep, and the
new tokens sit at absolute positions ``length .. length + T - 1``, which is what RoPE rotates them by
(its ``positions=`` argument). Keys are stored rotated. ``attention`` says how a cached step attends:
``"sdpa"`` (the model rotates q and k, then ``F.scaled_dot_product_attention``) or ``"fused_rope"``
(``rope.attention_with_rope``: the new keys rotated into the cache, the queries rotated inside the
attention kernel); a prefill from an empty cache is SDPA's either way.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

import rope
from llm.checks import is_positive_int

#: How a cached step attends (see the module docstring).
ATTENTIONS = ("sdpa", "fused_rope")


def _check_step(buffers: Tensor | None, k: Tensor) -> None:
    """Refuse new keys that the cache's buffers cannot hold, in one line before anything is written: a batch of
    another size (broadcast into the buffers, it would overwrite other rows' keys before failing in attention) or
    another dtype (autocast on for some steps, off for others: cast silently, or a torch error inside the step)."""
    if buffers is None:
        return
    if k.shape[0] != buffers.shape[1]:
        raise ValueError(f"KV cache holds a batch of {buffers.shape[1]} rows; this step has {k.shape[0]}: a cache "
                         "serves one batch (start a new cache for another)")
    if k.dtype != buffers.dtype:
        raise ValueError(f"KV cache holds {buffers.dtype} keys; this step's are {k.dtype}: run every step of a cache "
                         "in one dtype (autocast on for all of them or for none)")


def attended(keys: Tensor, values: Tensor) -> tuple[Tensor, Tensor]:
    """The cached keys and values a step attends over: views of the buffers, or copies where autograd records the
    step, because later steps write into the buffers and attention's backward would read what they wrote."""
    if keys.requires_grad or values.requires_grad:
        return keys.clone(), values.clone()
    return keys, values


def _check_cache_args(n_layer: int, max_len: int, attention: str) -> None:
    for name, value in (("n_layer", n_layer), ("max_len", max_len)):
        if not is_positive_int(value):
            raise ValueError(f"KV cache {name} must be a positive int, got {value!r}")
    if attention not in ATTENTIONS:
        raise ValueError(f"KV cache attention must be one of {', '.join(ATTENTIONS)}, got {attention!r}")


class _Cache:
    """What both caches share: their arguments, how full they are, and when a step attends through the kernel."""

    def __init__(self, n_layer: int, max_len: int, attention: str = "sdpa") -> None:
        _check_cache_args(n_layer, max_len, attention)
        self.n_layer, self.max_len, self.attention = n_layer, max_len, attention
        self.length = 0  # positions cached so far (the same for every row and layer)
        self.keys: Tensor | None = None
        self.values: Tensor | None = None

    def check_room(self, T: int) -> None:
        """Refuse a step that would run past ``max_len`` (the caller stops generating before this)."""
        if self.length + T > self.max_len:
            raise ValueError(f"KV cache full: {self.length} cached + {T} new positions > max_len={self.max_len}")

    def fused(self, T: int) -> bool:
        """Whether a step of ``T`` new tokens attends through ``rope.attention_with_rope``: with
        ``attention="fused_rope"``, after cached tokens, 1 to the kernel's chunk length (an empty step is SDPA's,
        which returns an empty output where the kernel takes no empty query chunk)."""
        return self.attention == "fused_rope" and self.length > 0 and 0 < T <= rope.ATTENTION_MAX_QUERIES

    def advance(self, T: int) -> None:
        """Count the ``T`` positions every layer has now written."""
        self.length += T


class KVCache(_Cache):
    """Keys and values of ``n_layer`` attention layers for up to ``max_len`` positions.

    Buffers are (n_layer, B, n_kv_head, max_len, head_dim), the layout scaled-dot-product attention
    reads, allocated on the first write in the dtype of the keys written (float32, or bfloat16 under
    autocast). :meth:`layer` gives one layer its view; the model calls :meth:`advance` once all layers
    have written a step.
    """

    static = False

    def positions(self, T: int, device: torch.device) -> Tensor:
        """Absolute positions of the next ``T`` tokens, shape (T,), for RoPE's ``positions=``."""
        return torch.arange(self.length, self.length + T, device=device)

    def layer(self, index: int) -> LayerKV:
        return LayerKV(self, index)

    def write(self, index: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Store layer ``index``'s new (B, T, H_kv, D) keys and values after the cached ones; return
        every cached key and value of the layer so far, (B, H_kv, length + T, D) views."""
        B, T, H, D = k.shape
        _check_step(self.keys, k)
        if self.keys is None:
            shape = (self.n_layer, B, H, self.max_len, D)
            self.keys = k.new_empty(shape)
            self.values = v.new_empty(shape)
        end = self.length + T
        self.keys[index, :, :, self.length:end] = k.transpose(1, 2)
        self.values[index, :, :, self.length:end] = v.transpose(1, 2)
        return attended(self.keys[index, :, :, :end], self.values[index, :, :, :end])


class _LayerHandle:
    """What a layer's handle on either cache shares: the cache, the layer's index, where its new tokens start."""

    def __init__(self, cache: KVCache | StaticKVCache, index: int) -> None:
        self.cache, self.index = cache, index

    @property
    def start(self) -> int:
        return self.cache.length

    def fused(self, T: int) -> bool:
        return self.cache.fused(T)


class LayerKV(_LayerHandle):
    """One layer's handle on a :class:`KVCache`: where its new tokens start, and where they go."""

    cache: KVCache

    def write(self, k: Tensor, v: Tensor, positions: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Store the new keys and values after the cached ones (``positions`` are those, not needed here)."""
        return self.cache.write(self.index, k, v)

    def update(self, k: Tensor, v: Tensor, positions: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor | None,
                                                                                     bool]:
        """Store the new keys and values; return what SDPA attends over: the cached keys and values,
        ``attn_mask`` and ``is_causal`` (:func:`rope.causal_mask`: the prompt causal, one new token unmasked, a
        chunk after cached tokens under the diagonal shifted by where it starts)."""
        start = self.start
        keys, values = self.write(k, v)
        mask, causal = rope.causal_mask(start, k.shape[1], k.device)
        return keys, values, mask, causal

    def rope_positions(self, positions: Tensor) -> int:
        """The new tokens' positions as ``rope.attention_with_rope`` takes them: the host offset (no tensor
        to read, and the kernel reads no key beyond the last new one)."""
        return self.start


class StaticKVCache(_Cache):
    """Every layer's keys and values in buffers allocated once, the whole buffer attended under a mask, and a
    decode step's position in device memory: a decode step with no host value in it, which a CUDA graph can
    capture and replay.

    Buffers are (n_layer, B, n_kv_head, capacity, head_dim), ``capacity`` being ``max_len`` rounded up to a
    multiple of 64 (aligned rows for the attention kernels' masks), zero-filled (masked keys then weigh
    exactly 0, never NaN times 0) and allocated on the first write in the keys' dtype. ``step_position`` (1,)
    holds the position of a one-token step: :meth:`positions` fills it eagerly; a captured step reads what
    the caller filled in before the replay (:meth:`prepare_step`).
    """

    static = True

    def __init__(self, n_layer: int, max_len: int, attention: str = "sdpa") -> None:
        super().__init__(n_layer, max_len, attention)
        self.capacity = -(-max_len // 64) * 64
        self.step_position: Tensor | None = None
        self.mask: Tensor | None = None  # this step's additive (T, capacity) SDPA mask (sdpa, after a prefill)
        self._key_index: Tensor | None = None

    def allocate(self, batch: int, n_kv_head: int, head_dim: int, dtype: torch.dtype, device: torch.device) -> None:
        """Allocate the buffers (the first write does, with the keys' shape and dtype)."""
        shape = (self.n_layer, batch, n_kv_head, self.capacity, head_dim)
        self.keys = torch.zeros(shape, dtype=dtype, device=device)
        self.values = torch.zeros(shape, dtype=dtype, device=device)
        self.step_position = torch.zeros(1, dtype=torch.long, device=device)
        self._key_index = torch.arange(self.capacity, device=device)

    def reset(self) -> None:
        """Start new sequences (the buffers, and a graph capturing them, are kept)."""
        self.length = 0

    def prepare_step(self) -> None:
        """Write the next one-token step's position into ``step_position`` (before a captured step's replay)."""
        self.step_position.fill_(self.length)

    def positions(self, T: int, device: torch.device) -> Tensor:
        """Positions of the next ``T`` tokens, (T,) int64 on ``device``; also this step's SDPA mask.

        A one-token step after the prompt reads ``step_position``, filled here unless a CUDA graph is being
        captured (then the replay's caller fills it: :meth:`prepare_step`)."""
        if T == 1 and self.step_position is not None:
            if not _capturing():
                self.prepare_step()
            # where autograd records the step it saves the positions, which the next step's fill would change
            positions = self.step_position.clone() if torch.is_grad_enabled() else self.step_position
        else:
            positions = torch.arange(self.length, self.length + T, device=device)
        if self._key_index is not None and self.length > 0 and not self.fused(T):
            # every SDPA step after the prompt needs the mask (fused_rope's chunks longer than its kernel takes too);
            # additive, in the cache's dtype: SDPA would convert a boolean mask in every layer
            hidden = self._key_index[None, :] > positions[:, None]
            self.mask = torch.zeros(hidden.shape, dtype=self.keys.dtype, device=device).masked_fill_(hidden, -math.inf)
        return positions

    def layer(self, index: int) -> StaticLayerKV:
        return StaticLayerKV(self, index)


class StaticLayerKV(_LayerHandle):
    """One layer's handle on a :class:`StaticKVCache`."""

    cache: StaticKVCache

    def write(self, k: Tensor, v: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
        """Store the new (B, T, H_kv, D) keys and values at ``positions`` (the step's, from
        :meth:`StaticKVCache.positions`); return the layer's whole buffers, (B, H_kv, capacity, D)."""
        cache = self.cache
        _check_step(cache.keys, k)
        if cache.keys is None:
            B, _, H, D = k.shape
            cache.allocate(B, H, D, k.dtype, k.device)
        keys, values = cache.keys[self.index], cache.values[self.index]
        keys.index_copy_(2, positions, k.transpose(1, 2))
        values.index_copy_(2, positions, v.transpose(1, 2))
        return attended(keys, values)

    def update(self, k: Tensor, v: Tensor, positions: Tensor) -> tuple[Tensor, Tensor, Tensor | None, bool]:
        """Store the new keys and values at ``positions``; return what SDPA attends over. A prefill from an empty
        cache attends over its own keys (causal); any later step over the whole buffer under this step's mask."""
        keys, values = self.write(k, v, positions)
        if self.start == 0:
            return k.transpose(1, 2), v.transpose(1, 2), None, True
        return keys, values, self.cache.mask, False

    def rope_positions(self, positions: Tensor) -> Tensor:
        """The new tokens' positions as ``rope.attention_with_rope`` takes them: the device tensor (a captured
        step has no host value to give), with the whole buffer: the kernel reads each row's keys up to its
        position."""
        return positions


def _capturing() -> bool:
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()
