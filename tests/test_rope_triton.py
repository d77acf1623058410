"""triton_v4 / triton_v2: the real kernels, forward and backward, against the float64 reference.

On a machine without CUDA these run under the Triton interpreter (conftest sets TRITON_INTERPRET),
so the shapes are small; ``test_rope_triton_gpu.py`` runs the same cases at real sizes on a GPU.
Every test draws fresh random inputs (the seed is printed; ROPE_TEST_SEED=n replays one) and every
output the kernels allocate is filled with NaN before the launch, so an unwritten element fails.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import rope
from rope import triton_rope

ROOT = Path(__file__).resolve().parent.parent
IMPLS = ("triton_v4", "triton_v2")
DTYPES = (torch.float32, torch.bfloat16, torch.float16)
DTYPE_NAMES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}
VARIANTS = ("partial", "full")
LAYOUTS = ("contiguous", "qkv", "gqa", "transposed", "strided_d")
POSITIONS = ("none", "t", "bt", "bt_int32")
FLOAT32_ATOL = 2e-6


# -- helpers shared with the GPU tests --------------------------------------------------------------
def ulp(x: torch.Tensor) -> torch.Tensor:
    """Spacing of the bf16/fp16 grid at each element of ``x`` (a tensor of that dtype), as float64."""
    mant, tiny = {torch.bfloat16: (7, 2.0**-133), torch.float16: (10, 2.0**-24)}[x.dtype]
    _, e = torch.frexp(x.double().abs())
    return torch.where(
        x == 0, tiny, torch.clamp(torch.ldexp(torch.ones_like(e, dtype=torch.float64), e - 1 - mant), min=tiny)
    )


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
    bad = diff > ulp(r)
    assert not bad.any(), (
        f"{what}: {int(bad.sum())} of {bad.numel()} elements more than one {dtype} ulp from the float64 reference, "
        f"worst {(diff / ulp(r)).max().item():.2f} ulp"
    )


def make_inputs(layout: str, B: int, T: int, HQ: int, HK: int, D: int, dtype, device):
    """q, k (B, T, H, D) in the requested memory layout, and the leaves that carry their grads."""
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


def make_positions(kind: str, B: int, T: int, max_seq_len: int, device):
    if kind == "none":
        return None
    if kind == "t":
        return torch.randperm(max_seq_len, device=device)[:T]
    dtype = torch.int32 if kind == "bt_int32" else torch.int64
    return torch.randint(0, max_seq_len, (B, T), device=device, dtype=dtype)


def output_grads(shape_q, shape_k, dtype, device):
    """Random output gradients; q's is non-contiguous so the backward reads strides too."""
    B, T, HQ, D = shape_q
    gq = torch.randn(B, HQ, T, D, device=device).to(dtype).transpose(1, 2)
    gk = torch.randn(*shape_k, device=device).to(dtype)
    return gq, gk


def run_case(impl, dtype, variant, layout, pos_kind, B, T, HQ, HK, D, device, max_seq_len=None):
    """Forward and backward of ``impl`` against the float64 reference (and v2 against torch's low precision)."""
    max_seq_len = max_seq_len or T + 5
    r = rope.build(impl, D, max_seq_len, variant=variant).to(device)
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
    if variant == "partial":  # the zero-frequency quarter of each half passes through bit for bit
        quarter = D // 4
        for y, x in ((yq, q), (yk, k)):
            assert torch.equal(y[..., quarter : 2 * quarter], x[..., quarter : 2 * quarter].detach())
            assert torch.equal(y[..., 3 * quarter :], x[..., 3 * quarter :].detach())

    if impl == "triton_v4" or dtype == torch.float32:
        assert_precise(yq, rq, dtype, "q forward")
        assert_precise(yk, rk, dtype, "k forward")
        assert_precise(dq, rdq, dtype, "q backward")
        assert_precise(dk, rdk, dtype, "k backward")
    else:  # triton_v2: exactly the torch reference computing in the input dtype
        low = rope.build("torch", D, max_seq_len, variant=variant, compute_dtype=DTYPE_NAMES[dtype]).to(device)
        ql, kl = q.detach().clone().requires_grad_(), k.detach().clone().requires_grad_()
        lq, lk = low(ql, kl, positions=pos)
        ldq, ldk = torch.autograd.grad((lq, lk), (ql, kl), (gq, gk))
        for name, y, want in (("yq", yq, lq), ("yk", yk, lk), ("dq", dq, ldq), ("dk", dk, ldk)):
            assert y.dtype == dtype
            assert torch.equal(y, want), f"{name}: max diff {(y.double() - want.double()).abs().max().item():.3g}"


