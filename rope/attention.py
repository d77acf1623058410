"""``RoPEAttention``: multi-head causal self-attention with rotary embeddings, for any model.

The seed repo's drop-in layer: ``attn = RoPEAttention(d_model, n_heads, impl="triton_v4")`` maps
(B, T, d_model) to (B, T, d_model). Its RoPE module comes from the registry, so every implementation
(``rope.available()``) computes the same function and ``impl`` only picks the kernel; the q and k
rotations run on views of one fused projection, which the Triton entries rotate without copies and
whose gradient they write in one buffer.

Decoding one token at a time: ``cache = attn.new_cache()`` and ``y = attn(x_new, cache=cache)``.
The layer stores the rotated keys and values of the tokens it has seen and rotates the new q and k
at their absolute positions (RoPE's ``positions=``), so ``x`` fed in pieces gives the outputs of
the whole sequence fed at once. With ``attention="fused_rope"`` a cached call (up to 256 new tokens after
cached ones) rotates only the new keys and attends through :func:`rope.attention_with_rope`, which rotates
the queries inside the attention kernel; a call autograd records (outside ``torch.no_grad()``, with parameters
that require grad) attends through SDPA, which has a backward. A cached call that fails leaves the cache as it was.

A cache holds one layer's keys: the layer that made it (:meth:`RoPEAttention.new_cache`), or the first that used it,
owns it, and another layer's call with it is refused (one cache passed to every layer of a model would interleave
their keys and answer wrongly without an error). ``n_kv_heads`` (grouped-query attention) gives k and v fewer heads
than q; the cache then holds ``n_kv_heads`` heads. ``scaling`` is ``rope.build``'s position scaling (YaRN, ...).
"""

from __future__ import annotations

import warnings
import weakref

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from rope._launch import triton_runs_on
from rope.base import RotaryEmbedding, split_qkv
from rope.functional import build_named
from rope.fused_attention import MAX_HEAD_DIM, MAX_QUERIES, attention_with_rope

#: How a call with a cache attends (see the module docstring).
ATTENTIONS = ("sdpa", "fused_rope")


