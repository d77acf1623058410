"""Inputs in every memory layout, and the kernel test case runner, shared by the RoPE test files.

``make_inputs`` / ``make_positions`` / ``output_grads`` build the inputs of the conformance test and
of the Triton tests (CPU interpreter and GPU); ``run_case`` and ``assert_precise`` are the Triton
tests' checks against the ``torch`` reference computing in float64.
"""

from __future__ import annotations

import torch

import rope
from rope._numerics import ulp

DTYPE_NAMES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}
LAYOUTS = ("contiguous", "qkv", "gqa", "transposed", "strided_d")
POSITIONS = ("none", "t", "bt", "bt_int32")
FLOAT32_ATOL = 2e-6


def make_inputs(layout: str, B: int, T: int, HQ: int, HK: int, D: int, dtype: torch.dtype,
                device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """q, k (B, T, H, D) in the requested memory layout; they (or their base) require grad."""
    if layout == "qkv":  # views of a fused projection, as the model makes them
        qkv = torch.randn(B, T, 3 * HQ * D, device=device).to(dtype).requires_grad_()
        q, k, _ = qkv.view(B, T, 3, HQ, D).unbind(2)
        return q, k
    if layout == "gqa":  # the split views of a fused projection with fewer k heads
        qkv = torch.randn(B, T, (HQ + 2 * HK) * D, device=device).to(dtype).requires_grad_()
        q, k, _ = qkv.split([HQ * D, HK * D, HK * D], dim=-1)
        return q.view(B, T, HQ, D), k.view(B, T, HK, D)
    if layout == "transposed":  # (B, H, T, D) storage seen as (B, T, H, D)
        q = torch.randn(B, HQ, T, D, device=device).to(dtype).transpose(1, 2)
        k = torch.randn(B, HK, T, D, device=device).to(dtype).transpose(1, 2)
        return q.requires_grad_(), k.requires_grad_()
    if layout == "strided_d":  # last-dim stride 2
        q = torch.randn(B, T, HQ, 2 * D, device=device).to(dtype)[..., ::2]
        k = torch.randn(B, T, HK, 2 * D, device=device).to(dtype)[..., 1::2]
        return q.requires_grad_(), k.requires_grad_()
    assert layout == "contiguous"
    q = torch.randn(B, T, HQ, D, device=device).to(dtype).requires_grad_()
    k = torch.randn(B, T, HK, D, device=device).to(dtype).requires_grad_()
    return q, k


def make_positions(kind: str, B: int, T: int, max_seq_len: int, device: torch.device) -> torch.Tensor | None:
    """None (arange(T)), a (T,) permutation of cache rows, or (B, T) random rows (int64 or int32)."""
    if kind == "none":
        return None
    if kind == "t":
        return torch.randperm(max_seq_len, device=device)[:T]
    dtype = torch.int32 if kind == "bt_int32" else torch.int64
    return torch.randint(0, max_seq_len, (B, T), device=device, dtype=dtype)


def output_grads(shape_q, shape_k, dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Random output gradients; q's is non-contiguous so the backward reads strides too."""
    B, T, HQ, D = shape_q
    gq = torch.randn(B, HQ, T, D, device=device).to(dtype).transpose(1, 2)
    gk = torch.randn(*shape_k, device=device).to(dtype)
    return gq, gk


def assert_precise(out: torch.Tensor, ref64: torch.Tensor, dtype: torch.dtype, what: str) -> None:
    """triton_v4's bound: float32 within 2e-6 absolute; bf16/fp16 within one ulp of ref64 rounded once."""
    assert out.dtype == dtype and out.shape == ref64.shape, f"{what}: got {out.dtype} {tuple(out.shape)}"
    assert not out.isnan().any(), f"{what}: {int(out.isnan().sum())} elements not written (NaN poison left)"
    if dtype == torch.float32:
        err = (out.double() - ref64).abs().max().item()
        assert err <= FLOAT32_ATOL, f"{what}: max abs error {err:.3g} > {FLOAT32_ATOL}"
        return
    r = ref64.to(dtype)
    diff = (out.double() - r.double()).abs()
    bad = diff > ulp(r, dtype)
    assert not bad.any(), (
        f"{what}: {int(bad.sum())} of {bad.numel()} elements more than one {dtype} ulp from the float64 reference, "
        f"worst {(diff / ulp(r, dtype)).max().item():.2f} ulp"
    )


def build_poisoned(name: str, D: int, max_seq_len: int, device: torch.device, **options) -> rope.RotaryEmbedding:
    """``rope.build(...)`` on ``device`` with the NaN-poison test hook on (unwritten outputs show as NaN)."""
    r = rope.build(name, D, max_seq_len, **options).to(device)
    r.poison_outputs = True
    return r


def _check_pass_through(yq, yk, q, k, D: int) -> None:
    """variant=partial: the zero-frequency quarter of each half passes through bit for bit."""
    quarter = D // 4
    for y, x in ((yq, q), (yk, k)):
        assert torch.equal(y[..., quarter : 2 * quarter], x[..., quarter : 2 * quarter].detach())
        assert torch.equal(y[..., 3 * quarter :], x[..., 3 * quarter :].detach())


def _check_low_precision(impl, dtype, variant, D, max_seq_len, device, q, k, pos, grads, got) -> None:
    """triton_v2 on bf16/fp16: exactly the torch reference computing in the input dtype."""
    low = rope.build("torch", D, max_seq_len, variant=variant, compute_dtype=DTYPE_NAMES[dtype]).to(device)
    ql, kl = q.detach().clone().requires_grad_(), k.detach().clone().requires_grad_()
    lq, lk = low(ql, kl, positions=pos)
    ldq, ldk = torch.autograd.grad((lq, lk), (ql, kl), grads)
    for name, y, want in zip(("yq", "yk", "dq", "dk"), got, (lq, lk, ldq, ldk), strict=True):
        assert y.dtype == dtype
        assert torch.equal(y, want), f"{name}: max diff {(y.double() - want.double()).abs().max().item():.3g}"


#: Entries that compute in float32 and round once: within one ulp of the float64 formula in any dtype.
PRECISE = ("triton_v4", "cutedsl")


def run_case(impl: str, dtype: torch.dtype, variant: str, layout: str, pos_kind: str, B: int, T: int, HQ: int,
             HK: int, D: int, device: torch.device, max_seq_len: int | None = None) -> None:
    """Forward and backward of ``impl`` against the float64 reference (and v2 against torch's low precision)."""
    max_seq_len = max_seq_len or T + 5
    r = build_poisoned(impl, D, max_seq_len, device, variant=variant)
    ref = rope.build("torch", D, max_seq_len, variant=variant, compute_dtype="float64").to(device)
    q, k = make_inputs(layout, B, T, HQ, HK, D, dtype, device)
    pos = make_positions(pos_kind, B, T, max_seq_len, device)
    yq, yk = r(q, k, positions=pos)
    gq, gk = output_grads(yq.shape, yk.shape, dtype, device)
    dq, dk = torch.autograd.grad((yq, yk), (q, k), (gq, gk))

    q64, k64 = q.detach().double().requires_grad_(), k.detach().double().requires_grad_()
    rq, rk = ref(q64, k64, positions=pos)
    rdq, rdk = torch.autograd.grad((rq, rk), (q64, k64), (gq.double(), gk.double()))
    for name, y in (("yq", yq), ("yk", yk), ("dq", dq), ("dk", dk)):
        assert not y.isnan().any(), f"{name}: {int(y.isnan().sum())} elements not written (NaN poison left)"
    if variant == "partial":
        _check_pass_through(yq, yk, q, k, D)
    if impl in PRECISE or dtype == torch.float32:
        assert_precise(yq, rq, dtype, "q forward")
        assert_precise(yk, rk, dtype, "k forward")
        assert_precise(dq, rdq, dtype, "q backward")
        assert_precise(dk, rdk, dtype, "k backward")
    else:
        _check_low_precision(impl, dtype, variant, D, max_seq_len, device, q, k, pos, (gq, gk), (yq, yk, dq, dk))