# -- fixtures ----------------------------------------------------------------------------------------
@pytest.fixture(autouse=True)
def fresh_seed():
    """A new seed every run (printed, shown on failure); ROPE_TEST_SEED replays one."""
    seed = int(os.environ.get("ROPE_TEST_SEED", "0")) or torch.seed()
    torch.manual_seed(seed)
    print(f"seed={seed} (replay with ROPE_TEST_SEED={seed})")
    return seed


@pytest.fixture(autouse=True)
def poison_outputs(monkeypatch):
    monkeypatch.setattr(triton_rope, "POISON_OUTPUTS", True)


@pytest.fixture
def no_launch(monkeypatch):
    """Fails the test if a kernel is launched: errors must come before any launch."""

    def refuse(*args, **kwargs):
        raise AssertionError("a kernel was launched for input that should have been refused")

    monkeypatch.setattr(triton_rope, "launch", refuse)


# -- forward and backward --------------------------------------------------------------------------
# Every (impl, dtype, variant, layout) with the position kinds taken in turn, plus every
# (layout, positions) pair for triton_v4 on bf16: each case of the issue without the full product.
CASES = [
    (impl, dtype, variant, layout, POSITIONS[i % len(POSITIONS)])
    for i, (impl, dtype, variant, layout) in enumerate(itertools.product(IMPLS, DTYPES, VARIANTS, LAYOUTS))
] + [("triton_v4", torch.bfloat16, "partial", layout, pos) for layout in LAYOUTS for pos in POSITIONS]


def _case_id(case) -> str:
    impl, dtype, variant, layout, pos = case
    return f"{impl}-{DTYPE_NAMES[dtype]}-{variant}-{layout}-pos_{pos}"


@pytest.mark.parametrize("case", CASES, ids=[_case_id(c) for c in CASES])
def test_matches_reference(case, device):
    impl, dtype, variant, layout, pos_kind = case
    hk = 2 if layout == "gqa" else 3
    run_case(impl, dtype, variant, layout, pos_kind, B=2, T=7, HQ=3, HK=hk, D=48, device=device)


@pytest.mark.parametrize(
    "variant,D",
    [("full", d) for d in range(16, 257, 2)] + [("partial", d) for d in range(16, 257, 4)],
)
def test_every_head_dim(variant, D, device):
    run_case("triton_v4", torch.bfloat16, variant, "qkv", "bt", B=1, T=3, HQ=2, HK=2, D=D, device=device)


@pytest.mark.parametrize(
    "HQ,HK,D", [(1, 1, 32), (4, 1, 32), (8, 2, 32), (5, 3, 32), (17, 17, 32), (9, 3, 256), (20, 12, 128)]
)
def test_head_counts(HQ, HK, D, device):
    """Head counts that are no power of two, many rows per token, and k with fewer heads."""
    layout = "contiguous" if HQ == HK else "gqa"
    run_case("triton_v4", torch.bfloat16, "partial", layout, "t", B=1, T=5, HQ=HQ, HK=HK, D=D, device=device)


@pytest.mark.parametrize("T", [1, 13, 33])
def test_token_counts(T, device):
    run_case("triton_v4", torch.float32, "full", "qkv", "none", B=3, T=T, HQ=2, HK=2, D=16, device=device)


