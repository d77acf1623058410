"""Packed sequences' positions (flash-attn's varlen format), and the cache of tensor-derived values that keeps them.

Why a module of their own: :meth:`rope.base.RotaryEmbedding.forward` turns ``cu_seqlens`` into positions with
:func:`packed_positions_once`, and the Triton launch keeps its element tables in a :class:`TensorCache`; neither
needs the module class. It imports nothing of ``rope``: :mod:`rope.base` re-exports its public names, which would
be an import cycle if this module imported that one.
"""

from __future__ import annotations

import weakref

import torch
from torch import Tensor


def _same_device(a: torch.device, b: torch.device) -> bool:
    """``cuda`` and ``cuda:0`` (the current device) name the same device."""
    if a.type != b.type:
        return False
    if a.type != "cuda" or (a.index is not None and b.index is not None):
        return a.index == b.index or a.type != "cuda" and None in (a.index, b.index)
    current = torch.cuda.current_device()
    return (current if a.index is None else a.index) == (current if b.index is None else b.index)


class TensorCache:
    """Values derived from tensors, kept while those tensor objects are alive and unchanged in place.

    Why: some derived values are worth computing once and reusing call after call (the flat tiling's
    element tables from a module's cos/sin buffers; packed positions, whose check synchronises with the
    device, from the cu_seqlens every layer of a step shares). A key is the tensors' ids plus ``extra``; a
    hit needs each stored weak reference to still be that object (a dead one never matches a new tensor
    given the old one's id) and its version counter unchanged (no in-place change since). The oldest of
    ``entries`` goes first. Not for inference tensors, which keep no version counter (:meth:`usable`); the
    callers keep nothing while tracing either (the values are then graph values).
    """

    def __init__(self, entries: int) -> None:
        self.entries = entries
        self._store: dict[tuple, tuple] = {}

    @staticmethod
    def usable(*tensors: Tensor) -> bool:
        """Whether values of these tensors can be kept: not for inference tensors (no version counter)."""
        return not any(t.is_inference() for t in tensors)

    def get(self, tensors: tuple[Tensor, ...], extra: tuple = ()) -> object | None:
        """The value kept for these tensor objects (unchanged since) and ``extra``, or None."""
        hit = self._store.get((tuple(map(id, tensors)), extra))
        if hit is None:
            return None
        refs, versions, value = hit
        if all(r() is t for r, t in zip(refs, tensors, strict=True)) and versions == tuple(t._version for t in tensors):
            return value
        return None

    def put(self, tensors: tuple[Tensor, ...], extra: tuple, value: object) -> None:
        key = (tuple(map(id, tensors)), extra)
        if len(self._store) >= self.entries and key not in self._store:
            self._store.pop(next(iter(self._store)))
        self._store[key] = (tuple(weakref.ref(t) for t in tensors), tuple(t._version for t in tensors), value)


#: :func:`packed_positions_once`'s positions: a few, the packed batches of one step, each shared by every layer.
_PACKED = TensorCache(8)


def packed_positions_once(cu_seqlens: Tensor, total: int, max_seq_len: int,
                          seqlen_offsets: Tensor | int | None = None, device: torch.device | None = None) -> Tensor:
    """:func:`packed_positions`, computed and checked once per ``cu_seqlens`` tensor.

    Why: the check reads the values back to the host, a synchronisation that drains the GPU's queue, and
    every attention layer of a step passes the same ``cu_seqlens`` (flash-attn's varlen convention), and
    that wait would otherwise cost more than the rotation itself. Later calls with the same tensor objects,
    unchanged since (their version counters), and the same total, table length and device reuse the
    positions: no synchronisation, no kernel but the rotation (:class:`TensorCache`: not kept while tracing
    or for inference tensors).
    """
    off_is_tensor = isinstance(seqlen_offsets, Tensor)
    tensors = (cu_seqlens, seqlen_offsets) if off_is_tensor else (cu_seqlens,)
    if torch.compiler.is_compiling() or not isinstance(cu_seqlens, Tensor) or not TensorCache.usable(*tensors):
        return packed_positions(cu_seqlens, total, max_seq_len, seqlen_offsets, device)
    extra = (None if off_is_tensor else seqlen_offsets, total, max_seq_len, str(device))
    positions = _PACKED.get(tensors, extra)
    if positions is None:
        positions = packed_positions(cu_seqlens, total, max_seq_len, seqlen_offsets, device)
        _PACKED.put(tensors, extra, positions)
    return positions


