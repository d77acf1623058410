"""triton_v4 / triton_v2: the real kernels, forward and backward, against the float64 reference.

On a machine without CUDA these run under the Triton interpreter (conftest sets TRITON_INTERPRET),
so the shapes are small; ``test_triton_gpu.py`` runs the same cases at real sizes on a GPU. What
every implementation must do is in ``test_conformance.py``; this file adds what is particular to the
Triton entries: triton_v4's one-ulp bound everywhere, triton_v2 bit for bit the torch reference in the
input dtype, float16, the launch (one for q and k, views not copied, the launch configuration), the
custom ops under torch.compile, and errors raised before any launch. Every test draws fresh random
inputs (the seed is printed; ROPE_TEST_SEED=n replays one) and every output the kernels allocate is
filled with NaN before the launch (the ``poison_outputs`` hook), so an unwritten element fails.
"""

from __future__ import annotations

import dataclasses
import inspect
import itertools
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import FakeGpus

import rope
from rope import triton_rope

from .cases import DTYPE_NAMES, LAYOUTS, POSITIONS, assert_precise, build_poisoned, make_positions, run_case

ROOT = Path(__file__).resolve().parents[2]
IMPLS = ("triton_v4", "triton_v2")
DTYPES = (torch.float32, torch.bfloat16, torch.float16)
VARIANTS = ("partial", "full")