@pytest.mark.parametrize("variant", ("partial", "full"))
def test_v2_equals_v4_on_float32(variant, device):
    q = torch.randn(2, 9, 3, 64, device=device)
    k = torch.randn(2, 9, 2, 64, device=device)
    g = torch.randn(2, 9, 3, 64, device=device), torch.randn(2, 9, 2, 64, device=device)
    pos = torch.randint(0, 32, (2, 9), device=device)
    outs = []
    for name in IMPLS:
        r = rope.build(name, 64, 32, variant=variant).to(device)
        qq, kk = q.clone().requires_grad_(), k.clone().requires_grad_()
        y = r(qq, kk, positions=pos)
        outs.append((*y, *torch.autograd.grad(y, (qq, kk), g)))
    for a, b in zip(*outs, strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("impl", IMPLS)
def test_q_alone(impl, device):
    r = rope.build(impl, 32, 16).to(device)
    ref = rope.build("torch", 32, 16, compute_dtype="float64").to(device)
    q = torch.randn(2, 5, 3, 32, device=device, dtype=torch.bfloat16, requires_grad=True)
    y = r(q)
    assert isinstance(y, torch.Tensor) and y.shape == q.shape
    g = torch.randn_like(y)
    (dq,) = torch.autograd.grad(y, q, g)
    q64 = q.detach().double().requires_grad_()
    y64 = ref(q64)
    (dq64,) = torch.autograd.grad(y64, q64, g.double())
    if impl == "triton_v4":
        assert_precise(y, y64, torch.bfloat16, "forward")
        assert_precise(dq, dq64, torch.bfloat16, "backward")


def test_views_are_not_copied(monkeypatch, device):
    """The unbind views of a fused qkv reach the kernel as they are: same storage, same strides."""
    seen = []
    real = triton_rope.launch

    def spy(q, k, *args, **kwargs):
        seen.append((q.data_ptr(), q.stride(), k.data_ptr(), k.stride()))
        return real(q, k, *args, **kwargs)

    monkeypatch.setattr(triton_rope, "launch", spy)
    B, T, H, D = 2, 5, 3, 32
    qkv = torch.randn(B, T, 3 * H * D, device=device, dtype=torch.bfloat16, requires_grad=True)
    q, k, _ = qkv.view(B, T, 3, H, D).unbind(2)
    r = rope.build("triton_v4", D, 8).to(device)
    yq, yk = r(q, k)
    assert seen == [(q.data_ptr(), q.stride(), k.data_ptr(), k.stride())]
    assert not q.is_contiguous() and yq.is_contiguous() and yk.is_contiguous()
    (yq.float().sum() + yk.float().sum()).backward()
    assert len(seen) == 2  # one launch forward (q and k together), one backward


def test_one_launch_for_q_and_k(monkeypatch, device):
    """q and k are rotated by a single kernel launch, forward and backward."""
    calls = []
    kernel = triton_rope._kernels.rope_kernel

    class Counting:
        def __getitem__(self, grid):
            calls.append(grid)
            return kernel[grid]

    monkeypatch.setattr(triton_rope._kernels, "rope_kernel", Counting())
    r = rope.build("triton_v4", 16, 8).to(device)
    q = torch.randn(1, 4, 2, 16, device=device, requires_grad=True)
    k = torch.randn(1, 4, 1, 16, device=device, requires_grad=True)
    yq, yk = r(q, k)
    (yq.sum() + yk.sum()).backward()
    assert len(calls) == 2


def test_launch_writes_every_element(device):
    """Direct launch into caller-provided NaN-filled outputs: every element must be overwritten."""
    r = rope.build("triton_v4", 40, 16, variant="partial").to(device)
    q = torch.randn(2, 11, 3, 40, device=device, dtype=torch.float16)
    k = torch.randn(2, 11, 5, 40, device=device, dtype=torch.float16)
    oq = torch.full_like(q, float("nan"))
    ok = torch.full_like(k, float("nan"))
    for inverse in (False, True):
        triton_rope.launch(q, k, r.cos, r.sin, None, True, False, inverse, out_q=oq, out_k=ok)
        assert not oq.isnan().any() and not ok.isnan().any()
        oq.fill_(float("nan"))
        ok.fill_(float("nan"))


def test_empty_batch(device):
    r = rope.build("triton_v4", 16, 8).to(device)
    q = torch.randn(0, 4, 2, 16, device=device)
    yq, yk = r(q, q)
    assert yq.shape == q.shape and yk.shape == q.shape


# -- errors before any launch -----------------------------------------------------------------------
def _build(impl="triton_v4", D=32, max_seq_len=8, device="cpu", **kw):
    return rope.build(impl, D, max_seq_len, **kw).to(device)


@pytest.mark.parametrize("impl", IMPLS)
def test_cpu_tensor_without_interpreter(impl, monkeypatch, no_launch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    r = _build(impl)
    with pytest.raises(ValueError, match=r"q is on cpu.*CUDA"):
        r(torch.randn(1, 4, 2, 32), torch.randn(1, 4, 2, 32))


@pytest.mark.parametrize(
    "qshape,kshape",
    [((1, 4, 2, 32), (2, 4, 2, 32)), ((1, 4, 2, 32), (1, 3, 2, 32)), ((1, 4, 2, 32), (1, 4, 2, 16))],
    ids=["B", "T", "D"],
)
def test_mismatched_q_k(qshape, kshape, device, no_launch):
    r = _build(device=device)
    with pytest.raises(ValueError):
        r(torch.randn(qshape, device=device), torch.randn(kshape, device=device))


@pytest.mark.parametrize("bad", [-1, 8, 100])
def test_positions_out_of_range(bad, device, no_launch):
    r = _build(device=device)
    pos = torch.arange(4, device=device)
    pos[2] = bad
    with pytest.raises(ValueError, match="positions must lie in"):
        r(torch.randn(1, 4, 2, 32, device=device), torch.randn(1, 4, 2, 32, device=device), positions=pos)


def test_positions_bad_shape_or_dtype(device, no_launch):
    r = _build(device=device)
    q = torch.randn(2, 4, 2, 32, device=device)
    with pytest.raises(ValueError, match="shape"):
        r(q, q, positions=torch.zeros(3, 4, dtype=torch.long, device=device))
    with pytest.raises(TypeError, match="integer"):
        r(q, q, positions=torch.zeros(4, device=device))


def test_sequence_longer_than_cache(device, no_launch):
    r = _build(max_seq_len=4, device=device)
    with pytest.raises(ValueError, match="max_seq_len"):
        r(torch.randn(1, 5, 2, 32, device=device), torch.randn(1, 5, 2, 32, device=device))


@pytest.mark.parametrize("variant,D", [("full", 31), ("partial", 30), ("full", 0)])
@pytest.mark.parametrize("impl", IMPLS)
def test_bad_head_dim(impl, variant, D):
    with pytest.raises(ValueError, match="head_dim"):
        rope.build(impl, D, 8, variant=variant)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.float64])
