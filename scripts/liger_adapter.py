"""Liger-Kernel's RoPE (``liger-kernel`` from PyPI, optional) as the benchmarks' outside peer.

Liger computes the Hugging Face (Llama) rotation on q, k of logical shape (B, H, T, D) with
full-width tables ``cos``/``sin`` of shape (1, T, D) (or (B, T, D)), ``cat(freqs, freqs)``:

    y = x * cos + rotate_half(x) * sin,    rotate_half([x1, x2]) = [-x2, x1]

i.e. ``y1 = x1 c - x2 s``, ``y2 = x2 c + x1 s``: this repository's rotation (``rope/base.py``) with
the sine negated. So our (max_seq_len, R/2) tables become Liger's as ``cos = cat(c, c)`` and
``sin = -cat(s, s)`` (``hf_tables``), which makes Liger compute exactly our function; the
benchmark checks that on the outputs it times.

Liger's launcher transposes (B, H, T, D) back to (B, T, H, D) and calls ``.contiguous()``, then
rotates **in place**. Its zero-copy input is therefore what Hugging Face models hand it: a
(B, T, H, D)-contiguous buffer seen as (B, H, T, D) through ``transpose(1, 2)`` (a (B, H, T, D)-
contiguous tensor would be copied first). :class:`LigerNative` calls it that way, on buffers it
may overwrite. Its arithmetic is in the tables' dtype (HF passes them in the activations' dtype).

The registry's own ``liger`` entry (``rope/liger.py``, what training and ``scripts/bench_step.py``
use) wraps the same kernels for the module API, copying its inputs first (it must not write the
caller's tensors); the kernel benchmark times Liger's kernels natively instead, as a Hugging Face
model calls them.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
from pathlib import Path

import torch
from torch import Tensor

from rope.base import RotaryEmbedding

NAME = "liger"


@functools.lru_cache(maxsize=1)
def liger_rope():
    """``liger_kernel.ops.rope``, or None when liger-kernel cannot be imported.

    ``liger_kernel.ops`` imports every op of the package; should one of those fail with the triton at
    hand, the RoPE file (which needs only torch and triton) is loaded on its own.
    """
    try:
        return importlib.import_module("liger_kernel.ops.rope")
    except Exception:  # ImportError, or another op of the package failing on this triton/CUDA
        pass
    try:
        spec = importlib.util.find_spec("liger_kernel")
        path = Path(next(iter(spec.submodule_search_locations))) / "ops" / "rope.py"
        standalone = importlib.util.spec_from_file_location("_liger_rope_standalone", path)
        module = importlib.util.module_from_spec(standalone)
        standalone.loader.exec_module(module)
        return module
    except Exception:  # not installed at all (spec None), or the RoPE file itself fails
        return None


def unavailable_reason(device: torch.device | str | None = None) -> str | None:
    """None when Liger's RoPE can be imported and run on ``device`` (when given), else a one-line note for the
    report. Liger's kernels are Triton's: on CPU tensors they run only under the interpreter, and without it
    they would fail at the launch with Triton's own message about pointers."""
    if liger_rope() is None:
        return "liger-kernel is not importable (pip install liger-kernel): Liger's columns are left out"
    if device is not None and torch.device(device).type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
        return (f"Liger's kernels run on a CUDA GPU, or on the CPU under Triton's interpreter (TRITON_INTERPRET=1), "
                f"not on {torch.device(device)}: Liger's columns are left out")
    return None


def hf_tables(cos: Tensor, sin: Tensor, dtype: torch.dtype | None = None) -> tuple[Tensor, Tensor]:
    """Our (..., R/2) cos/sin rows as Liger's full-width (..., R) tables: ``cat(c, c)`` and
    ``-cat(s, s)`` (Liger's sine has the opposite sign), contiguous, in ``dtype`` (default: cos's)."""
    dtype = cos.dtype if dtype is None else dtype
    c = torch.cat((cos, cos), dim=-1).to(dtype).contiguous()
    s = torch.cat((-sin, -sin), dim=-1).to(dtype).contiguous()
    return c, s


class LigerNative:
    """Liger's forward and backward kernels called natively, in place, on (B, T, H, D)-contiguous q, k.

    ``module`` supplies the tables (a built RoPE of this repository, half layout, whole-head rotation:
    what Liger computes); ``dtype`` is the tables' dtype (Hugging Face's convention: the activations').
    """

    def __init__(self, module: RotaryEmbedding, dtype: torch.dtype = torch.bfloat16) -> None:
        ops = liger_rope()
        if ops is None:
            raise RuntimeError(unavailable_reason())
        if module.layout != "half" or module.rotary_dim != module.head_dim:
            raise ValueError("Liger rotates half-split pairs of the whole head only")
        self._forward, self._backward = ops.rope_forward, ops.rope_backward
        c, s = hf_tables(module.cos, module.sin, dtype)
        self.cos, self.sin = c[None], s[None]  # (1, max_seq_len, D)
        self._by_len: dict[int, tuple[Tensor, Tensor]] = {}

    def tables(self, T: int, positions: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """(1, T, D) tables for positions ``arange(T)``, or (B, T, D) rows gathered for ``positions``
        (B, T) / (T,) (outside any timed call: Hugging Face computes them once per forward)."""
        if positions is not None:
            pos = positions if positions.dim() == 2 else positions[None]
            return self.cos[0][pos.long()].contiguous(), self.sin[0][pos.long()].contiguous()
        if T not in self._by_len:
            self._by_len[T] = (self.cos[:, :T].contiguous(), self.sin[:, :T].contiguous())
        return self._by_len[T]

    def forward(self, q: Tensor, k: Tensor, cos: Tensor | None = None, sin: Tensor | None = None):
        """Rotate (B, T, H, D)-contiguous q and k in place; returns them, (B, T, H, D)."""
        if cos is None:
            cos, sin = self.tables(q.shape[1])
        yq, yk, _, _ = self._forward(q.transpose(1, 2), k.transpose(1, 2), cos, sin)
        return yq.transpose(1, 2), yk.transpose(1, 2)

    def backward(self, gq: Tensor, gk: Tensor, cos: Tensor | None = None, sin: Tensor | None = None):
        """The transposed rotation (Liger's backward kernel), in place on gq and gk."""
        if cos is None:
            cos, sin = self.tables(gq.shape[1])
        dq, dk = self._backward(gq.transpose(1, 2), gk.transpose(1, 2), cos, sin)
        return dq.transpose(1, 2), dk.transpose(1, 2)