# -- fixtures ----------------------------------------------------------------------------------------
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
        r = build_poisoned(name, 64, 32, device, variant=variant)
        qq, kk = q.clone().requires_grad_(), k.clone().requires_grad_()
        y = r(qq, kk, positions=pos)
        outs.append((*y, *torch.autograd.grad(y, (qq, kk), g)))
    for a, b in zip(*outs, strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("impl", IMPLS)
def test_q_alone(impl, device):
    r = build_poisoned(impl, 32, 16, device)
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
    r = build_poisoned("triton_v4", D, 8, device)
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
    r = build_poisoned("triton_v4", 16, 8, device)
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
    r = build_poisoned("triton_v4", 16, 8, device)
    q = torch.randn(0, 4, 2, 16, device=device)
    yq, yk = r(q, q)
    assert yq.shape == q.shape and yk.shape == q.shape


# -- errors before any launch -----------------------------------------------------------------------
def _build(impl="triton_v4", D=32, max_seq_len=8, device="cpu", **kw):
    return build_poisoned(impl, D, max_seq_len, device, **kw)


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
    """Refused before any launch where the check is free, positions in host memory (the interpreter's CPU
    tensors). On a GPU the range check would cost a synchronisation, so there an out-of-range position gives
    NaN rows instead: test_conformance.py's test_out_of_range_positions_give_nan_rows checks that."""
    if device.type != "cpu":
        pytest.skip("positions on a GPU are not range-checked (a host-device synchronisation); see the docstring")
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
    assert _build("triton_v4").describe() == {"rope": "triton_v4", "variant": "partial", "compute_dtype": "float32",
                                              "layout": "half", "rotary_dim": 32, "scaling": "none"}
    assert _build("triton_v2", variant="full", layout="interleaved", rotary_dim=16).describe() == {
        "rope": "triton_v2",
        "variant": "full",
        "compute_dtype": "input",
        "layout": "interleaved",
        "rotary_dim": 16,
        "scaling": "none",
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
        "import rope, torch\n"
        "assert {'triton_v2', 'triton_v4'} <= set(rope.available()), rope.available()\n"
        "for name in ('triton_v2', 'triton_v4'):\n"
        "    try:\n"
        "        rope.build(name, 64, 16)\n"
        "    except RuntimeError as e:\n"
        "        assert 'triton' in str(e) and name in str(e), e\n"
        "    else:\n"
        "        raise SystemExit('build did not fail')\n"
        "    reason = rope.get(name).unavailable_reason(torch.device('cuda'))\n"
        "    assert reason and 'triton' in reason and name in reason, reason\n"
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
        torch.library.opcheck(op, (q, k, r.cos, r.sin, pos, True, False, 256, 4, True))  # tile, warps, poison
    qkv = torch.randn(1, 3, (2 + 2 * 1) * 16, device=device)  # the fused forward: (B, T, W) or (B T, W)
    for given in (qkv, qkv.flatten(0, 1)):
        torch.library.opcheck(torch.ops.ropelab.rope_qkv_fwd.default, (given, 3, r.cos, r.sin, pos, 2, 1, True, False))


@pytest.mark.parametrize("impl", IMPLS)
def test_traced_ops_equal_custom_ops(impl, device):
    """The triton ops compiled graphs call on the GPU run the same launches as the custom ops (run eagerly
    here: the interpreter cannot be traced), bit for bit, forward, backward and the fused qkv backward."""
    from rope import triton_rope as tr

    if tr.traced_ops() is None:
        pytest.skip("this torch has no torch.library.triton_op")
    r = _build(impl, D=48, max_seq_len=16, device=device)
    low = impl == "triton_v2"
    q = torch.randn(2, 5, 3, 48, device=device, dtype=torch.bfloat16)
    k = torch.randn(2, 5, 1, 48, device=device, dtype=torch.bfloat16)
    gv = torch.randn(2, 5, 1, 48, device=device, dtype=torch.bfloat16)
    pos = torch.randint(0, 16, (5,), device=device)
    _assert_traced_ops_equal((q, k, r.cos, r.sin, pos, True, low), (q, k, gv, r.cos, r.sin, pos, True, low))
    _assert_traced_ops_equal((q, None, r.cos, r.sin, None, False, low, True, 0, 8, False, 1))


def _assert_traced_ops_equal(args: tuple, qkv_args: tuple | None = None) -> None:
    """The triton ops (run eagerly) and the custom ops give the same tensors, bit for bit: forward and backward
    with ``args``, the fused qkv backward with ``qkv_args``; and where q and k are given, the fused qkv forward
    (which the triton op reads through the projection itself, k at its offset: the kernel's KIN) on a projection
    holding them gives the forward's results."""
    from rope import triton_rope as tr

    for custom, traced in ((tr.CUSTOM_OPS.fwd, tr.traced_ops().fwd), (tr.CUSTOM_OPS.bwd, tr.traced_ops().bwd)):
        for a, b in zip(custom(*args), traced(*args), strict=True):
            assert torch.equal(a, b)
    if qkv_args is not None:
        assert torch.equal(tr.CUSTOM_OPS.qkv_bwd(*qkv_args), tr.traced_ops().qkv_bwd(*qkv_args))
    q, k, cos, sin, positions, *flags = args
    if k is None:
        return
    hq, D, hk = q.shape[2], q.shape[3], k.shape[2]
    qkv = torch.cat([q.flatten(2), k.flatten(2), torch.randn_like(k).flatten(2)], dim=-1)
    want = tr.CUSTOM_OPS.fwd(*rope.base.split_qkv(qkv, hq, hk, D)[:2], cos, sin, positions, *flags)
    for op in (tr.CUSTOM_OPS.qkv_fwd, tr.traced_ops().qkv_fwd):
        for given in (qkv, qkv.flatten(0, 1)):  # (B, T, W) or, as the compiled Function hands it, (B T, W)
            for a, b in zip(op(given, q.shape[1], cos, sin, positions, hq, hk, *flags), want, strict=True):
                assert torch.equal(a, b)


#: (head_dim, variant, layout, rotary_dim, (q heads, k heads), LaunchConfig.chunks): one case per tiling the plan
#: takes (rows; chunks, with a copied tail when forced; flat with a tail and GQA; joint flat programs at an odd half
#: and at R2 = 2 mod 8; interleaved rows).
_TILINGS = [
    (48, "partial", "half", None, (3, 3), -1), (40, "full", "half", None, (2, 2), -1),
    (48, "full", "half", 24, (2, 1), 1), (48, "full", "half", 24, (2, 1), -1), (54, "full", "half", None, (2, 2), -1),
    (36, "partial", "half", None, (2, 2), -1), (64, "full", "interleaved", None, (2, 2), -1),
]
_TILING_IDS = ["rows", "chunks", "chunks-tail", "flat-tail-gqa", "joint-odd", "joint-r2", "interleaved"]


@pytest.mark.parametrize("D,variant,layout,rotary_dim,heads,chunks", _TILINGS, ids=_TILING_IDS)
def test_traced_kernel_equals_runtime_kernel(D, variant, layout, rotary_dim, heads, chunks, device):
    """The kernels compiled graphs launch (``rope_kernel_static``, ``copy_heads_kernel_static``: every shape and
    stride a constant) compute what the eager launches compute, bit for bit, in every tiling, with and without
    positions: forward, backward and the fused qkv backward with its copy of v's gradient. (Run eagerly: the
    interpreter cannot be traced; the twins take their integers by name, so a name out of order fails here.)"""
    from rope import triton_rope as tr

    if tr.traced_ops() is None:
        pytest.skip("this torch has no torch.library.triton_op")
    r = _build(D=D, max_seq_len=16, device=device, variant=variant, layout=layout, rotary_dim=rotary_dim)
    (hq, hk), il, partial = heads, layout == "interleaved", r._partial_shortcut
    q = torch.randn(2, 5, hq, D, device=device, dtype=torch.bfloat16)
    k = torch.randn(2, 5, hk, D, device=device, dtype=torch.bfloat16)
    gv = torch.randn(2, 5, hk, D, device=device, dtype=torch.bfloat16).transpose(1, 2).contiguous().transpose(1, 2)
    pos = torch.randint(0, 16, (2, 5), device=device)
    for p in (None, pos):
        _assert_traced_ops_equal((q, k, r.cos, r.sin, p, partial, False, il, 0, 0, True, chunks),
                                 (q, k, gv, r.cos, r.sin, p, partial, False, il, 0, 0, True, chunks))


def test_fused_backward_gives_the_kernel_the_whole_buffer(device, monkeypatch):
    """The fused-qkv backward hands the kernel d qkv itself (``out_buffer``), eagerly and in the triton op
    that Inductor compiles: given dq and dk as two strided views instead, torch 2.11's Inductor clones them
    by reading past a compact temporary (pytorch/pytorch#161115), an illegal address on the H100 (session 16)."""
    from rope import triton_rope as tr

    r = _build("triton_v4", D=48, max_seq_len=16, device=device)
    q = torch.randn(2, 5, 3, 48, device=device, dtype=torch.bfloat16)
    k = torch.randn(2, 5, 1, 48, device=device, dtype=torch.bfloat16)
    gv = torch.randn(2, 5, 1, 48, device=device, dtype=torch.bfloat16)
    buffers, real = [], tr.launch

    def spy(*args, **kwargs):
        buffers.append(kwargs.get("out_buffer"))
        return real(*args, **kwargs)

    monkeypatch.setattr(tr, "launch", spy)
    ops = [tr.CUSTOM_OPS.qkv_bwd] + ([] if tr.traced_ops() is None else [tr.traced_ops().qkv_bwd])
    for op in ops:
        buffers.clear()
        dqkv = op(q, k, gv, r.cos, r.sin, None, True, False)
        assert len(buffers) == 1 and buffers[0] is not None, buffers
        assert (buffers[0].data_ptr(), buffers[0].shape) == (dqkv.data_ptr(), dqkv.shape)


def test_traced_launches_pass_only_what_the_kernel_reads(device, monkeypatch):
    """Under torch.compile every tensor argument of a launch is host time in Inductor's generated code, and each
    view is a ``reinterpret_tensor`` call (5 us a layer more than Inductor's own rotation, session 23): the traced
    fused-qkv forward hands the kernel the projection itself, no view of q or k, and the traced launches pass None
    for the slots no program reads (no positions; k's output slot where both outputs go through one buffer).
    Eagerly the slots keep tensors."""
    from rope import triton_rope as tr

    if tr.traced_ops() is None:
        pytest.skip("this torch has no torch.library.triton_op")
    launched, real = [], tr.LaunchPlan.triton_launch
    monkeypatch.setattr(tr.LaunchPlan, "triton_launch", lambda self, args: launched.append(args) or real(self, args))
    r = _build(D=48, max_seq_len=16, device=device)
    qkv = torch.randn(2, 5, (3 + 2 * 1) * 48, device=device, dtype=torch.bfloat16)
    q, k, _ = rope.base.split_qkv(qkv, 3, 1, 48)
    gv = torch.randn(2, 5, 1, 48, device=device, dtype=torch.bfloat16)
    pos = torch.randint(0, 16, (2, 5), device=device)
    for p in (None, pos):
        launched.clear()
        tr.traced_ops().qkv_fwd(qkv.flatten(0, 1), 5, r.cos, r.sin, p, 3, 1, True, False)
        tr.traced_ops().qkv_bwd(q, k, gv, r.cos, r.sin, p, True, False)
        (fwd_q, fwd_k, *_, fwd_pos), (*_, bwd_ok, _, _, bwd_pos, _) = launched
        assert fwd_q.data_ptr() == qkv.data_ptr() and fwd_q.shape == (10, qkv.shape[2]) and fwd_k is None
        assert bwd_ok is None
        assert fwd_pos is p and bwd_pos is p  # None without positions
    launched.clear()
    tr.CUSTOM_OPS.qkv_bwd(q, k, gv, r.cos, r.sin, None, True, False)
    assert all(a is not None for args in launched for a in args)  # the eager launch (the interpreter's)


@pytest.mark.parametrize("D,variant,layout,rotary_dim,heads,chunks", _TILINGS, ids=_TILING_IDS)
def test_traced_plans_give_every_constexpr(D, variant, layout, rotary_dim, heads, chunks):
    """A traced launch names every constexpr of its static kernel: Inductor compiles a user kernel with the
    constexprs a launch leaves out set to None, not to their defaults (``KIN > 0`` failed to compile on the H100,
    session 24). The rotation (with and without the projection as ``in_buffer``) and the fused backward's copy."""
    from rope import triton_rope as tr

    r = _build(D=D, max_seq_len=16, variant=variant, layout=layout, rotary_dim=rotary_dim)
    (hq, hk), il, partial = heads, layout == "interleaved", r._partial_shortcut
    cfg = tr.LaunchConfig(chunks=chunks)
    qkv = torch.randn(2, 5, (hq + 2 * hk) * D, dtype=torch.bfloat16)
    q, k, v = rope.base.split_qkv(qkv, hq, hk, D)
    dqkv = torch.empty_like(qkv)
    dq, dk, dv = rope.base.split_qkv(dqkv, hq, hk, D)
    plans = [tr.launch_plan(q, k, r.cos, r.sin, p, partial, False, False, interleaved=il, config=cfg, traced=True,
                            in_buffer=buf) for p in (None, torch.zeros(2, 5, dtype=torch.long)) for buf in (None, qkv)]
    plans.append(tr.launch_plan(q, k, r.cos, r.sin, None, partial, False, True, dq, dk, interleaved=il, config=cfg,
                                traced=True, out_buffer=dqkv, copy=(v, dv)))
    assert plans[-1].copies
    for plan in plans:
        kernel = tr._kernels.rope_copy_kernel_static if plan.copies else tr._kernels.rope_kernel_static
        params = list(inspect.signature(kernel.fn).parameters)
        tensors = len(plan.tensors(q, k, q, k, None, r.cos, r.sin, dqkv, v, qkv))
        given = set(tr._by_name(kernel, tensors, plan.ints)) | set(plan.constexprs)
        assert set(params[tensors:]) <= given, set(params[tensors:]) - given


def test_in_buffer_is_for_traced_launches_with_q_at_its_start(device):
    """``launch(in_buffer=...)`` reads k at its offset in the buffer: slices in another order are refused in one
    line, and so is an eager launch (its kernel takes k's pointer)."""
    from rope import triton_rope as tr

    r = _build(D=16, max_seq_len=8, device=device)
    qkv = torch.randn(1, 2, 48, device=device)
    q, k, _ = rope.base.split_qkv(qkv, 1, 1, 16)
    with pytest.raises(ValueError, match="in_buffer is for traced launches"):
        tr.launch(q, k, r.cos, r.sin, None, True, False, False, in_buffer=qkv)
    with pytest.raises(ValueError, match="in_buffer needs q at its start"):
        tr.launch(k, q, r.cos, r.sin, None, True, False, False, traced=True, in_buffer=qkv)


def test_out_buffer_must_hold_q_at_its_start(device):
    """``launch(out_buffer=...)`` writes k's outputs at their offset in the buffer; slices in another order
    are refused in one line instead of being written to the wrong place."""
    from rope import triton_rope as tr

    r = _build(D=16, max_seq_len=8, device=device)
    q, k = torch.randn(1, 2, 2, 16, device=device), torch.randn(1, 2, 1, 16, device=device)
    buf = torch.empty(1, 2, 48, device=device)
    dk, dq = buf[..., :16].view(1, 2, 1, 16), buf[..., 16:].view(1, 2, 2, 16)  # k first: not supported
    with pytest.raises(ValueError, match="out_buffer needs out_q at its start"):
        tr.launch(q, k, r.cos, r.sin, None, True, False, False, out_q=dq, out_k=dk, out_buffer=buf)


def test_new_tables_reach_the_kernel(device):
    """The launch reads the tables through the module's plain references (``_cos_sin``): tables assigned
    after the build, or moved with ``.to()``, are the ones the kernel uses, with and without grad."""
    r = _build(D=16, max_seq_len=8, device=device)
    r.to(device)
    r.cos, r.sin = torch.ones_like(r.cos), torch.zeros_like(r.sin)  # the identity rotation
    q = torch.randn(1, 5, 2, 16, device=device)
    k = torch.randn(1, 5, 1, 16, device=device)
    yq, yk = r(q, k)
    assert torch.equal(yq, q) and torch.equal(yk, k)
    qg = q.clone().requires_grad_()
    yq, _ = r(qg, k)
    assert torch.equal(yq, q)


def test_compiled_ops_choice(device):
    """Compiled graphs take the triton ops only where Inductor can trace the launch (CUDA, not the
    interpreter); inside a dynamic-shape trace the triton ops call the custom ops instead."""
    from rope import triton_rope as tr

    ops = tr.traced_ops()  # here, not in the traced function: Dynamo refuses to trace the ops' definition
    if ops is None:
        pytest.skip("this torch has no torch.library.triton_op")
    x = torch.randn(2, 3, 4, 16, device=device)
    assert tr._compiled_ops(x) is (ops if x.is_cuda else tr.CUSTOM_OPS)  # not on the CPU interpreter
    assert tr._static(x, None)
    r = _build(D=16, max_seq_len=8, device=device)

    def rotate(q, k):
        return ops.fwd(q, k, r.cos, r.sin, None, True, False)

    torch._dynamo.reset()
    q, k = torch.randn(2, 6, 4, 16, device=device), torch.randn(2, 6, 2, 16, device=device)
    compiled = torch.compile(rotate, backend="aot_eager", dynamic=True, fullgraph=True)
    for a, b in zip(compiled(q, k), rotate(q, k), strict=True):  # traced with symbols: the custom op ran
        assert torch.equal(a, b)


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


def test_every_launch_config_field_reaches_the_fused_qkv_launches(monkeypatch, device):
    """The fused-qkv Function (and the compiled ops, which take the same scalars) carries the LaunchConfig as
    scalars: every field reaches the forward's and the backward's launch, none silently the default."""
    seen = []
    real = triton_rope.launch

    def spy(*args, config=None, **kwargs):
        seen.append(config)
        return real(*args, config=config, **kwargs)

    monkeypatch.setattr(triton_rope, "launch", spy)
    r = _build(D=16, device=device)
    cfg = triton_rope.LaunchConfig(tile=512, num_warps=2, chunks=2, streaming=True, tables=1, maxnreg=40,
                                    words=1, block=4, joint=1)
    r.launch_config = cfg
    assert len(r._launch_args()) == len(dataclasses.fields(cfg)) + 2  # and the layout and poison hook
    qkv = torch.randn(2, 5, 3 * 2 * 16, device=device, requires_grad=True)
    yq, yk, v = r.rotate_qkv(qkv, 2)
    torch.autograd.grad((yq.sum() + yk.sum() + v.sum()), qkv)
    assert seen == [cfg, cfg]


@pytest.mark.parametrize("D", (20, 48, 6))
@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16))
def test_copy_heads_copies_any_strides_into_a_slice(D, dtype, device):
    """copy_heads (v's gradient into d qkv): every element of the slice, nothing beside it, from a
    heads-major source as the attention returns it and from a strided view with odd sizes."""
    B, T, H, W = 2, 37, 3, 5 * 3 * D  # several programs (COPY_TILE elements each) at D = 20 and 48
    for src in (torch.randn(B, H, T, D, device=device).to(dtype).transpose(1, 2),  # heads-major
                torch.randn(B, T, 2 * H, D, device=device).to(dtype)[:, :, 1::2]):  # every other head
        buffer = torch.full((B, T, W), float("nan"), device=device, dtype=dtype)
        dst = buffer[..., 2 * H * D : 3 * H * D].view(B, T, H, D)
        triton_rope.copy_heads(src, buffer, dst)
        assert torch.equal(dst, src)
        rest = torch.cat([buffer[..., : 2 * H * D], buffer[..., 3 * H * D :]], dim=-1)
        assert rest.isnan().all(), "copy_heads wrote outside its slice"