class KVCache:
    """One :class:`RoPEAttention` layer's keys and values, for up to ``max_len`` positions.

    Preallocated on the first write, (B, n_kv_heads, max_len, head_dim) in the keys' dtype and device,
    so a decode step copies one position instead of concatenating the whole past. Owned by the layer that made it
    (``attn.new_cache()``) or, made directly, by the first that uses it: another layer's call with it is refused.
    """

    def __init__(self, max_len: int) -> None:
        if isinstance(max_len, bool) or not isinstance(max_len, int) or max_len <= 0:
            raise ValueError(f"max_len must be a positive int, got {max_len!r}")
        self.max_len = max_len
        self.length = 0  # positions stored so far
        self.keys: Tensor | None = None
        self.values: Tensor | None = None
        # a weak reference, so that a cache kept around does not keep its layer (and its weights) alive
        self._owner: weakref.ref[RoPEAttention] | None = None

    def bind(self, layer: RoPEAttention) -> None:
        """Make ``layer`` the owner of this cache where it has none (:meth:`reset` keeps the owner)."""
        if self._owner is None:
            self._owner = weakref.ref(layer)

    def check(self, B: int, T: int, dtype: torch.dtype | None = None, *, heads: int | None = None,
              head_dim: int | None = None, layer: RoPEAttention | None = None) -> None:
        """Refuse ``T`` new positions of a batch of ``B`` (keys of ``dtype``, ``heads`` heads of ``head_dim``, from
        ``layer``; None: not checked) that this cache cannot take, in one line saying what to do.

        Its buffers, once allocated, keep their batch size, dtype and heads (:meth:`reset` keeps them too): another
        needs a new cache, never a silent cast or torch's broadcasting error from the buffer write. A layer other
        than the owner is refused even where the shapes agree: a cache shared by several layers would hold their
        keys in turn, and each layer would attend over the others' without an error.
        """
        if layer is not None and self._owner is not None and self._owner() is not layer:
            raise ValueError("cache: this KVCache holds the keys of another RoPEAttention layer; make one per layer "
                             "with attn.new_cache()")
        if self.length + T > self.max_len:
            raise ValueError(f"KV cache full: {self.length} cached + {T} new positions > max_len={self.max_len}")
        if self.keys is None:
            return
        if self.keys.shape[0] != B:
            raise ValueError(f"the cache holds a batch of {self.keys.shape[0]} sequences, got {B}: a cache keeps its "
                             "batch size (reset() too); make a new one with attn.new_cache()")
        if dtype is not None and dtype != self.keys.dtype:
            raise TypeError(f"the cache holds {self.keys.dtype} keys and values, got {dtype} (the layer's dtype "
                            "changed?): a cache keeps its dtype; make a new one with attn.new_cache()")
        H, D = self.keys.shape[1], self.keys.shape[3]
        got = (H if heads is None else heads, D if head_dim is None else head_dim)
        if got != (H, D):
            raise ValueError(f"the cache holds keys of {H} heads of size {D}, got {got[0]} heads of size {got[1]}: "
                             "a cache holds one layer's keys; make one per layer with attn.new_cache()")

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Store the new (B, T, H, D) rotated keys and values after the cached ones; return all of
        them as (B, H, length, D) views. Checked (:meth:`check`) before anything is written."""
        B, T, H, D = k.shape
        self.check(B, T, k.dtype, heads=H, head_dim=D)
        if self.keys is None:
            self.keys = k.new_empty((B, H, self.max_len, D))
            self.values = v.new_empty((B, H, self.max_len, D))
        end = self.length + T
        self.keys[:, :, self.length:end] = k.transpose(1, 2)
        self.values[:, :, self.length:end] = v.transpose(1, 2)
        self.length = end
        keys, values = self.keys[:, :, :end], self.values[:, :, :end]
        if keys.requires_grad or values.requires_grad:  # autograd records the call: later appends write into the
            return keys.clone(), values.clone()  # buffers, and attention's backward would read what they wrote
        return keys, values

    def reset(self) -> None:
        """Start a new sequence (the buffers are kept, and with them the batch size, dtype and owner)."""
        self.length = 0


def causal_mask(start: int, T: int, device: torch.device) -> tuple[Tensor | None, bool]:
    """``(attn_mask, is_causal)`` for ``T`` queries at positions ``start ..`` over keys ``0 .. start + T - 1``.

    SDPA's ``is_causal`` aligns its mask to the top left, right when queries and keys start together
    (``start == 0``); one new query may see every key; a chunk after cached keys needs the diagonal
    shifted by ``start``.
    """
    if start == 0:
        return None, True
    if T == 1:
        return None, False
    return torch.ones(T, start + T, dtype=torch.bool, device=device).tril(diagonal=start), False


@torch._disable_dynamo
def _attention_with_rope(q: Tensor, keys: Tensor, values: Tensor, start: int, rotary: RotaryEmbedding) -> Tensor:
    """:func:`rope.attention_with_rope`, left out of ``torch.compile``'s tracing: Dynamo would follow its launch
    code (Triton's interpreter, the direct launch) and fail, so a compiled model breaks its graph here and runs the
    call eagerly. (``torch._disable_dynamo`` is ``torch.compiler.disable`` importing Dynamo at the first call,
    not when ``rope`` is imported.)"""
    return attention_with_rope(q, keys, values, start, rotary)


class RoPEAttention(nn.Module):
    """Multi-head causal self-attention whose q and k are rotated by RoPE ``impl``.

    ``d_model`` must split into ``n_heads`` heads of a size the rotation takes (even; a multiple of 4
    for ``variant="partial"``, the seed's rotation and the default). ``dropout`` applies to the
    attention weights in training mode. ``theta`` is the RoPE base, ``max_seq_len`` the rows of its
    cos/sin table (the longest sequence, cache included). ``attention``: how a call with a cache attends,
    ``"sdpa"`` or ``"fused_rope"`` (see the module docstring; training with dropout stays SDPA's; the fused
    kernel needs a CUDA GPU or Triton's interpreter). ``n_kv_heads`` (default ``n_heads``, dividing it): the heads
    of k and v, each shared by ``n_heads / n_kv_heads`` query heads. ``scaling``: position scaling as
    ``rope.build`` takes it (``{"type": "yarn", "factor": 4.0, "original_max_seq_len": 4096}``). Build errors name
    the argument.
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.1, theta: float = 10000.0,
                 impl: str = "triton_v4", *, max_seq_len: int = 4096, variant: str = "partial",
                 bias: bool = False, attention: str = "sdpa", n_kv_heads: int | None = None,
                 scaling: dict | None = None) -> None:
        super().__init__()
        n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
        for name, value in (("d_model", d_model), ("n_heads", n_heads), ("n_kv_heads", n_kv_heads)):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} must be divisible by n_heads={n_heads}")
        if n_heads % n_kv_heads:
            raise ValueError(f"n_kv_heads={n_kv_heads} must divide n_heads={n_heads}")
        if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0 <= dropout < 1:
            raise ValueError(f"dropout must be in [0, 1), got {dropout!r}")
        if attention not in ATTENTIONS:
            raise ValueError(f"attention must be one of {', '.join(ATTENTIONS)}, got {attention!r}")
        if attention == "fused_rope" and d_model // n_heads > MAX_HEAD_DIM:
            raise ValueError(f'attention="fused_rope": heads of d_model/n_heads={d_model // n_heads}; the fused kernel '
                             f'takes heads up to {MAX_HEAD_DIM}, as flash-attention kernels do; attention="sdpa" takes '
                             "any")
        self.attention = attention
        self.d_model, self.n_heads, self.head_dim = d_model, n_heads, d_model // n_heads
        self.n_kv_heads = n_kv_heads
        self.dropout = float(dropout)
        self.rotary = build_named(impl, self.head_dim, max_seq_len, theta, variant, head_dim_name="d_model/n_heads",
                                  seq_len_name="max_seq_len", scaling=scaling)
        self.qkv = nn.Linear(d_model, (n_heads + 2 * n_kv_heads) * self.head_dim, bias=bias)
        self.out = nn.Linear(d_model, d_model, bias=bias)

    def new_cache(self, max_len: int | None = None) -> KVCache:
        """An empty cache for this layer, for up to ``max_len`` positions (default: the RoPE table's); it belongs
        to this layer (another layer's call with it is refused)."""
        max_len = self.rotary.max_seq_len if max_len is None else max_len
        if isinstance(max_len, int) and max_len > self.rotary.max_seq_len:
            raise ValueError(f"max_len={max_len} exceeds the RoPE table's max_seq_len={self.rotary.max_seq_len}")
        cache = KVCache(max_len)
        cache.bind(self)
        return cache

    def forward(self, x: Tensor, cache: KVCache | None = None) -> Tensor:
        """(B, T, d_model) -> (B, T, d_model). With ``cache``, ``x`` holds the tokens after the cached
        ones: they are rotated at their absolute positions and attend to the cached keys too."""
        if not isinstance(x, Tensor) or x.dim() != 3 or x.shape[-1] != self.d_model:
            raise ValueError(f"x must be a (B, T, d_model={self.d_model}) tensor, "
                             f"got {tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__}")
        weight = self.qkv.weight
        if x.device != weight.device or (x.dtype != weight.dtype and not torch.is_autocast_enabled(x.device.type)):
            # torch's own error names neither x nor the layer ("expected m1 and m2 to have the same dtype")
            raise TypeError(f"x is {x.dtype} on {x.device}, the layer's weights {weight.dtype} on {weight.device}: "
                            "move or cast one to the other (attn.to(x)), or run under torch.autocast")
        if cache is not None and not isinstance(cache, KVCache):
            raise TypeError(f"cache must be a KVCache (attn.new_cache(), one per layer) or None, got "
                            f"{type(cache).__name__}")
        B, T, _ = x.shape
        start = 0 if cache is None else cache.length
        # before any work, naming what the caller gave (x, the cache), not the rotation's q and positions
        if cache is not None:
            # every cached call, not only those the kernel takes: the prompt's would succeed, the first step fail
            if self.attention == "fused_rope" and not triton_runs_on(x.device):
                raise ValueError('attention="fused_rope" needs a CUDA GPU (or Triton\'s interpreter on the CPU: '
                                 f'TRITON_INTERPRET=1 set before triton is imported), got x on {x.device}; '
                                 'attention="sdpa" runs anywhere')
            # the keys' dtype: the projection's, unless autocast picks it
            dtype = None if torch.is_autocast_enabled(x.device.type) else self.qkv.weight.dtype
            cache.check(B, T, dtype, heads=self.n_kv_heads, head_dim=self.head_dim, layer=self)
            if self.training and self.dropout > 0:
                # decoding in training mode drops attention weights at random: the steps stop giving what attn(x)
                # gives, with no error to point at the forgotten eval()
                warnings.warn(f"RoPEAttention called with a cache in training mode: dropout={self.dropout} makes "
                              "each step random; call attn.eval() before decoding", stacklevel=2)
        if start + T > self.rotary.max_seq_len:
            cached = f" after {start} cached" if start else ""
            raise ValueError(f"x has T={T} positions{cached} > max_seq_len={self.rotary.max_seq_len}, the rows of "
                             "the layer's RoPE table (build the layer with a larger max_seq_len)")
        if cache is None:
            return self._attend(x, None, 0)
        owner = cache._owner
        cache.bind(self)
        try:
            return self._attend(x, cache, start)
        except BaseException:
            # a call that fails leaves the cache as it was: a retry sees the same past
            cache.length, cache._owner = start, owner
            raise

    def _attend(self, x: Tensor, cache: KVCache | None, start: int) -> Tensor:
        """The layer's output for ``x`` at positions ``start ..``, appending its keys and values to ``cache``."""
        B, T, _ = x.shape
        positions = None if cache is None else torch.arange(start, start + T, device=x.device)
        if cache is not None and self._fused(start, T, x, cache):
            q, k, v = split_qkv(self.qkv(x), self.n_heads, self.n_kv_heads, self.head_dim)
            keys, values = cache.append(self.rotary(k, positions=positions), v)
            y = _attention_with_rope(q, keys, values, start, self.rotary)
            return self.out(y.reshape(B, T, self.d_model))
        q, k, v = self.rotary.rotate_qkv(self.qkv(x), self.n_heads, self.n_kv_heads, positions=positions)
        if cache is None:
            keys, values = k.transpose(1, 2), v.transpose(1, 2)
        else:
            keys, values = cache.append(k, v)
        mask, causal = causal_mask(start, T, x.device)
        y = F.scaled_dot_product_attention(q.transpose(1, 2), keys, values, attn_mask=mask, is_causal=causal,
                                           dropout_p=self.dropout if self.training else 0.0,
                                           enable_gqa=self.n_kv_heads != self.n_heads)
        return self.out(y.transpose(1, 2).reshape(B, T, self.d_model))

    def _fused(self, start: int, T: int, x: Tensor, cache: KVCache) -> bool:
        """Whether a cached call of ``T`` new tokens after ``start`` goes through the fused kernel: not where
        autograd records the call (the kernel has no backward; SDPA computes the same function with one), which
        includes a cache whose buffers an earlier recorded call made part of the graph."""
        records = torch.is_grad_enabled() and (x.requires_grad or any(p.requires_grad for p in self.qkv.parameters())
                                               or bool(cache.keys is not None and cache.keys.requires_grad))
        return (self.attention == "fused_rope" and start > 0 and T <= MAX_QUERIES and not records
                and not (self.training and self.dropout > 0))

    def extra_repr(self) -> str:
        extra = "" if self.n_kv_heads == self.n_heads else f", n_kv_heads={self.n_kv_heads}"
        extra += "" if self.attention == "sdpa" else f", attention={self.attention!r}"
        return f"d_model={self.d_model}, n_heads={self.n_heads}, dropout={self.dropout}{extra}"