def test_bad_dtype(dtype, device, no_launch):
    r = _build(device=device)
    x = torch.ones(1, 4, 2, 32, device=device, dtype=dtype)
    with pytest.raises(TypeError):
        r(x, x)


def test_q_k_dtype_mismatch(device, no_launch):
    r = _build(device=device)
    with pytest.raises(TypeError, match="same dtype"):
        r(torch.randn(1, 4, 2, 32, device=device), torch.randn(1, 4, 2, 32, device=device, dtype=torch.bfloat16))


# -- registry, config, compile ----------------------------------------------------------------------
def test_describe():
    assert _build("triton_v4").describe() == {"rope": "triton_v4", "variant": "partial", "compute_dtype": "float32"}
    assert _build("triton_v2", variant="full").describe() == {
        "rope": "triton_v2",
        "variant": "full",
        "compute_dtype": "input",
    }


@pytest.mark.parametrize("impl", IMPLS)
def test_config_file_builds(impl):
    OmegaConf = pytest.importorskip("omegaconf").OmegaConf

    cfg = OmegaConf.load(ROOT / "conf" / "rope" / f"{impl}.yaml")
    assert cfg.name == impl
    opts = {k: v for k, v in cfg.items() if k not in ("name", "base")}
    r = rope.build(cfg.name, 64, 16, base=cfg.base, **opts)
    assert r.registry_name == impl and r.variant == "partial"


