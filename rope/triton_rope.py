"""Triton rotary embeddings: ``triton_v4`` (float32 math) and ``triton_v2`` (input-dtype math).

Both entries run the one kernel of :mod:`rope._triton_kernels` (a constexpr picks the arithmetic):

* ``triton_v4`` loads in the input dtype, computes in float32 and rounds once at the store;
* ``triton_v2`` rounds every product and sum to the input dtype (bf16/fp16 math, the lower
  precision seed kernel); on float32 inputs it runs the v4 arithmetic and so equals v4 exactly.

q and k are rotated in one launch, forward and backward (the backward is the transposed rotation
of the output gradients). In eager mode the launches go through a ``torch.autograd.Function``;
under ``torch.compile`` through the custom ops ``ropelab::rope_fwd`` and ``ropelab::rope_bwd``
(``torch.library``) with fake implementations and registered autograd, so a model using them
compiles without graph breaks. Strided views (such as the q and k halves of a fused ``qkv``
projection) are read in place, never copied. Design notes and H100 numbers: ``docs/kernels.md``.

Without an importable ``triton`` the names stay registered and building one raises a RuntimeError
that says triton is needed.
"""

from __future__ import annotations

import os

import torch
from torch import Tensor

from rope.base import RotaryEmbedding
from rope.registry import register

try:
    from rope import _triton_kernels as _kernels
except ImportError as exc:  # triton not installed (or broken): keep the names, fail at build
    _kernels = None
    _TRITON_ERROR: Exception | None = exc
else:
    _TRITON_ERROR = None

_SUPPORTED = (torch.float32, torch.bfloat16, torch.float16)

#: Test hook: fill freshly allocated outputs with NaN before each launch, so an element the kernel
#: fails to write cannot go unnoticed.
POISON_OUTPUTS = False

#: Overrides of :func:`launch_config` ("sub", "heads", "max_bt", "num_warps"); the benchmark's tuning sweep sets them.
_TUNE: dict = {}
_CONFIGS: dict = {}


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


def _next_pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