def packed_positions(cu_seqlens: Tensor, total: int, max_seq_len: int,
                     seqlen_offsets: Tensor | int | None = None, device: torch.device | None = None) -> Tensor:
    """The (total,) int32 position of every token of packed sequences: its index in its sequence,
    plus the sequence's offset.

    The values are checked (start 0, non-decreasing, end ``total``, longest position below
    ``max_seq_len``) in one host-device synchronisation: a packed batch changes every step, and a
    wrong ``cu_seqlens`` would otherwise rotate silently by wrong positions. Under ``torch.compile`` the same
    checks are an assert the device raises (no synchronisation, no graph break: ``fullgraph=True`` works).
    """
    if not isinstance(cu_seqlens, Tensor) or cu_seqlens.dtype not in (torch.int32, torch.int64) \
            or cu_seqlens.dim() != 1 or cu_seqlens.numel() < 2:
        raise ValueError("cu_seqlens must be a 1-D int32/int64 tensor of n_seq + 1 cumulative starts, got "
                         f"{getattr(cu_seqlens, 'dtype', type(cu_seqlens).__name__)} "
                         f"{tuple(getattr(cu_seqlens, 'shape', ()))}")
    device = cu_seqlens.device if device is None else torch.device(device)
    if not _same_device(cu_seqlens.device, device):
        raise ValueError(f"cu_seqlens must be on q's device {device}, got {cu_seqlens.device}")
    n_seq = cu_seqlens.numel() - 1
    cu = cu_seqlens.long()
    if seqlen_offsets is None:
        offsets = torch.zeros(n_seq, dtype=torch.long, device=device)
    elif isinstance(seqlen_offsets, int) and not isinstance(seqlen_offsets, bool):
        offsets = torch.full((n_seq,), seqlen_offsets, dtype=torch.long, device=device)
    elif isinstance(seqlen_offsets, Tensor) and not seqlen_offsets.is_floating_point() \
            and seqlen_offsets.dtype != torch.bool and seqlen_offsets.shape == (n_seq,) \
            and _same_device(seqlen_offsets.device, device):
        offsets = seqlen_offsets.long()
    else:
        raise ValueError(f"seqlen_offsets must be an int or an int tensor of shape (n_seq,)=({n_seq},) on "
                         f"{device}, got {seqlen_offsets!r}")
    # The positions are queued before the one synchronisation that checks the values, so that after it
    # only the caller's kernel is left to launch (a slow host would otherwise launch every kernel behind the
    # sync, with the GPU idle). Indices are clamped so that bad values, refused below,
    # never index out of bounds on the way.
    tokens = torch.arange(total, device=device)
    # The sequence of each token: the number of starts <= it, less one (cu[0] = 0 is <= every token).
    # Searched in the whole of ``cu``, never a slice of it: Inductor's searchsorted ignored a sliced
    # boundary tensor's offset (pytorch/pytorch#182343), so under torch.compile on CUDA (torch 2.11)
    # ``searchsorted(cu[1:], ...)`` came out one too high and indexed past ``offsets``.
    seq = (torch.searchsorted(cu, tokens, right=True) - 1).clamp_(0, n_seq - 1)
    positions = (tokens - cu[seq] + offsets[seq]).int()
    lengths = cu[1:] - cu[:-1]
    checks = torch.stack([cu[0], (lengths < 0).sum(), cu[-1], (offsets + lengths.clamp(min=1) - 1).max(),
                          offsets.min()])
    if torch.compiler.is_compiling():
        # In a compiled graph a read to the host would break the graph and wait for the GPU at every call: the same
        # checks as one assert that the device raises (on a GPU, a device-side assert: the CUDA context is lost).
        ok = (checks[0] == 0) & (checks[1] == 0) & (checks[2] == total) & (checks[3] < max_seq_len) & (checks[4] >= 0)
        torch._assert_async(ok, f"cu_seqlens must start at 0, never decrease and end at total_tokens={total}, and "
                                f"the packed positions (with seqlen_offsets) lie in [0, max_seq_len={max_seq_len})")
        return positions
    first, decreasing, last, top, low = checks.tolist()
    if first != 0 or decreasing or last != total:
        raise ValueError(f"cu_seqlens must start at 0, never decrease and end at total_tokens={total} "
                         f"(q.shape[0]); got start {first}, end {last}, {decreasing} decreasing step(s)")
    if low < 0 or top >= max_seq_len:
        raise ValueError(f"packed positions must lie in [0, max_seq_len={max_seq_len}): the longest sequence plus "
                         f"its offset reaches {top}" + (f", an offset is {low}" if low < 0 else ""))
    return positions