def test_without_triton_names_stay_and_build_explains():
    code = (
        "import sys; sys.modules['triton'] = None\n"
        "import rope\n"
        "assert {'triton_v2', 'triton_v4'} <= set(rope.available()), rope.available()\n"
        "for name in ('triton_v2', 'triton_v4'):\n"
        "    try:\n"
        "        rope.build(name, 64, 16)\n"
        "    except RuntimeError as e:\n"
        "        assert 'triton' in str(e) and name in str(e), e\n"
        "    else:\n"
        "        raise SystemExit('build did not fail')\n"
        "print('ok')\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr


def test_custom_ops_opcheck(device):
    r = _build(D=16, device=device)
    q = torch.randn(1, 3, 2, 16, device=device, requires_grad=True)
    k = torch.randn(1, 3, 1, 16, device=device, requires_grad=True)
    pos = torch.tensor([2, 0, 5], device=device)
    for op in (torch.ops.ropelab.rope_fwd.default, torch.ops.ropelab.rope_bwd.default):
        torch.library.opcheck(op, (q, k, r.cos, r.sin, pos, True, False))
        torch.library.opcheck(op, (q, None, r.cos, r.sin, None, False, True))


@pytest.mark.parametrize("impl", IMPLS)
def test_compiles_without_graph_breaks(impl, device):
    """fullgraph tracing through the custom ops (fake shapes + registered autograd), CPU-friendly backend."""
    torch._dynamo.reset()
    r = _build(impl, D=16, max_seq_len=8, device=device)

    def step(qkv, pos):
        B, T, _ = qkv.shape
        q, k, v = qkv.view(B, T, 3, 2, 16).unbind(2)
        q, k = r(q, k, positions=pos)
        return (q * v).sum() + (k * k).sum()

    qkv = torch.randn(2, 6, 96, device=device, requires_grad=True)
    pos = torch.randint(0, 8, (6,), device=device)
    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    loss = compiled(qkv, pos)
    (g,) = torch.autograd.grad(loss, qkv)
    loss_e = step(qkv, pos)
    (g_e,) = torch.autograd.grad(loss_e, qkv)
    torch.testing.assert_close(loss, loss_e)
    torch.testing.assert_close(g, g_e)


# -- the fused-projection entry: rotate_qkv ----------------------------------------------------------
@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16))
@pytest.mark.parametrize("HQ,HK,pos_kind", [(3, 3, "none"), (4, 2, "bt"), (5, 1, "t")])
def test_rotate_qkv_matches_reference(impl, dtype, HQ, HK, pos_kind, device):
    """q, k rotated, v untouched, and d qkv (written in one buffer) against the float64 reference."""
    B, T, D = 2, 7, 48
    r = _build(impl, D=D, max_seq_len=12, device=device)
    ref = _build("torch", D=D, max_seq_len=12, device=device, compute_dtype="float64")
    qkv = torch.randn(B, T, (HQ + 2 * HK) * D, device=device).to(dtype).requires_grad_()
    pos = make_positions(pos_kind, B, T, 12, device)
    yq, yk, v = r.rotate_qkv(qkv, HQ, HK, positions=pos)
    assert v.data_ptr() == qkv.data_ptr() + (HQ + HK) * D * qkv.element_size()  # v is the view itself
    grads = [torch.randn_like(t) for t in (yq, yk, v)]
    (dqkv,) = torch.autograd.grad((yq, yk, v), qkv, grads)
    assert not dqkv.isnan().any(), "d qkv: elements not written (NaN poison left)"

    x64 = qkv.detach().double().requires_grad_()
    rq, rk, rv = ref.rotate_qkv(x64, HQ, HK, positions=pos)
    (rdqkv,) = torch.autograd.grad((rq, rk, rv), x64, [g.double() for g in grads])
    assert torch.equal(v, qkv[..., (HQ + HK) * D :].view(B, T, HK, D))
    if impl == "triton_v4" or dtype == torch.float32:
        assert_precise(yq, rq, dtype, "q forward")
        assert_precise(yk, rk, dtype, "k forward")
        assert_precise(dqkv, rdqkv, dtype, "d qkv")
    else:  # v2: bit for bit the reference in the input dtype, through the same fused entry
        low = _build("torch", D=D, max_seq_len=12, device=device, compute_dtype=DTYPE_NAMES[dtype])
        xl = qkv.detach().clone().requires_grad_()
        lq, lk, lv = low.rotate_qkv(xl, HQ, HK, positions=pos)
        (ldqkv,) = torch.autograd.grad((lq, lk, lv), xl, grads)
        assert torch.equal(yq, lq) and torch.equal(yk, lk) and torch.equal(dqkv, ldqkv)