def test_rotate_qkv_backward_takes_a_heads_major_v_gradient(device):
    """v's gradient arriving transposed (the attention's (B, H, T, D) layout) lands in d qkv as it came."""
    B, T, HQ, HK, D = 2, 5, 4, 2, 20
    r = build_poisoned("triton_v4", D, 8, device)
    qkv = torch.randn(B, T, (HQ + 2 * HK) * D, device=device, requires_grad=True)
    yq, yk, v = r.rotate_qkv(qkv, HQ, HK)
    wv = torch.randn(B, HK, T, D, device=device)
    (dqkv,) = torch.autograd.grad(yq.sum() + yk.sum() + (v.transpose(1, 2) * wv).sum(), qkv)
    assert torch.equal(dqkv[..., (HQ + HK) * D :].view(B, T, HK, D), wv.transpose(1, 2))
    assert not dqkv.isnan().any()


@pytest.mark.parametrize("D,variant,layout,rotary_dim,heads,chunks", _TILINGS, ids=_TILING_IDS)
@pytest.mark.parametrize("dtype", (torch.bfloat16, torch.float32))
def test_fused_backward_copies_v_in_the_rotation_launch(D, variant, layout, rotary_dim, heads, chunks, dtype, device,
                                                        monkeypatch):
    """The fused-qkv backward's one launch (``rope_copy_kernel``) writes all of d qkv: dq and dk as the backward
    kernel alone rotates them, bit for bit, and v's gradient as it came (heads-major, as the attention returns it),
    in every tiling, with and without positions, poisoned buffers; ``copy_heads`` is not called."""
    from rope import triton_rope as tr

    def no_copy_heads(*args, **kwargs):
        raise AssertionError("v's gradient was copied by a launch of its own")

    B, T = 2, 37  # several programs of each kind, the last ones partial
    r = build_poisoned("triton_v4", D, T, device, variant=variant, layout=layout, rotary_dim=rotary_dim)
    r.launch_config = tr.LaunchConfig(chunks=chunks)
    (hq, hk), il, partial = heads, layout == "interleaved", r._partial_shortcut
    gq = torch.randn(B, T, hq, D, device=device, dtype=dtype)
    gk = torch.randn(B, T, hk, D, device=device, dtype=dtype)
    gv = torch.randn(B, hk, T, D, device=device, dtype=dtype).transpose(1, 2)
    pos = torch.randint(0, T, (B, T), device=device)
    for p in (None, pos):
        want_q, want_k = tr.launch(gq, gk, r.cos, r.sin, p, partial, False, True, interleaved=il,
                                   config=r.launch_config)
        with monkeypatch.context() as m:
            m.setattr(tr, "copy_heads", no_copy_heads)
            dqkv = tr.qkv_backward(gq, gk, gv, r.cos, r.sin, p, partial, False, il, r.launch_config, poison=True)
        dq, dk, dv = (t.reshape(B, T, -1, D) for t in dqkv.split((hq * D, hk * D, hk * D), dim=-1))
        assert torch.equal(dq, want_q) and torch.equal(dk, want_k)
        assert torch.equal(dv, gv)


def test_fused_backward_copies_v_apart_where_the_launch_cannot(device, monkeypatch):
    """Where the plan cannot take the copy (its chunk ids past int32, made to happen here), ``launch`` still
    delivers v's gradient, through ``copy_heads`` after the rotation."""
    from rope import triton_rope as tr

    calls = []
    real_copy_heads = tr.copy_heads

    def spy(*args, **kwargs):
        calls.append(args)
        return real_copy_heads(*args, **kwargs)

    monkeypatch.setattr(tr, "_copy_geometry", lambda *a: None)  # copy_heads then falls back to copy_
    monkeypatch.setattr(tr, "copy_heads", spy)
    r = build_poisoned("triton_v4", 48, 16, device)
    gq, gk = (torch.randn(2, 5, h, 48, device=device, dtype=torch.bfloat16) for h in (3, 1))
    gv = torch.randn(2, 1, 5, 48, device=device, dtype=torch.bfloat16).transpose(1, 2)
    dqkv = tr.qkv_backward(gq, gk, gv, r.cos, r.sin, None, True, False, poison=True)
    assert len(calls) == 1
    assert torch.equal(dqkv[..., 4 * 48:].view(2, 5, 1, 48), gv) and not dqkv.isnan().any()


def test_grad_call_skips_the_function_apply_prologue(monkeypatch, device):
    """With grad, the module call enters the autograd Function without ``Function.apply``'s walk of the
    arguments for dead functorch wrappers (host time, #13), and still differentiates."""
    import torch._functorch.utils as functorch_utils

    def refuse(args):
        raise AssertionError("Function.apply's Python prologue ran on the module call")

    monkeypatch.setattr(functorch_utils, "unwrap_dead_wrappers", refuse)
    r = build_poisoned("triton_v4", 16, 8, device)
    q = torch.randn(1, 4, 2, 16, device=device, requires_grad=True)
    yq, yk = r(q, q)
    (g,) = torch.autograd.grad((yq * yk).sum(), q)
    assert not g.isnan().any()


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


@pytest.mark.parametrize("dynamic", (False, True))
@pytest.mark.parametrize("impl", IMPLS)
def test_rotate_qkv_compiles_without_graph_breaks(impl, dynamic, device):
    """The fused entry under torch.compile(fullgraph=True): custom ops forward and backward, and forward alone
    without grad; with dynamic shapes too (the fused forward op then takes T as a symbol)."""
    torch._dynamo.reset()
    r = _build(impl, D=16, max_seq_len=16, device=device)

    def step(qkv):
        q, k, v = r.rotate_qkv(qkv, 2, 1)
        return (q * 1.5).sum() + (k * k).sum() + (v * 3.0).sum()

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager", dynamic=dynamic)
    for T in (6, 9):
        qkv = torch.randn(2, T, 64, device=device, requires_grad=True)
        (g,) = torch.autograd.grad(compiled(qkv), qkv)
        (g_e,) = torch.autograd.grad(step(qkv), qkv)
        torch.testing.assert_close(g, g_e)
        with torch.no_grad():  # no backward to fuse: the fused forward op alone
            torch.testing.assert_close(compiled(qkv), step(qkv))


# -- per-instance hooks: the launch configuration and the NaN poison ---------------------------------
class _KernelSpy:
    """Stands in for ``rope_kernel``: records each launch's grid and keywords, optionally runs it."""

    def __init__(self, kernel, run: bool, launches: list | None = None) -> None:
        self.kernel, self.run, self.launches = kernel, run, [] if launches is None else launches

    def __getitem__(self, grid):
        def call(*args, **kwargs):
            self.launches.append((grid, kwargs))
            if self.run:
                self.kernel[grid](*args, **kwargs)

        return call


def _spy_rope_kernels(monkeypatch, run: bool) -> _KernelSpy:
    """Spies on both rotation kernels, ``rope_kernel`` and the fused-qkv backward's ``rope_copy_kernel``, recording
    their launches in one list, in launch order (the returned spy's ``launches``)."""
    launches = []
    for name in ("rope_kernel", "rope_copy_kernel"):
        spy = _KernelSpy(getattr(triton_rope._kernels, name), run, launches)
        monkeypatch.setattr(triton_rope._kernels, name, spy)
    return spy


