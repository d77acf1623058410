"""Liger-Kernel's RoPE kernels called as a Hugging Face model calls them: the kernel benchmark's outside peer.

Liger rotates q, k of logical shape (B, H, T, D) with full-width tables ``cos``/``sin`` of shape (1, T, D),
``cat(freqs, freqs)``, as ``y = x cos + rotate_half(x) sin`` with ``rotate_half([x1, x2]) = [-x2, x1]``: this
project's rotation (``rope/base.py``) with the sine negated. So a module's (max_seq_len, D/2) tables become
Liger's as ``cat(c, c)`` and ``-cat(s, s)``, and Liger computes exactly our function (the benchmark checks its
outputs against the reference like every other entry's).

Liger's launcher transposes (B, H, T, D) back to (B, T, H, D), makes it contiguous and rotates it **in place**:
its zero-copy input is a (B, T, H, D)-contiguous buffer seen through ``transpose(1, 2)``, which is what
:class:`LigerNative` hands it. It computes in the tables' dtype, which Hugging Face gives the activations' dtype.
The registry's ``liger`` entry (``rope/liger.py``) wraps the same kernels behind copies of its inputs (it must not
write the caller's tensors), so it is not the peer a kernel benchmark should time.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
from pathlib import Path

import torch
from torch import Tensor

NAME = "liger"


@functools.lru_cache(maxsize=1)
def liger_rope():
    """Liger's ``ops/rope.py`` loaded on its own (it needs torch and triton only), else ``liger_kernel.ops.rope``;
    None when neither can be imported.

    Why on its own: importing the package imports its every op and backend (4 s on a CPU, torch's compiler
    among them), and any one of those failing with the triton at hand would hide a RoPE kernel that works.
    """
    try:
        spec = importlib.util.find_spec("liger_kernel")
        path = Path(next(iter(spec.submodule_search_locations))) / "ops" / "rope.py"
        standalone = importlib.util.spec_from_file_location("_liger_rope_standalone", path)
        module = importlib.util.module_from_spec(standalone)
        standalone.loader.exec_module(module)
        return module
    except Exception:  # not installed (spec None), or the file moved or needs more of its package
        pass
    try:
        return importlib.import_module("liger_kernel.ops.rope")
    except Exception:  # ImportError, or another op of the package failing on this triton
        return None


def unavailable_reason(device: torch.device) -> str | None:
    """None when Liger's kernels can run on ``device``, else a one-line reason (its kernels are Triton's: on CPU
    tensors they run only under the interpreter)."""
    if liger_rope() is None:
        return "liger-kernel is not importable (pip install liger-kernel)"
    if device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
        return f"Liger's kernels need a CUDA GPU or TRITON_INTERPRET=1, not {device}"
    return None


class LigerNative:
    """Liger's forward and backward kernels, in place, on (B, T, H, D)-contiguous tensors, with the tables of
    ``module`` (a built RoPE of this project, half layout, whole head: what Liger computes) in ``dtype``."""

    def __init__(self, module: torch.nn.Module, dtype: torch.dtype) -> None:
        ops = liger_rope()
        if ops is None:
            raise RuntimeError(unavailable_reason(torch.device("cpu")))
        if module.layout != "half" or module.rotary_dim != module.head_dim:
            raise ValueError("Liger rotates half-split pairs of the whole head only")
        self._forward, self._backward = ops.rope_forward, ops.rope_backward
        self.cos = torch.cat((module.cos, module.cos), dim=-1).to(dtype)[None].contiguous()
        self.sin = torch.cat((-module.sin, -module.sin), dim=-1).to(dtype)[None].contiguous()

    def tables(self, T: int) -> tuple[Tensor, Tensor]:
        """(1, T, D) tables of positions 0..T-1 (Hugging Face computes them once per forward, outside the kernel)."""
        return self.cos[:, :T].contiguous(), self.sin[:, :T].contiguous()

    def forward(self, q: Tensor, k: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor]:
        yq, yk, _, _ = self._forward(q.transpose(1, 2), k.transpose(1, 2), cos, sin)
        return yq.transpose(1, 2), yk.transpose(1, 2)

    def backward(self, gq: Tensor, gk: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor]:
        dq, dk = self._backward(gq.transpose(1, 2), gk.transpose(1, 2), cos, sin)
        return dq.transpose(1, 2), dk.transpose(1, 2)