def launch_config(hq: int, hk: int, head_dim: int, partial: bool, seq_len: int = 1 << 30) -> dict:
    """Block sizes of one launch: tokens per program BT, heads per program BHQ/BHK, warps.

    A program's tile is BT tokens x BH heads x (rotated part RP + pass-through part PP) of one
    tensor. BH is the head count rounded up to a power of two (a token's heads are one contiguous
    run of memory), capped so that a sub-tile BT x BH x RP holds about ``sub`` = 512 elements;
    BT fills the rest. 512 elements and 4 warps won the H100 sweep (docs/kernels.md) on every
    benchmark shape; larger tiles lost 2-8%.
    """
    t_cap = _next_pow2(min(max(seq_len, 1), 1 << 10))
    key = (hq, hk, head_dim, partial, t_cap, tuple(sorted(_TUNE.items())))
    cfg = _CONFIGS.get(key)
    if cfg is not None:
        return cfg
    half = head_dim // 2
    nrot = head_dim // 4 if partial else half
    rp = _next_pow2(nrot)
    pp = _next_pow2(half - nrot) if half > nrot else 1
    sub = _TUNE.get("sub", 512)
    cap = max(1, sub // rp)
    if _TUNE.get("heads") == "div":  # the largest power of two dividing the head count (none masked)
        bhq, bhk = min(max(hq, 1) & -max(hq, 1), cap), min(max(hk, 1) & -max(hk, 1), cap)
    else:  # heads rounded up to a power of two: a token's heads are one contiguous run
        bhq, bhk = min(_next_pow2(max(hq, 1)), cap), min(_next_pow2(max(hk, 1)), cap)
    bt = max(1, min(_TUNE.get("max_bt", 64), t_cap, sub // (rp * max(bhq, bhk))))
    warps = _TUNE.get("num_warps", 4)
    cfg = {"BT": bt, "BHQ": bhq, "BHK": bhk, "RP": rp, "PP": pp, "HAS_PASS": half > nrot, "num_warps": warps}
    _CONFIGS[key] = cfg
    return cfg


def _check_device(name: str, x: Tensor) -> None:
    if not (x.is_cuda or _interpreting()):
        raise ValueError(
            f"{name} is on {x.device}: the Triton RoPE kernels need CUDA tensors "
            "(or TRITON_INTERPRET=1 set before triton is imported, to run them on the CPU interpreter)"
        )


def launch(
    q: Tensor,
    k: Tensor | None,
    cos: Tensor,
    sin: Tensor,
    positions: Tensor | None,
    partial: bool,
    low_precision: bool,
    inverse: bool,
    out_q: Tensor | None = None,
    out_k: Tensor | None = None,
) -> tuple[Tensor, Tensor | None]:
    """Rotate (``inverse``: rotate back) q and k in one kernel launch; new (B, T, H, D) outputs.

    Inputs are used in place with their strides (no copies). ``out_q``/``out_k`` (tests) receive
    the results instead of fresh tensors. Shapes and dtypes are assumed valid (the module checks).
    """
    if _kernels is None:
        raise RuntimeError(
            f"the Triton RoPE kernels need the `triton` package, which failed to import: {_TRITON_ERROR}"
        )
    B, T, HQ, D = q.shape
    HK = k.shape[2] if k is not None else 0
    if out_q is None:
        out_q = torch.empty((B, T, HQ, D), dtype=q.dtype, device=q.device)
        if POISON_OUTPUTS:
            out_q.fill_(float("nan"))
    if k is not None and out_k is None:
        out_k = torch.empty((B, T, HK, D), dtype=k.dtype, device=k.device)
        if POISON_OUTPUTS:
            out_k.fill_(float("nan"))
    ntok = B * T
    if ntok == 0 or (HQ == 0 and HK == 0) or D == 0:
        return out_q, out_k

    cfg = launch_config(HQ, HK, D, partial, T)
    bt, bhq, bhk = cfg["BT"], cfg["BHQ"], cfg["BHK"]
    nhb_q = triton_cdiv(HQ, bhq)
    nhb = nhb_q + triton_cdiv(HK, bhk)
    ntb = triton_cdiv(T, bt)
    grid = (B * ntb * nhb,)
    if grid[0] >= 2**31:
        raise ValueError(f"too many programs for one launch: B={B}, T={T}, heads {HQ}+{HK}")
    kk, ok = (k, out_k) if k is not None else (q, out_q)  # k absent: no program reads these
    if positions is not None:
        if positions.dtype not in (torch.int32, torch.int64):
            positions = positions.long()
        pos, (spb, spt) = positions, (positions.stride() if positions.dim() == 2 else (0, positions.stride(0)))
    else:
        pos, spb, spt = cos, 0, 0
    emulate = _interpreting()
    _kernels.rope_kernel[grid](
        q, kk, out_q, ok, cos, sin, pos,
        *q.stride(), *kk.stride(), *out_q.stride(), *ok.stride(), spb, spt, cos.stride(0),
        ntb, T, HQ, HK, nhb_q, nhb, D // 2, D // 4 if partial else D // 2,
        BT=bt, BHQ=bhq, BHK=bhk, RP=cfg["RP"], PP=cfg["PP"], HAS_PASS=cfg["HAS_PASS"],
        HAS_POS=positions is not None, LOW=bool(low_precision) and q.dtype != torch.float32,
        INVERSE=bool(inverse), EMULATE=emulate, num_warps=cfg["num_warps"],
    )  # fmt: skip
    return out_q, out_k


def triton_cdiv(a: int, b: int) -> int:
    return -(-a // b)


# -- custom ops: opaque to torch.compile, with fake shapes and autograd ----------------------------
_SCHEMA = (
    "(Tensor q, Tensor? k, Tensor cos, Tensor sin, Tensor? positions, bool partial, bool low_precision)"
    " -> (Tensor, Tensor)"
)


def _empty_k(q: Tensor) -> Tensor:
    return q.new_empty((0,))


@torch.library.custom_op("ropelab::rope_fwd", mutates_args=(), schema=_SCHEMA)
def rope_fwd(q, k, cos, sin, positions, partial, low_precision):
    """Rotated (q, k); k's slot holds an empty tensor when k is None."""
    yq, yk = launch(q, k, cos, sin, positions, partial, low_precision, inverse=False)
    return yq, _empty_k(q) if yk is None else yk


@torch.library.custom_op("ropelab::rope_bwd", mutates_args=(), schema=_SCHEMA)
def rope_bwd(q, k, cos, sin, positions, partial, low_precision):
    """The transposed rotation of (q, k): the gradients of :func:`rope_fwd`."""
    yq, yk = launch(q, k, cos, sin, positions, partial, low_precision, inverse=True)
    return yq, _empty_k(q) if yk is None else yk


def _fake(q, k, cos, sin, positions, partial, low_precision):
    yk = _empty_k(q) if k is None else torch.empty(k.shape, dtype=k.dtype, device=k.device)
    return torch.empty(q.shape, dtype=q.dtype, device=q.device), yk


torch.library.register_fake("ropelab::rope_fwd")(_fake)
torch.library.register_fake("ropelab::rope_bwd")(_fake)


def _setup_context(ctx, inputs, output):
    q, k, cos, sin, positions, partial, low_precision = inputs
    ctx.save_for_backward(cos, sin, positions)
    ctx.has_k = k is not None
    ctx.partial = partial
    ctx.low_precision = low_precision


def _grads(op, ctx, gq, gk):
    cos, sin, positions = ctx.saved_tensors
    dq, dk = op(gq, gk if ctx.has_k else None, cos, sin, positions, ctx.partial, ctx.low_precision)
    return dq, dk if ctx.has_k else None, None, None, None, None, None


def _fwd_backward(ctx, gq, gk):
    return _grads(rope_bwd, ctx, gq, gk)


def _bwd_backward(ctx, gq, gk):
    return _grads(rope_fwd, ctx, gq, gk)


torch.library.register_autograd("ropelab::rope_fwd", _fwd_backward, setup_context=_setup_context)
torch.library.register_autograd("ropelab::rope_bwd", _bwd_backward, setup_context=_setup_context)


# -- eager path: a plain autograd.Function (less host overhead than the custom-op dispatch) ----------
class _RopeFunction(torch.autograd.Function):
    """(q, k) -> rotated (q, k); the backward is the same Function with the rotation inverted."""

    @staticmethod
    def forward(ctx, q, k, cos, sin, positions, partial, low_precision, inverse):
        ctx.save_for_backward(cos, sin, positions)
        ctx.args = (k is not None, partial, low_precision, inverse)
        return launch(q, k, cos, sin, positions, partial, low_precision, inverse)

    @staticmethod
    def backward(ctx, gq, gk):
        cos, sin, positions = ctx.saved_tensors
        has_k, partial, low_precision, inverse = ctx.args
        dq, dk = _RopeFunction.apply(
            gq, gk if has_k else None, cos, sin, positions, partial, low_precision, not inverse
        )
        return dq, dk, None, None, None, None, None, None


# -- the registry entries ---------------------------------------------------------------------------
class _TritonRotary(RotaryEmbedding):
    low_precision = False

    def __init__(self, head_dim: int, max_seq_len: int, base: float = 10000.0, variant: str = "partial") -> None:
        if _kernels is None:
            raise RuntimeError(
                f"RoPE implementation {self.registry_name!r} needs the `triton` package "
                f"(pip install triton), which could not be imported: {_TRITON_ERROR}"
            )
        super().__init__(head_dim, max_seq_len, base, variant)

    def describe(self) -> dict:
        return {**super().describe(), "compute_dtype": "input" if self.low_precision else "float32"}

    def rotate(self, q: Tensor, k: Tensor | None, positions: Tensor | None) -> tuple[Tensor, Tensor | None]:
        if q.dtype not in _SUPPORTED:
            raise TypeError(f"{self.registry_name} supports float32, bfloat16 and float16 inputs, got {q.dtype}")
        if not torch.compiler.is_compiling():
            _check_device("q", q)
            if k is not None:
                _check_device("k", k)
            if positions is not None:
                _check_device("positions", positions)
        if self.cos.device != q.device:
            raise ValueError(
                f"the cos/sin tables are on {self.cos.device} but q is on {q.device}: move the module with .to()"
            )
        partial = self.variant == "partial"
        if torch.compiler.is_compiling():  # the custom op: traced through its fake, no graph break
            yq, yk = rope_fwd(q, k, self.cos, self.sin, positions, partial, self.low_precision)
            return yq, (yk if k is not None else None)
        return _RopeFunction.apply(q, k, self.cos, self.sin, positions, partial, self.low_precision, False)


@register("triton_v4")
class TritonRotaryV4(_TritonRotary):
    """Precise Triton RoPE: input-dtype loads, float32 math, one rounding at the store."""

    low_precision = False


@register("triton_v2")
class TritonRotaryV2(_TritonRotary):
    """Triton RoPE in the input dtype's arithmetic (bf16/fp16); equals ``triton_v4`` on float32."""

    low_precision = True