def test_launch_configuration_is_constexpr_row_geometry():
    """The row geometry is compile-time (masks the compiler can see through), the rotated half padded
    to a power of two, and a load holds ``tile`` elements."""
    assert triton_rope.DEFAULT_LAUNCH == triton_rope.LaunchConfig(tile=0, num_warps=0)  # tile by width, warps by tiling
    cfg = triton_rope.launch_config
    rows = {"CHUNKED": False, "V": 1, "NCH": 1, "VP": 1, "MP": 1, "NCP": 1, "STREAM": False, "FLAT": False, "NBP": 128,
            "PAIRED": False, "WORDS": False, "JOINT": False, "VB": 8}
    assert cfg(128, 64, True, False) == {"R2": 64, "CW": 32, "PASS": 0, "INTERLEAVED": False, "HP": 64, "PP": 1,
                                         "BR": 32, "M": 64, "num_warps": 8, **rows}
    assert cfg(16, 8, True, False)["BR"] == 128  # narrow rows: 1024-element loads
    assert cfg(256, 128, False, False, triton_rope.LaunchConfig(4096, 4))["BR"] == 32
    # A rotated width that is not a power of two: chunks of V pairs (every lane busy), a load of
    # NCH chunks holding the tile's 2048 elements; with a copied tail (rotary_dim < D), rows.
    chunks = triton_rope.LaunchConfig(chunks=1)
    assert cfg(48, 24, True, False, chunks) | {"BR": 0} == {
        "R2": 24, "CW": 12, "PASS": 0, "INTERLEAVED": False, "HP": 32, "PP": 1, "BR": 0, "CHUNKED": True, "V": 8,
        "M": 3, "NCH": 256, "VP": 1, "MP": 1, "NCP": 1, "STREAM": False, "num_warps": 8, "FLAT": False, "NBP": 128,
        "PAIRED": False, "WORDS": False, "JOINT": False, "VB": 8}
    assert [(cfg(d, d // 2, True, False, chunks)["V"], cfg(d, d // 2, True, False, chunks)["M"])
            for d in (24, 40, 80, 96)] == [(4, 3), (4, 5), (8, 5), (16, 3)]
    assert [cfg(d, d // 2, True, True)[k] for d in (40, 96) for k in ("V", "NCH")] == [4, 256, 8, 128]
    # By default (measured on the H100): chunks where the pairs come in groups of 4 or fewer, rows where
    # they come in groups of 8 or more (half layout), chunks for every such width interleaved.
    assert [cfg(d, d // 2, True, False)["CHUNKED"] for d in (24, 40, 56, 88, 20, 36)] == [True] * 6
    assert [cfg(d, d // 2, True, False)["CHUNKED"] for d in (48, 80, 96, 112, 160, 240)] == [False] * 6
    assert cfg(48, 24, True, True)["CHUNKED"]
    forced = triton_rope.LaunchConfig(chunks=0)
    # rotary_dim < D, odd rotated halves, (half layout) halves of 2 mod 4 pairs and, with joint programs, of 4 mod 8:
    # the flat tiling by default (rows or chunks where it cannot take the tensors), programs of 1024 elements on 4 warps
    assert cfg(80, 20, False, True) == {"R2": 20, "CW": 20, "PASS": 40, "INTERLEAVED": True, "HP": 32, "PP": 64,
                                        "BR": 32, "M": 20, "num_warps": 4, **rows, "FLAT": True}
    assert [cfg(d, d // 2, False, False)["FLAT"] for d in (18, 22, 50, 28, 44, 124, 20, 36, 40, 56, 48, 64)] == (
        [True] * 10 + [False] * 2)
    assert not cfg(28, 14, False, True)["FLAT"]  # interleaved: chunks
    assert cfg(28, 14, False, False, triton_rope.LaunchConfig(num_warps=8))["num_warps"] == 8  # as asked
    assert not cfg(48, 12, True, False, forced)["FLAT"]  # a forced tiling is kept
    assert not cfg(48, 24, True, False, forced)["CHUNKED"] and cfg(48, 24, True, False, forced)["BR"] == 64
    assert cfg(64, 32, True, False, triton_rope.LaunchConfig(chunks=1))["CHUNKED"]  # forced on a power of two
    assert cfg(64, 32, True, False, triton_rope.LaunchConfig(streaming=True))["STREAM"]
    with pytest.raises(ValueError, match=r"LaunchConfig.chunks must be -1 .*, 0 \(rows\), 1 \(chunks\) or 2 \(flat\), "
                                         "got 3"):
        triton_rope.LaunchConfig(chunks=3)
    flat = cfg(20, 10, True, False, triton_rope.LaunchConfig(chunks=2))  # blocks of 8 elements, 1024 a program
    assert flat["FLAT"] and flat["NBP"] == 128 and flat["CHUNKED"]  # chunks: the geometry's fallback
    # rotary_dim < D: flat by default, rows to fall back on; forced chunks copy the tail in chunks of its own
    assert not cfg(48, 6, True, False)["CHUNKED"] and cfg(48, 6, True, False)["FLAT"]
    tail = cfg(48, 6, True, False, triton_rope.LaunchConfig(chunks=1))
    assert [tail[k] for k in ("V", "M", "VP", "MP", "NCP")] == [2, 3, 4, 9, 512]  # copies: >= 2048-element tiles
    # variant=partial loads the cos/sin of the rotating half only, unless its width is not a multiple
    # of 4 floats (the mask would shorten the 16-byte loads): D=40, 24 then load the whole table row.
    assert [cfg(d, d // 2, True, False)["CW"] for d in (16, 24, 40, 48, 56, 80)] == [4, 12, 20, 12, 28, 20]


@pytest.mark.parametrize("qkv_path", (False, True))
def test_launch_config_is_per_instance(monkeypatch, device, qkv_path):
    """An instance's ``launch_config`` reaches every launch it makes (forward and backward), and
    leaves other instances on the default; the results do not depend on it."""
    spy = _spy_rope_kernels(monkeypatch, run=True)
    tuned, default = _build(D=16, device=device), _build(D=16, device=device)
    tuned.launch_config = triton_rope.LaunchConfig(tile=64, num_warps=2, streaming=True)
    qkv = torch.randn(2, 5, 3 * 2 * 16, device=device, requires_grad=True)
    grads = []
    for r in (tuned, default):
        if qkv_path:
            yq, yk, _ = r.rotate_qkv(qkv, 2)
        else:
            yq, yk = r(*qkv.view(2, 5, 3, 2, 16).unbind(2)[:2])
        grads.append(torch.autograd.grad(yq.sum() + 2 * yk.sum(), qkv))
    assert [(kw["BR"], kw["num_warps"], kw["STREAM"]) for _, kw in spy.launches] == [
        (8, 2, True), (8, 2, True), (128, 8, False), (128, 8, False)]
    assert torch.equal(grads[0][0], grads[1][0])


def test_poison_outputs_fills_what_the_kernel_does_not_write(monkeypatch, device):
    """With the kernel replaced by a no-op, poisoned outputs stay NaN and unpoisoned ones are just
    allocated: the hook is what makes an unwritten element visible (and it is off by default)."""
    spy = _spy_rope_kernels(monkeypatch, run=False)
    r = rope.build("triton_v4", 16, 8).to(device)
    assert r.poison_outputs is False
    q = torch.randn(1, 4, 2, 16, device=device)
    r.poison_outputs = True
    yq, yk = r(q, q)
    assert yq.isnan().all() and yk.isnan().all()
    qkv = torch.randn(1, 4, 3 * 16, device=device, requires_grad=True)
    yq, yk, v = r.rotate_qkv(qkv, 1)
    (dqkv,) = torch.autograd.grad(yq.sum() + yk.sum() + v.sum(), qkv)
    assert dqkv.isnan().all()  # v's gradient too: its copy is programs of the backward's (no-op) launch
    assert len(spy.launches) == 3


@pytest.mark.parametrize("impl", IMPLS)
def test_unavailable_reason(impl, monkeypatch):
    """CUDA: available. CPU: only under the interpreter, else one line that names the way out."""
    cls = rope.get(impl)
    assert cls.unavailable_reason(torch.device("cuda")) is None
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert cls.unavailable_reason(torch.device("cpu")) is None
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    reason = cls.unavailable_reason(torch.device("cpu"))
    assert reason == (f"rope={impl} runs on a CUDA GPU, or on the CPU under Triton's interpreter "
                      "(TRITON_INTERPRET=1, slow); use rope=torch on this machine")
    monkeypatch.delenv("TRITON_INTERPRET")
    assert cls.unavailable_reason("cpu") == reason
    assert rope.get("torch").unavailable_reason(torch.device("cpu")) is None


def test_rotate_transposed_is_the_backward(device):
    """The benchmark's backward-alone entry gives what autograd gives."""
    r = _build(D=16, device=device)
    q = torch.randn(2, 5, 3, 16, device=device, requires_grad=True)
    k = torch.randn(2, 5, 1, 16, device=device, requires_grad=True)
    gq, gk = torch.randn(2, 5, 3, 16, device=device), torch.randn(2, 5, 1, 16, device=device)
    want = torch.autograd.grad(r(q, k), (q, k), (gq, gk))
    got = r.rotate_transposed(gq, gk)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    dq, dk = r.rotate_transposed(gq, None)
    assert torch.equal(dq, want[0]) and dk is None


def test_row_strides_are_passed_in_their_largest_power_of_two_unit():
    """D=24 rows (48 bytes): strides go in units of 8 elements so the kernel knows the rows' alignment."""
    q = torch.empty(2, 3, 4, 24)
    assert triton_rope._row_stride_unit(q) == 8
    assert triton_rope._row_stride_unit(q, torch.empty(2, 3, 4, 128)) == 8
    assert triton_rope._row_stride_unit(torch.empty(2, 3, 5, 26)) == 2
    assert triton_rope._scaled_strides(q, 8) == (36, 12, 3, 1)


# -- the two program tilings compute the same function ------------------------------------------------
_TILING_GEOMETRIES = ((24, None, "partial"), (40, None, "partial"), (48, None, "partial"), (64, None, "partial"),
                      (48, 24, "partial"), (48, 12, "partial"), (64, 16, "partial"), (40, 20, "partial"),
                      (56, 8, "partial"), (20, None, "partial"), (36, 20, "partial"), (18, None, "full"),
                      (22, 14, "full"), (30, 6, "full"))


# 4 q and 2 kv heads only where D is not a multiple of 8: elsewhere blocks of 8 never cross rows and the
# 3 + 1 heads already take them
_TILING_CASES = [(*g, h) for g in _TILING_GEOMETRIES for h in ((3, 1), (4, 2)) if h == (3, 1) or g[0] % 8]


def _tiling_params() -> list:
    """Each (geometry, heads) case in both layouts, the two entries taking the layouts in turn: triton_v4 and
    triton_v2 (``LOW``) run the same tilings and differ in their arithmetic (``_rotate_pairs``' rounding, and
    triton_v4's signs folded into the fma at odd halves in the flat tiling, ``FOLD``), so each entry meets every
    layout and, case by case, every kind of geometry (power-of-two and other halves, copied tails, odd halves in
    the half layout for both, both head counts where there are two) without the full product."""
    out = []
    for i, (D, rotary_dim, variant, heads) in enumerate(_TILING_CASES):
        for j, layout in enumerate(("half", "interleaved")):
            impl = IMPLS[(i + j) % 2]
            out.append(pytest.param(impl, layout, D, rotary_dim, variant, heads,
                                    id=f"{D}-{rotary_dim}-{variant}-{heads[0]}x{heads[1]}-{layout}-{impl}"))
    return out


@pytest.mark.parametrize("impl,layout,D,rotary_dim,variant,heads", _tiling_params())
def test_row_chunk_and_flat_tilings_give_identical_results(impl, layout, D, rotary_dim, variant, heads, device):
    """Rows (a padded BR x HP tile), chunks (V pairs per lane group; a copied tail in chunks of its own)
    and flat blocks (8 contiguous elements of a token, each against its partner, from element tables)
    compute the same products and sums and differ only in which program handles an element, so forward
    and backward agree bit for bit: with positions, GQA, strided views of a fused qkv, rotary_dim < D,
    odd rotated halves (variant=full), blocks crossing rows, and at sizes where the last program is
    partial. The head counts pick the flat block: 3 and 1 heads of D = 2 mod 4 make blocks of 2, 4 and 2
    heads blocks of 8 that cross rows (with a partner run misaligned to the block where R2 is not a multiple
    of 8, and at D = 30, rotary_dim 6, a next row's second half inside the block). The conformance grid
    checks the default tiling against the float64 formula; this keeps the others honest. Flat runs again with
    the other cos/sin table format (split or paired) and, in the half layout, with misaligned partner runs read
    the other way (int32 words or 16-bit elements)."""
    hq, hk = heads
    default = triton_rope.launch_config(D, (rotary_dim or D) // 2, variant == "partial", layout == "interleaved")
    variants = [(0, {}), (1, {}), (2, {}), (3, {"tables": int(not default["PAIRED"])})]
    if layout == "half":
        variants.append((4, {"words": int(not default["WORDS"])}))
    mods = {}
    for key, cfg in variants:
        m = rope.build(impl, D, 16, layout=layout, rotary_dim=rotary_dim, variant=variant).to(device)
        m.launch_config = triton_rope.LaunchConfig(chunks=min(key, 2), **cfg)
        m.poison_outputs = True
        mods[key] = m
    qkv = torch.randn(3, 7, (hq + 2 * hk) * D, device=device, dtype=torch.bfloat16)
    q, k, _ = rope.base.split_qkv(qkv, hq, hk, D)  # strided views
    pos = torch.randint(0, 16, (3, 7), device=device)
    grads = (torch.randn(3, 7, hq, D, device=device, dtype=torch.bfloat16),
             torch.randn(3, 7, hk, D, device=device, dtype=torch.bfloat16))
    outs = {}
    for chunks, m in mods.items():
        qg, kg = q.clone().requires_grad_(), k.clone().requires_grad_()
        y = m(qg, kg, positions=pos)
        outs[chunks] = (*y, *torch.autograd.grad(y, (qg, kg), grads), *m(q, k))
    assert mods[1].launch_config.chunks == 1 and mods[2].launch_config.chunks == mods[3].launch_config.chunks == 2
    for other in list(mods)[1:]:
        for a, b in zip(outs[0], outs[other], strict=True):
            assert not a.isnan().any() and torch.equal(a, b), other


def test_flat_tiling_takes_tokens_with_contiguous_heads_and_falls_back_otherwise(monkeypatch, device):
    """The flat tiling addresses a token's heads as one run: it launches (FLAT, blocks of 8, or 4 where a
    token's run is not a multiple of 8) for contiguous tensors and fused-qkv views, and for heads that are
    not contiguous (a (B, H, T, D) tensor seen transposed) the row geometry's tiling runs instead, with
    the same results."""
    spy = _spy_rope_kernels(monkeypatch, run=True)
    m = rope.build("triton_v4", 20, 16).to(device)
    m.launch_config = triton_rope.LaunchConfig(chunks=2)
    ref = rope.build("triton_v4", 20, 16).to(device)
    q = torch.randn(2, 5, 4, 20, device=device)
    k = torch.randn(2, 5, 2, 20, device=device)
    for qq, kk, vb in ((q, k, 8), (q[:, :, :3], k[:, :, :1], 4),  # 3 x 20 and 20 elements a token: blocks of 4
                       (q.transpose(1, 2).contiguous().transpose(1, 2), k, 0)):
        spy.launches.clear()
        got, want = m(qq, kk), ref(qq, kk)
        kw = spy.launches[0][1]  # m's launch (ref's follows)
        assert kw["FLAT"] == bool(vb) and (not vb or kw["VB"] == vb), (vb, kw["FLAT"], kw["VB"])
        assert kw["num_warps"] == (4 if vb else 8)  # each tiling's own default
        assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))


def test_element_tables_follow_the_tables_they_expand():
    """The flat tiling's element tables: cos and the signed sin by element (half layout: the second half
    negated; interleaved: odd elements negated; the tail 1 and 0), rows repeated for a period (split: lcm(D,
    4) columns; paired, each column's cos and sin side by side: D) and the block read past it, so that every
    block's columns start 16-byte aligned; kept for the same table tensors and rebuilt once those change in
    place or are other tensors."""
    cos = torch.rand(4, 3)
    sin = torch.rand(4, 3)
    ce, se = triton_rope.element_tables(cos, sin, 8, False, 4)
    assert ce.shape == (4, 8)  # lcm(8, 4): one row, and blocks of 4 never read past it
    assert torch.equal(ce, torch.cat([cos, cos, torch.ones(4, 2)], 1))
    assert torch.equal(se, torch.cat([sin, -sin, torch.zeros(4, 2)], 1))
    ci, si = triton_rope.element_tables(cos, sin, 8, True, 4)
    assert torch.equal(ci[:, :6], cos.repeat_interleave(2, 1)) and torch.equal(si[:, 1:6:2], -sin)
    # D = 10, blocks of 8: a period of lcm(10, 4) = 20 columns (2 rows), and 4 more that a block starting at
    # column 16 reads
    c10, s10 = triton_rope.element_tables(cos, sin, 10, False, 8)
    assert c10.shape == (4, 24) and triton_rope.element_table_period(10, 8) == 20
    row = torch.cat([sin, -sin, torch.zeros(4, 4)], 1)
    assert torch.equal(s10, row.repeat(1, 3)[:, :24]) and torch.equal(c10[:, 16:20], torch.ones(4, 4))
    assert triton_rope.element_table_width(18, 8) == 40 and triton_rope.element_table_width(6, 4) == 12
    assert triton_rope.element_table_width(30, 2) == 32  # blocks of 2: the row itself (D), rounded up to 4
    # paired, D = 10: a period of 10 columns (even ones start 16 bytes in), and the 6 that a block starting at
    # column 8 reads past it; the same columns as split, side by side
    table, same = triton_rope.element_tables(cos, sin, 10, False, 8, paired=True)
    assert same is table and table.shape == (4, 32) and triton_rope.element_table_period(10, 8, True) == 10
    pairs = table.unflatten(1, (-1, 2))
    assert torch.equal(pairs[..., 0], c10[:, :16]) and torch.equal(pairs[..., 1], s10[:, :16])
    assert triton_rope.element_table_width(18, 8, True) == 24 and triton_rope.element_table_width(30, 2, True) == 30
    assert triton_rope.element_tables(cos, sin, 8, False, 4)[0] is ce  # kept
    assert triton_rope.element_tables(cos, sin, 10, False, 8, paired=True)[0] is table
    cos.mul_(2)
    again = triton_rope.element_tables(cos, sin, 8, False, 4)[0]
    assert again is not ce and torch.equal(again[:, :3], cos)  # rebuilt after the in-place change
    other = cos.clone()
    assert triton_rope.element_tables(other, sin, 8, False, 4)[0] is not again


def test_paired_tables_where_measured_faster():
    """The measured default: paired cos/sin tables for half-layout odd halves at full width with R2 mod 8 = 3, 5,
    and with 1, 7 where their partner runs are read as int32 words (all of them: D <= 50 apart, from 54 on with
    joint programs); at R2 mod 8 = 2 (both variants) paired tables everywhere, with words at D = 20 (apart) and
    16-bit elements from D = 36 on (joint); ``LaunchConfig.tables`` and ``LaunchConfig.words`` force either."""
    cfg = triton_rope.launch_config
    odd_words = [d for d in range(18, 257, 4) if (d // 2) % 8 in (1, 7)]
    assert odd_words[:5] == [18, 30, 34, 46, 50] and odd_words[-1] == 254 and len(odd_words) == 30
    words = sorted(odd_words + [20])
    two_mod_8 = list(range(20, 257, 16))
    assert [d for d in range(16, 257, 2) if cfg(d, d // 2, False, False)["WORDS"]] == words
    assert [d for d in range(16, 257, 2) if cfg(d, d // 2, False, False)["PAIRED"]] == sorted(odd_words + two_mod_8 + [
        22, 26, 38, 42, 54, 58, 70, 74, 86, 90, 102, 106, 118, 122, 134, 138, 150, 154, 166, 170, 182, 186, 198,
        202, 214, 218, 230, 234, 246, 250])
    assert [d for d in range(16, 257, 4) if cfg(d, d // 2, True, False)["WORDS"]] == [20]  # partial
    assert [d for d in range(16, 257, 4) if cfg(d, d // 2, True, False)["PAIRED"]] == two_mod_8
    apart = triton_rope.LaunchConfig(joint=0)  # apart (GQA's default), words and paired tables up to D = 52 only
    assert [d for d in range(16, 257, 4) if cfg(d, d // 2, True, False, apart)["WORDS"]] == [20, 36, 52]
    assert [d for d in range(16, 257, 4) if cfg(d, d // 2, True, False, apart)["PAIRED"]] == [20, 36, 52]
    assert [d for d in range(54, 174, 4) if cfg(d, d // 2, False, False, apart)["WORDS"]] == []  # odd halves
    assert not cfg(20, 10, False, True)["WORDS"] and not cfg(24, 10, False, False)["WORDS"]  # interleaved; a tail
    assert not cfg(18, 9, False, True)["WORDS"] and not cfg(36, 9, False, False)["WORDS"]  # interleaved; a tail
    assert not cfg(18, 9, False, False, triton_rope.LaunchConfig(words=0))["WORDS"]
    assert cfg(36, 18, True, False, triton_rope.LaunchConfig(words=1))["WORDS"]
    assert not cfg(22, 11, False, True)["PAIRED"] and not cfg(48, 12, True, False)["PAIRED"]
    assert not cfg(64, 11, False, False)["PAIRED"]  # a copied tail
    assert cfg(48, 12, True, False, triton_rope.LaunchConfig(tables=1))["PAIRED"]
    assert not cfg(22, 11, False, False, triton_rope.LaunchConfig(tables=0))["PAIRED"]
    with pytest.raises(ValueError, match="tables"):
        triton_rope.LaunchConfig(tables=2)
    with pytest.raises(ValueError, match="maxnreg must be 0 .* from 16 to 255, got -1"):
        triton_rope.LaunchConfig(maxnreg=-1)
    with pytest.raises(ValueError, match="words must be -1 .* or 1 \\(int32 words\\), got 2"):
        triton_rope.LaunchConfig(words=2)


def test_joint_programs_where_measured_faster(monkeypatch):
    """The measured default: q's flat programs take k's blocks at half-layout odd halves at full width from D = 54
    on, at R2 = 2 mod 8 (both variants) from D = 36 on and at R2 = 4 mod 8 from D = 24 on (with blocks of 4), for q
    and k of as many heads (not measured with GQA: apart there, with the tiling, tables and partner reads of apart
    programs, unless ``LaunchConfig.joint`` says); apart below, for R2 = 6 mod 8, interleaved pairs and a copied
    tail; ``LaunchConfig.joint`` forces either."""
    cfg = triton_rope.launch_config
    two_mod_8, four_mod_8 = list(range(36, 257, 16)), list(range(24, 257, 16))
    assert [d for d in range(16, 257, 2) if cfg(d, d // 2, False, False)["JOINT"]] == sorted(
        list(range(54, 257, 4)) + two_mod_8 + four_mod_8)
    assert [d for d in range(16, 257, 4) if cfg(d, d // 2, True, False)["JOINT"]] == sorted(
        two_mod_8 + four_mod_8)  # partial
    assert [cfg(d, d // 2, True, False)["VB"] for d in (24, 40, 36, 54, 48)] == [4, 4, 8, 8, 8]
    assert cfg(40, 20, True, False, triton_rope.LaunchConfig(joint=0))["FLAT"] is False  # apart: chunks
    assert not cfg(54, 27, False, True)["JOINT"] and not cfg(64, 27, False, False)["JOINT"]  # interleaved; a tail
    assert not cfg(68, 34, True, True)["JOINT"] and not cfg(80, 34, True, False)["JOINT"]
    assert not cfg(130, 65, False, False, triton_rope.LaunchConfig(joint=0))["JOINT"]
    assert cfg(28, 14, True, False, triton_rope.LaunchConfig(joint=1))["JOINT"]
    assert not cfg(64, 32, False, False, triton_rope.LaunchConfig(joint=1))["JOINT"]  # rows: no flat programs
    with pytest.raises(ValueError, match="joint must be -1 .* got 2"):
        triton_rope.LaunchConfig(joint=2)
    m = rope.build("triton_v4", 66, 16, variant="full")
    q, k = torch.randn(1, 3, 4, 66), torch.randn(1, 3, 4, 66)
    plan = triton_rope.launch_plan
    assert plan(q, k, m.cos, m.sin, None, False, False, False).constexprs["JOINT"]
    gqa = plan(q, k[:, :, :2], m.cos, m.sin, None, False, False, False).constexprs
    assert not any(gqa[key] for key in ("JOINT", "WORDS", "PAIRED"))  # R2 mod 8 = 1 at D = 66 apart: elements, split
    m100 = rope.build("triton_v4", 100, 16)
    q100, k100 = torch.randn(1, 3, 4, 100), torch.randn(1, 3, 4, 100)
    joint = plan(q100, k100, m100.cos, m100.sin, None, False, False, False).constexprs
    assert joint["JOINT"] and joint["PAIRED"] and not joint["WORDS"]
    gqa = plan(q100, k100[:, :, :1], m100.cos, m100.sin, None, False, False, False).constexprs
    assert not gqa["JOINT"] and not gqa["PAIRED"] and not gqa["WORDS"]  # R2 = 2 mod 8 apart: elements, split
    assert not plan(q, None, m.cos, m.sin, None, False, False, False).constexprs["JOINT"]
    m40 = rope.build("triton_v4", 40, 16)
    q40, k40 = torch.randn(1, 3, 4, 40), torch.randn(1, 3, 4, 40)
    joint = plan(q40, k40, m40.cos, m40.sin, None, True, False, False).constexprs
    assert joint["JOINT"] and joint["FLAT"] and joint["VB"] == 4 and joint["NBP"] == 256
    gqa = plan(q40, k40[:, :, :2], m40.cos, m40.sin, None, True, False, False).constexprs
    assert not gqa["JOINT"] and not gqa["FLAT"] and gqa["CHUNKED"]  # R2 = 4 mod 8 apart: the chunk tiling
    forced = triton_rope.LaunchConfig(joint=1)
    assert plan(q, k[:, :, :2], m.cos, m.sin, None, False, False, False, config=forced).constexprs["JOINT"]
    monkeypatch.setattr(triton_rope, "JOINT_BY_DEFAULT", False)
    triton_rope.launch_config.cache_clear()
    try:
        assert not any(cfg(d, d // 2, False, False)["JOINT"] for d in range(16, 257, 2))
    finally:
        monkeypatch.undo()
        triton_rope.launch_config.cache_clear()


@pytest.mark.parametrize("dtype", (torch.bfloat16, torch.float16))
def test_partner_words_need_word_aligned_tensors(dtype, monkeypatch, device):
    """``LaunchConfig.words`` reads misaligned partner runs as int32 words: launched so for tensors on 4-byte
    boundaries, and as 16-bit elements (the same results) for a view starting one element in, whose words would
    straddle elements. Both 16-bit dtypes: a word's halves become float32 differently for each."""
    spy = _spy_rope_kernels(monkeypatch, run=True)
    m = rope.build("triton_v4", 36, 16).to(device)
    m.launch_config = triton_rope.LaunchConfig(chunks=2, words=1)
    ref = rope.build("triton_v4", 36, 16).to(device)
    ref.launch_config = triton_rope.LaunchConfig(chunks=2, words=0)
    base = torch.randn(2 * 5 * 2 * 36 + 1, device=device, dtype=dtype)
    aligned = base[:-1].view(2, 5, 2, 36)
    shifted = base[1:].view(2, 5, 2, 36)  # 2 bytes in
    assert triton_rope._word_aligned(aligned, False) and not triton_rope._word_aligned(shifted, False)
    assert not triton_rope._word_aligned(shifted, True)  # traced: from the storage offset
    for q, words in ((aligned, True), (shifted, False)):
        spy.launches.clear()
        got, want = m(q, q), ref(q, q)
        assert [kw["WORDS"] for _, kw in spy.launches] == [words, False]
        assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))


def test_flat_tiling_takes_inference_tensors(device):
    """A module built and called under ``torch.inference_mode`` has inference buffers, which keep no version
    counter: the element tables are then built each call instead of kept (keeping them read the version
    and raised), with the same results as the row tiling."""
    with torch.inference_mode():
        flat = rope.build("triton_v4", 48, 16, rotary_dim=24).to(device)
        rows = rope.build("triton_v4", 48, 16, rotary_dim=24).to(device)
        rows.launch_config = triton_rope.LaunchConfig(chunks=0)
        q, k = torch.randn(2, 5, 3, 48, device=device), torch.randn(2, 5, 1, 48, device=device)
        assert flat.cos.is_inference()
        for _ in range(2):
            assert all(torch.equal(a, b) for a, b in zip(flat(q, k), rows(q, k), strict=True))


# -- index arithmetic: divisions by magic numbers, 32-bit offsets where they fit -----------------------
def test_magic_divisor_is_exact():
    """The kernel divides row indices by H and T as ``(((n * m) >> 31) + n) >> s`` with ``m`` and ``s``
    int32 values (Inductor passes no larger Python int to a user kernel): exact for every n < 2**31 and
    every divisor a launch can pass, at the edges (n near 2**31, d = 1, powers of two and their
    neighbours, the largest divisor)."""
    gen = torch.Generator().manual_seed(int.from_bytes(os.urandom(4), "little"))
    divisors = sorted({*range(1, 300), *(2**e + o for e in range(1, 31) for o in (-1, 0, 1)), 2**31 - 1,
                       *torch.randint(1, 2**31, (200,), generator=gen).tolist()})
    numerators = [0, 1, 2**31 - 1, 2**31 - 2, 2**30, *torch.randint(0, 2**31, (300,), generator=gen).tolist()]
    for d in divisors:
        m, sh = triton_rope.magic_divisor(d)
        assert 0 <= m < 2**31 and 0 <= sh < 32, (d, m, sh)
        near = [d * j + o for j in (1, 2, (2**31 - 1) // d) for o in (-1, 0, 1)]
        for n in numerators + [x for x in near if 0 <= x < 2**31]:
            hi = (n * m) >> 31
            assert hi + n < 2**32 and (hi + n) >> sh == n // d, (n, d, m, sh)  # the uint32 sum does not wrap
    for bad in (0, -3, 2**31):
        with pytest.raises(ValueError, match="magic_divisor: d="):
            triton_rope.magic_divisor(bad)


def test_wide_offsets_are_needed_past_two_to_the_30_stored_elements():
    """64-bit index arithmetic once an operand's storage holds 2**30 elements (its offsets, and those of
    a last partial program's masked rows one batch past the end, could then reach 2**31): a slice of
    a large fused qkv counts by its buffer."""
    meta = dict(device="meta", dtype=torch.bfloat16)
    assert not triton_rope._needs_wide_offsets(torch.empty(2, 1024, 16, 128, **meta))
    assert not triton_rope._needs_wide_offsets(torch.empty(8, 2**17, 4, 64, **meta))  # 2**28 elements
    assert triton_rope._needs_wide_offsets(torch.empty(1, 2**24, 1, 64, **meta))  # 2**30
    assert triton_rope._needs_wide_offsets(torch.empty(2**31, dtype=torch.int64, device="meta"))
    qkv = torch.empty(4, 2**20, 3 * 2 * 64, **meta)  # q: 2**29 elements of a 3 * 2**29 buffer
    q, k, _ = rope.base.split_qkv(qkv, 2, 2, 64)
    assert triton_rope._needs_wide_offsets(q) and not triton_rope._needs_wide_offsets(q.contiguous())


@pytest.mark.parametrize("chunks", (0, 1, 2))
@pytest.mark.parametrize("D,rotary_dim", ((20, None), (48, 24), (64, None)))
def test_wide_and_narrow_index_arithmetic_agree(chunks, D, rotary_dim, monkeypatch, device):
    """The 32-bit index path (every launch that fits) and the 64-bit one (huge tensors, forced here)
    rotate the same elements the same way: forward and backward, positions, GQA, strided views, rows
    and chunks (which divide by H and T through the magic numbers)."""
    outs = {}
    qkv = torch.randn(3, 7, (3 + 2 * 1) * D, device=device, dtype=torch.bfloat16)
    q, k, _ = rope.base.split_qkv(qkv, 3, 1, D)
    pos = torch.randint(0, 16, (3, 7), device=device)
    grads = (torch.randn(3, 7, 3, D, device=device, dtype=torch.bfloat16),
             torch.randn(3, 7, 1, D, device=device, dtype=torch.bfloat16))
    m = rope.build("triton_v4", D, 16, rotary_dim=rotary_dim).to(device)
    m.launch_config = triton_rope.LaunchConfig(chunks=chunks)
    m.poison_outputs = True
    for wide in (False, True):
        monkeypatch.setattr(triton_rope, "_needs_wide_offsets", lambda *t, w=wide: w)
        qg, kg = q.clone().requires_grad_(), k.clone().requires_grad_()
        y = m(qg, kg, positions=pos)
        outs[wide] = (*y, *torch.autograd.grad(y, (qg, kg), grads), *m(q, k))
    want = rope.build("torch", D, 16, rotary_dim=rotary_dim).to(device)(q.double(), k.double())
    torch.testing.assert_close(outs[False][4].double(), want[0], rtol=2**-7, atol=1e-6)  # one bf16 ulp
    for a, b in zip(outs[False], outs[True], strict=True):
        assert not a.isnan().any() and torch.equal(a, b)


def test_launch_passes_only_int32_scalars(monkeypatch, device):
    """Every integer the kernel receives fits an int32 at ordinary sizes: Inductor, which launches the
    traced op's kernel itself, fails on a larger Python int argument (torch 2.11: ``'int' object has
    no attribute 'xreplace'``), which the magic multipliers of H and T were before they were offset.
    The integers are recorded as the launch receives them; the kernel itself runs for the small shapes only (the
    13 x 1000-row launches would be ~800 interpreted programs, and running them checks nothing more here)."""
    seen = []
    kernel = triton_rope._kernels.rope_kernel

    class Recording:
        execute = True  # whether the recorded launch also runs the kernel

        def __getitem__(self, grid):
            def run(*args, **kwargs):
                seen.append([a for a in (*args, *kwargs.values()) if type(a) is int])
                if self.execute:
                    return kernel[grid](*args, **kwargs)
            return run

    recording = Recording()
    monkeypatch.setattr(triton_rope._kernels, "rope_kernel", recording)
    for H, T, D in ((3, 7, 20), (1, 1, 48), (13, 1000, 64)):
        recording.execute = T * H <= 64
        r = build_poisoned("triton_v4", D, 1024, device)
        q = torch.randn(1, T, H, D, device=device, requires_grad=True)
        (r(q, q.detach())[0].sum()).backward()
    assert len(seen) == 6
    assert all(-(2**31) <= a < 2**31 for ints in seen for a in ints), seen


# -- launch plans: the launch's arguments worked out once per signature ---------------------------------
def _plan(m, q, k, positions=None, **kw):
    return triton_rope.launch_plan(q, k, m.cos, m.sin, positions, True, False, False, config=m.launch_config, **kw)


def test_launch_plan_is_kept_per_signature(device):
    """A call with new tensors of the same signature reuses the plan; anything the launch's arguments depend on
    makes another: alignment (the words reading, Triton's pointer specialisation), strides, dtype, GQA,
    positions and their strides, given outputs, the flags, the config."""
    m = rope.build("triton_v4", 36, 16).to(device)  # flat tiling, misaligned partners (words by default: R2 = 18)
    bf = dict(device=device, dtype=torch.bfloat16)
    base = torch.randn(2 * 5 * 2 * 36 + 1, **bf)
    q, k = base[:-1].view(2, 5, 2, 36), torch.randn(2, 5, 2, 36, **bf)
    p = _plan(m, q, k)
    assert _plan(m, torch.randn(2, 5, 2, 36, **bf), torch.randn(2, 5, 2, 36, **bf)) is p
    pos = torch.randint(0, 16, (2, 5), device=device)
    obuf = torch.empty(2 * 720 + 1, **bf)
    others = [
        _plan(m, base[1:].view(2, 5, 2, 36), k),  # 2 bytes in
        _plan(m, q, k.transpose(0, 1).contiguous().transpose(0, 1)),  # strides
        _plan(m, q.float(), k.float()),
        _plan(m, q, k[:, :, :1]),  # GQA
        _plan(m, q, None),
        _plan(m, q, k, pos),
        _plan(m, q, k, pos.int()),
        _plan(m, q, k, pos.t().contiguous().t()),
        _plan(m, q, k, out_q=torch.empty(2, 5, 2, 40, **bf)[..., :36]),
        _plan(m, q, k, out_q=obuf[:720].view(2, 5, 2, 36), out_k=obuf[720:1440].view(2, 5, 2, 36), out_buffer=obuf),
        _plan(m, q, k, out_q=obuf[1:721].view(2, 5, 2, 36), out_k=obuf[721:1441].view(2, 5, 2, 36),
              out_buffer=obuf[1:]),  # the buffer 2 bytes in: the kernel's output pointer
        triton_rope.launch_plan(q, k, m.cos, m.sin, None, True, False, True),  # inverse
        triton_rope.launch_plan(q, k, m.cos, m.sin, None, True, False, False, config=triton_rope.LaunchConfig(words=0)),
    ]
    assert all(o is not p for o in others) and len({id(o) for o in others}) == len(others)
    assert _plan(m, q, k, pos) is others[5]


def test_launch_plan_follows_the_tables(device):
    """A plan holds the flat tiling's element tables, derived from the module's cos/sin: changed in place (their
    version counters), the tables are derived again, and the rotation follows them."""
    m = rope.build("triton_v4", 30, 16, variant="full").to(device)  # odd halves: flat tiling
    other = rope.build("triton_v4", 30, 16, variant="full", base=500.0).to(device)
    q, k = torch.randn(2, 7, 3, 30, device=device), torch.randn(2, 7, 1, 30, device=device)
    before = m(q, k)
    p = _plan(m, q, k)
    assert p.tables is not None
    with torch.no_grad():
        m.cos.copy_(other.cos)
        m.sin.copy_(other.sin)
    assert _plan(m, q, k) is not p
    assert all(torch.equal(a, b) for a, b in zip(m(q, k), other(q, k), strict=True))
    assert not torch.equal(before[0], other(q, k)[0])


def test_reused_plan_rotates_each_call_tensors(device):
    """Calls reusing one plan rotate their own tensors: the results equal those of a launch with the plans
    forgotten, for new data, a strided view and positions."""
    m = build_poisoned("triton_v4", 44, 32, device)  # R2 = 22: flat, misaligned partners
    qkv = torch.randn(3, 6, (4 + 2 * 2) * 44, device=device, dtype=torch.bfloat16)
    pos = torch.randint(0, 32, (3, 6), device=device)
    got = []
    for i in range(3):
        q, k, _ = rope.base.split_qkv(qkv + i, 4, 2, 44)
        got.append(m(q, k, positions=(pos + i) % 32))
    triton_rope._PLANS._store.clear()
    for i in range(3):
        q, k, _ = rope.base.split_qkv(qkv + i, 4, 2, 44)
        want = m(q, k, positions=(pos + i) % 32)
        assert all(torch.equal(a, b) for a, b in zip(got[i], want, strict=True))
        triton_rope._PLANS._store.clear()


@pytest.mark.parametrize("block", (4, 2))
@pytest.mark.parametrize("variant,D,rotary_dim", [("full", 18, None), ("partial", 36, None), ("full", 40, 20),
                                                  ("full", 34, None)])
def test_flat_block_sizes_rotate_alike(block, variant, D, rotary_dim, monkeypatch, device):
    """``LaunchConfig.block`` narrows the flat tiling's vectors (the kernel's VB): the same results, bit for bit,
    as blocks of 8, forward and backward, with positions and GQA, in bf16 (words at D = 18, 34) and float32."""
    spy = _spy_rope_kernels(monkeypatch, run=True)
    mods = {}
    for b in (8, block):
        mods[b] = rope.build("triton_v4", D, 32, variant=variant, rotary_dim=rotary_dim).to(device)
        mods[b].launch_config = triton_rope.LaunchConfig(chunks=2, block=b)
    for dtype in (torch.bfloat16, torch.float32):
        q = torch.randn(2, 7, 8, D, device=device, dtype=dtype)
        k = torch.randn(2, 7, 4, D, device=device, dtype=dtype)  # 4 D elements a token: blocks of 8 fit
        pos = torch.randint(0, 32, (2, 7), device=device)
        g = (torch.randn_like(q), torch.randn_like(k))
        outs = {}
        for b, m in mods.items():
            spy.launches.clear()
            qg, kg = q.clone().requires_grad_(), k.clone().requires_grad_()
            y = m(qg, kg, positions=pos)
            outs[b] = (*y, *torch.autograd.grad(y, (qg, kg), g))
            assert [kw["VB"] for _, kw in spy.launches] == [b, b]
        assert all(torch.equal(x, y) for x, y in zip(outs[8], outs[block], strict=True))


@pytest.mark.parametrize("variant,D,rotary_dim,hk", [("full", 18, None, 4), ("partial", 36, None, 8),
                                                     ("full", 30, None, 2), ("full", 40, 20, 4),
                                                     ("partial", 64, 16, 1)])
def test_joint_programs_rotate_alike(variant, D, rotary_dim, hk, monkeypatch, device):
    """``LaunchConfig.joint``: q's flat programs rotate k's blocks of the same tokens too (one table load for both),
    with the same results, bit for bit, as programs of their own, forward and backward, with positions, GQA
    (k's blocks past its heads masked) and the strided views of a fused projection; in bf16 (words at D = 18, 30)
    and float32. The launch has no k programs."""
    spy = _spy_rope_kernels(monkeypatch, run=True)
    mods = {}
    for joint in (0, 1):
        mods[joint] = rope.build("triton_v4", D, 32, variant=variant, rotary_dim=rotary_dim).to(device)
        mods[joint].launch_config = triton_rope.LaunchConfig(chunks=2, joint=joint)
    for dtype in (torch.bfloat16, torch.float32):
        qkv = torch.randn(2, 7, (8 + 2 * hk) * D, device=device, dtype=dtype)
        q, k, _ = rope.base.split_qkv(qkv, 8, hk, D)
        pos = torch.randint(0, 32, (2, 7), device=device)
        g = (torch.randn_like(q), torch.randn(k.shape, device=device, dtype=dtype))
        outs = {}
        for joint, m in mods.items():
            spy.launches.clear()
            qg, kg = q.detach().clone().requires_grad_(), k.detach().clone().requires_grad_()
            y = m(qg, kg, positions=pos)
            outs[joint] = (*y, *torch.autograd.grad(y, (qg, kg), g), *m(q, k, positions=pos))
            assert [kw["JOINT"] for _, kw in spy.launches] == [bool(joint)] * 3
            assert [kw["FLAT"] for _, kw in spy.launches] == [True] * 3
        grids = [grid[0] for grid, _ in spy.launches]
        assert all(torch.equal(a, b) for a, b in zip(outs[0], outs[1], strict=True))
        assert all(not x.isnan().any() for x in outs[1])
    assert grids[0] == -(-2 * 7 * 8 * D // 1024)  # q's programs only (1024 elements each)


def test_a_launch_for_another_gpu_switches_to_it(monkeypatch):
    """Triton launches on the current device: a plan for tensors on cuda:1 called while cuda:0 is current
    launches with cuda:1 current, and cuda:0 is current again after; with cuda:1 current, no switch."""
    devices = FakeGpus(monkeypatch)
    plan = triton_rope.LaunchPlan(4, (), {}, None, False, False, device=1)
    seen = []
    monkeypatch.setattr(triton_rope.LaunchPlan, "triton_launch", lambda self, args: seen.append(devices.current))
    x = torch.zeros(1, 1, 1, 2)
    plan.run(x, x, x, x, None, x, x)
    assert seen == [1] and devices.current == 0
    devices.current = 1
    plan.run(x, x, x, x, None, x, x)
    assert seen == [1, 1] and devices.current == 1


def test_on_device_of_switches_only_for_another_gpu(monkeypatch):
    """The helper the Liger and CuTeDSL entries launch under: a switch to the tensor's GPU where it is not the
    current one, nothing otherwise (and nothing for CPU tensors)."""
    from rope.base import on_device_of

    devices = FakeGpus(monkeypatch)

    class OnGpu1:
        is_cuda, device = True, torch.device("cuda", 1)

        def get_device(self) -> int:
            return 1

    with on_device_of(OnGpu1()):
        assert devices.current == 1
    assert devices.current == 0
    devices.current = 1
    with on_device_of(OnGpu1()):
        assert devices.current == 1
    devices.current = 0
    with on_device_of(torch.zeros(1)):
        assert devices.current == 0


def test_device_profile_reads_the_gpu_name(monkeypatch):
    """The H200 takes its own launch rules, every other GPU (and the CPU interpreter) the H100's."""
    names = (("NVIDIA H200", "h200"), ("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA A100-SXM4-80GB", "h100"))
    for name, profile in names:
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda index, n=name: n)
        assert triton_rope.device_profile.__wrapped__(0) == profile, name
    assert triton_rope.device_profile.__wrapped__(-1) == "h100"


def test_h200_caps_row_registers_where_measured_faster(monkeypatch, device):
    """On an H200 (ROWS_REGISTERS) row programs that are padded (D = 48, 96: 24 and 48 pairs in 32 and 64 lanes) or
    read positions run under a cap of 32 registers; whole power-of-two rows without positions, the flat and chunk
    tilings, a cap the config sets, traced launches (torch.compile) and the H100 keep theirs. Capped launches give
    the float64 formula's results, forward and backward, with positions and a fused projection's views."""
    def regs(profile, D, positions=None, config=triton_rope.DEFAULT_LAUNCH, traced=False, variant="full"):
        monkeypatch.setattr(triton_rope, "device_profile", lambda index, p=profile: p)
        m = rope.build("triton_v4", D, 16, variant=variant).to(device)
        q = torch.randn(2, 5, 2, D, device=device, dtype=torch.bfloat16)
        plan = triton_rope.launch_plan(q, q.clone(), m.cos, m.sin, positions, variant == "partial", False, False,
                                       config=config, traced=traced)
        return plan.constexprs.get("maxnreg", 0)

    pos = torch.randint(0, 16, (2, 5), device=device)
    assert [regs("h200", D) for D in (48, 96, 64, 128)] == [32, 32, 0, 0]
    assert [regs("h200", D, pos) for D in (64, 128)] == [32, 32]
    assert regs("h200", 48, variant="partial") == 32
    assert [regs("h200", D, pos) for D in (80, 54, 36)] == [0, 0, 0]  # chunks, flat (joint), flat
    assert regs("h200", 48, config=triton_rope.LaunchConfig(maxnreg=48)) == 48
    assert regs("h200", 48, pos, traced=True) == 0
    assert [regs("h100", D, p) for D in (48, 96, 64) for p in (None, pos)] == [0] * 6
    monkeypatch.setattr(triton_rope, "device_profile", lambda index: "h200")
    spy = _spy_rope_kernels(monkeypatch, run=True)
    for D, layout, pos_kind in ((48, "contiguous", "bt"), (48, "qkv", "none"), (64, "gqa", "t"), (64, "qkv", "bt")):
        spy.launches.clear()
        run_case("triton_v4", torch.bfloat16, "full", layout, pos_kind, 2, 5, 2, 1 if layout == "gqa" else 2, D,
                 device)
        assert spy.launches and all(kw.get("maxnreg") == 32 for _, kw in spy.launches), (D, layout, pos_kind)


@pytest.mark.parametrize("D,h100,h200", [
    pytest.param(18, {"FLAT": True, "JOINT": False}, {"FLAT": True, "JOINT": True}, id="18"),
    pytest.param(42, {"FLAT": True, "JOINT": False}, {"FLAT": True, "JOINT": True}, id="42"),
    pytest.param(50, {"FLAT": True, "JOINT": False}, {"FLAT": True, "JOINT": True}, id="50"),
    pytest.param(80, {"FLAT": False, "CHUNKED": False}, {"FLAT": False, "CHUNKED": True}, id="80"),
    pytest.param(48, {"FLAT": False, "CHUNKED": False}, {"FLAT": False, "CHUNKED": False}, id="48"),
])
def test_h200_rules_choose_their_tilings_and_compute_the_function(monkeypatch, D, h100, h200, device):
    """On an H200 (GPU_PROFILES) odd halves from D = 18 run joint programs and rows padded to under three quarters of
    their lanes run as chunks; elsewhere the H100's choices stand. The plans differ as measured, and the H200's give
    the float64 formula's results, forward and backward, in the three dtypes, with positions, a fused projection's
    views and GQA (k absent from q's programs)."""
    q = torch.randn(2, 5, 2, D, device=device, dtype=torch.bfloat16)
    for profile, expected in (("h100", h100), ("h200", h200)):
        monkeypatch.setattr(triton_rope, "device_profile", lambda index, p=profile: p)
        m = rope.build("triton_v4", D, 16, variant="full").to(device)
        plan = triton_rope.launch_plan(q, q.clone(), m.cos, m.sin, None, False, False, False)
        assert {key: plan.constexprs[key] for key in expected} == expected, profile
    for dtype, layout, HK, pos_kind in ((torch.bfloat16, "contiguous", 2, "none"), (torch.bfloat16, "qkv", 2, "bt"),
                                        (torch.bfloat16, "gqa", 1, "t"), (torch.float16, "contiguous", 2, "t"),
                                        (torch.float32, "qkv", 2, "none")):
        run_case("triton_v4", dtype, "full", layout, pos_kind, 2, 5, 2, HK, D, device)