def test_rotate_qkv_backward_is_one_launch_and_one_buffer(monkeypatch, device):
    """The backward rotates dq and dk in one launch, straight into their slices of d qkv."""
    seen = []
    real = triton_rope.launch

    def spy(q, k, *args, out_q=None, out_k=None, **kwargs):
        seen.append((out_q, out_k))
        return real(q, k, *args, out_q=out_q, out_k=out_k, **kwargs)

    monkeypatch.setattr(triton_rope, "launch", spy)
    r = _build(D=16, device=device)
    qkv = torch.randn(2, 5, 3 * 2 * 16, device=device, requires_grad=True)
    yq, yk, v = r.rotate_qkv(qkv, 2)
    (dqkv,) = torch.autograd.grad((yq.sum() + yk.sum() + v.sum()), qkv)
    assert len(seen) == 2  # forward, backward
    out_q, out_k = seen[1]
    assert out_q.data_ptr() == dqkv.data_ptr() and out_k.data_ptr() == dqkv.data_ptr() + 2 * 16 * 4
    assert torch.equal(dqkv[..., 64:], torch.ones_like(dqkv[..., 64:]))  # v's gradient, copied beside


def test_rotate_qkv_without_grad_or_v_grad(device):
    r = _build(D=16, device=device)
    qkv = torch.randn(1, 4, 3 * 16, device=device)
    with torch.no_grad():
        yq, yk, _ = r.rotate_qkv(qkv.requires_grad_(), 1)
    ref = r(*[t.detach() for t in qkv.view(1, 4, 3, 1, 16).unbind(2)[:2]])
    assert torch.equal(yq, ref[0]) and torch.equal(yk, ref[1])
    yq, yk, v = r.rotate_qkv(qkv, 1)
    (dqkv,) = torch.autograd.grad(yq.sum() + yk.sum(), qkv)  # v unused: its slice of d qkv is zero
    assert torch.equal(dqkv[..., 32:], torch.zeros_like(dqkv[..., 32:]))


@pytest.mark.parametrize(
    "args,match",
    [((torch.randn(1, 4, 90), 2, 1), r"qkv must have shape .*\(B, T, 64\)"),
     ((torch.randn(4, 96), 2, 2), r"qkv must have shape"),
     ((torch.randn(1, 4, 64), 0, 1), r"n_head must be a positive int"),
     ((torch.randn(1, 4, 64), 2, 1.5), r"n_kv_head must be a positive int")],
)
def test_rotate_qkv_bad_input(args, match, no_launch):
    r = _build(D=16)
    with pytest.raises(ValueError, match=match):
        r.rotate_qkv(*args)


@pytest.mark.parametrize("impl", IMPLS)
def test_rotate_qkv_compiles_without_graph_breaks(impl, device):
    """The fused entry under torch.compile(fullgraph=True): custom ops forward and backward."""
    torch._dynamo.reset()
    r = _build(impl, D=16, max_seq_len=8, device=device)

    def step(qkv):
        q, k, v = r.rotate_qkv(qkv, 2, 1)
        return (q * 1.5).sum() + (k * k).sum() + (v * 3.0).sum()

    qkv = torch.randn(2, 6, 64, device=device, requires_grad=True)
    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    (g,) = torch.autograd.grad(compiled(qkv), qkv)
    (g_e,) = torch.autograd.grad(step(qkv), qkv)
    torch.testing.assert_close(g, g_e)
