"""triton_v4 / triton_v2: the real kernels, forward and backward, against the float64 reference.

On a machine without CUDA these run under the Triton interpreter (conftest sets TRITON_INTERPRET), so shapes
are tiny; ``test_triton_gpu.py`` runs the same cases at real sizes. What every implementation must do is in
``test_conformance.py``; this file adds what is particular to the Triton entries: triton_v4 within one ulp
everywhere, triton_v2 bit for bit the torch reference in the input dtype, every tiling the launch plan can take
(forced through ``rope.triton.tuning``) computing the same bits, strided views read in place, the fused qkv
projection, the torch.compile ops, and errors raised before any launch. Inputs are fresh random each run (the
seed is printed; ROPE_TEST_SEED=n replays one) and outputs are NaN-filled before each launch (``poison_outputs``).
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch
from helpers import FakeGpus

import rope
import rope.triton as rt
from rope.triton import kernels, launch, ops

from .cases import DTYPE_NAMES, LAYOUTS, POSITIONS, assert_precise, build_poisoned, make_positions, run_case

ROOT = Path(__file__).resolve().parents[2]
IMPLS = ("triton_v4", "triton_v2")
DTYPES = (torch.float32, torch.bfloat16, torch.float16)


@pytest.fixture
def no_launch(monkeypatch):
    """Fails the test if a rotation is launched: bad input must be refused before any launch."""

    def refuse(*args, **kwargs):
        raise AssertionError("a kernel was launched for input that should have been refused")

    for name in ("rotate", "rotate_projection", "qkv_backward"):
        monkeypatch.setattr(launch, name, refuse)


class KernelSpy:
    """Stands in for a kernel of :mod:`rope.triton.kernels`: records each launch's grid and arguments, then runs
    the kernel (under the interpreter every launch goes through Triton's own launch, so through here)."""

    def __init__(self, kernel) -> None:
        self.kernel, self.launches = kernel, []
        self.arg_names = kernel.arg_names

    def __getitem__(self, grid):
        def run(*args, **kwargs):
            self.launches.append((grid, args, kwargs))
            return self.kernel[grid](*args, **kwargs)

        return run


@pytest.fixture
def spies(monkeypatch) -> dict[str, KernelSpy]:
    """Spies in place of the kernels; on a GPU every launch through Triton's own (as under a launch hook), which
    goes through the spy, not the compiled kernel kept from the first launch."""
    out = {}
    for name in ("rope_pairs_kernel", "rope_flat_kernel"):
        out[name] = KernelSpy(getattr(kernels, name))
        monkeypatch.setattr(kernels, name, out[name])
    monkeypatch.setattr(launch, "_hooks_unset", lambda: False)
    return out


def _grads(r, q, k, positions=None, g=None):
    """Outputs and input gradients of ``r(q, k)`` for output gradients ``g`` (fresh random if None)."""
    q, k = q.detach().requires_grad_(), k.detach().requires_grad_()
    yq, yk = r(q, k, positions=positions)
    g = g or (torch.randn_like(yq), torch.randn_like(yk))
    return (yq, yk, *torch.autograd.grad((yq, yk), (q, k), g)), g


def _reference(D, max_seq_len, q, k, positions, g, **options):
    """The float64 torch reference's outputs and gradients for the same rotation."""
    ref = rope.build("torch", D, max_seq_len, compute_dtype="float64", **options).to(q.device)
    return _grads(ref, q.double(), k.double(), positions, tuple(x.double() for x in g))[0]


# -- the function, in every dtype, variant, memory layout and kind of positions ------------------------------
# Each (impl, dtype, variant) once, the memory layouts and position kinds taken in turn across them.
CASES = [(impl, dtype, variant, LAYOUTS[i % len(LAYOUTS)], POSITIONS[i % len(POSITIONS)])
         for i, (impl, dtype, variant) in enumerate(itertools.product(IMPLS, DTYPES, ("partial", "full")))]


@pytest.mark.parametrize("case", CASES, ids=["-".join(map(str, (c[0], DTYPE_NAMES[c[1]], *c[2:]))) for c in CASES])
def test_matches_reference(case, device):
    impl, dtype, variant, layout, pos_kind = case
    run_case(impl, dtype, variant, layout, pos_kind, B=2, T=5, HQ=3, HK=2 if layout == "gqa" else 3, D=48,
             device=device)


HEAD_DIMS = [("full", d) for d in (16, 18, 20, 22, 24, 26, 30, 36, 40, 46, 56, 80, 96, 102, 112, 128, 160, 254, 256)]
HEAD_DIMS += [("partial", d) for d in (16, 20, 24, 28, 44, 64, 80, 112, 160, 192, 256)]


@pytest.mark.parametrize("variant,D", HEAD_DIMS)
def test_head_dims(variant, D, device):
    """Head sizes of every row geometry the plan tells apart: powers of two, halves of 8k, 4 mod 8, 2 mod 4 pairs
    and odd ones (the GPU test runs every even D from 16 to 256)."""
    run_case("triton_v4", torch.bfloat16, variant, "qkv", "bt", B=1, T=3, HQ=2, HK=2, D=D, device=device)


@pytest.mark.parametrize("HQ,HK,D", [(1, 1, 32), (5, 1, 24), (9, 3, 256), (3, 5, 18)])
def test_head_counts(HQ, HK, D, device):
    """Head counts that are no power of two, a single head, and k with fewer or more heads than q."""
    run_case("triton_v4", torch.bfloat16, "full", "contiguous", "t", B=1, T=4, HQ=HQ, HK=HK, D=D, device=device)


@pytest.mark.parametrize("variant", ("partial", "full"))
def test_v2_equals_v4_on_float32(variant, device):
    q, k = torch.randn(2, 5, 3, 64, device=device), torch.randn(2, 5, 2, 64, device=device)
    pos = torch.randint(0, 16, (2, 5), device=device)
    g = torch.randn_like(q), torch.randn_like(k)
    outs = [_grads(build_poisoned(name, 64, 16, device, variant=variant), q, k, pos, g)[0] for name in IMPLS]
    assert all(torch.equal(a, b) for a, b in zip(*outs, strict=True))


@pytest.mark.parametrize("impl", IMPLS)
def test_q_alone(impl, device):
    r = build_poisoned(impl, 32, 16, device)
    q = torch.randn(2, 5, 3, 32, device=device, dtype=torch.bfloat16, requires_grad=True)
    y = r(q)
    assert isinstance(y, torch.Tensor) and y.shape == q.shape
    g = torch.randn_like(y)
    (dq,) = torch.autograd.grad(y, q, g)
    ref = rope.build("torch", 32, 16, compute_dtype="float64").to(device)
    q64 = q.detach().double().requires_grad_()
    (dq64,) = torch.autograd.grad(ref(q64), q64, g.double())
    if impl == "triton_v4":
        assert_precise(y, ref(q64.detach()), torch.bfloat16, "forward")
        assert_precise(dq, dq64, torch.bfloat16, "backward")


def test_empty_batch(device):
    r = build_poisoned("triton_v4", 16, 8, device)
    q = torch.randn(0, 4, 2, 16, device=device)
    yq, yk = r(q, q)
    assert yq.shape == q.shape and yk.shape == q.shape


# -- every tiling the plan can take computes the same bits ---------------------------------------------------
# (D, variant, layout, rotary_dim): rows padded and whole, chunks, flat blocks with aligned and shifted partners,
# odd halves, interleaved, copied tails (one 2 R2 step, several, the last one cut short; flat blocks in one half,
# blocks reaching into the next row).
GEOMETRIES = [(48, "partial", "half", None), (64, "full", "interleaved", None), (40, "full", "half", None),
              (48, "full", "half", 24), (18, "full", "half", None), (20, "partial", "half", None),
              (40, "full", "interleaved", 16), (26, "full", "interleaved", None), (36, "partial", "half", 8),
              (64, "partial", "half", 32), (34, "full", "half", 16)]


@pytest.mark.parametrize("D,variant,layout,rotary_dim", GEOMETRIES)
def test_every_tiling_gives_the_same_bits(D, variant, layout, rotary_dim, device):
    """rows, chunks and flat forced through ``rope.triton.tuning`` (in small programs) and the plan's own choice
    give the same outputs and gradients bit for bit, within one ulp of the float64 reference, with k of as many,
    fewer or more heads; the copied tail of ``rotary_dim`` < D is written by every tiling (poison)."""
    i = GEOMETRIES.index((D, variant, layout, rotary_dim))
    impl, heads = IMPLS[i % 2], ((3, 3), (4, 2), (2, 3))[i % 3]  # entries and head counts alternate
    options = dict(variant=variant, layout=layout, rotary_dim=rotary_dim)
    r = build_poisoned(impl, D, 16, device, **options)
    # one batch element: a tiling is how each batch element is cut into programs, and the batch offsets (the same
    # code in every tiling) are held by the tests above, which rotate two
    q = torch.randn(1, 3, heads[0], D, device=device).to(torch.bfloat16)
    k = torch.randn(1, 3, heads[1], D, device=device).to(torch.bfloat16)
    pos = torch.randint(0, 16, (1, 3), device=device)
    results, g = {}, None
    for tiling in (None, *rt.TILINGS):  # forced ones in small programs: several a batch element, the last partial
        with rt.tuning(tiling=tiling, tile={None: 0, "flat": 64}.get(tiling, 128)):
            assert rt.plan_for(r, q, k, pos).tiling == (tiling or rt.plan_for(r, q, k, pos).tiling)
            results[tiling], g = _grads(r, q, k, pos, g)
    want = _reference(D, 16, q, k, pos, g, **options)
    for tiling, got in results.items():
        assert all(torch.equal(a, b) for a, b in zip(got, results[None], strict=True)), tiling
    if impl == "triton_v4":
        for what, a, b in zip(("yq", "yk", "dq", "dk"), results[None], want, strict=True):
            assert_precise(a, b, torch.bfloat16, what)


def test_flat_tiling_falls_back_where_heads_are_not_contiguous(device):
    """Transposed (B, H, T, D) storage has no token whose heads are one run: flat asked for, the plan takes a pair
    tiling (which copies the tail itself), still within one ulp."""
    r = build_poisoned("triton_v4", 48, 16, device, variant="full", rotary_dim=24)
    q = torch.randn(2, 3, 5, 48, device=device).to(torch.bfloat16).transpose(1, 2)
    k = torch.randn(2, 3, 5, 48, device=device).to(torch.bfloat16).transpose(1, 2)
    with rt.tuning(tiling="flat"):
        assert rt.plan_for(r, q, k).tiling == "chunks" and rt.plan_for(r, q.contiguous(), k).tiling != "flat"
        got, g = _grads(r, q, k)
    assert rt.plan_for(r, q.contiguous(), k.contiguous()).tiling == "flat"
    for what, a, b in zip(("yq", "yk", "dq", "dk"), got, _reference(48, 16, q, k, None, g, rotary_dim=24,
                                                                    variant="full"), strict=True):
        assert_precise(a, b, torch.bfloat16, what)


@pytest.mark.parametrize("tiling", rt.TILINGS)
def test_wide_index_arithmetic_gives_the_same_bits(tiling, monkeypatch, device):
    """The 64-bit index arithmetic of tensors past 2**30 stored elements (forced here: such tensors do not fit a
    CPU test) computes what the 32-bit one does."""
    r = build_poisoned("triton_v4", 48, 16, device, rotary_dim=24 if tiling == "flat" else None)
    q, k = torch.randn(2, 5, 3, 48, device=device), torch.randn(2, 5, 1, 48, device=device)
    with rt.tuning(tiling=tiling):
        narrow = _grads(r, q, k)
        monkeypatch.setattr(launch, "needs_wide", lambda *tensors: True)
        assert dict(rt.plan_for(r, q, k).constexprs)["WIDE"]
        wide = _grads(r, q, k, g=narrow[1])
    assert all(torch.equal(a, b) for a, b in zip(narrow[0], wide[0], strict=True))


# -- the launch: views in place, one launch for q and k, the tuning hook ---------------------------------------
def test_views_are_read_in_place_and_q_and_k_go_in_one_launch(spies, device):
    """The unbind views of a fused projection reach the kernel as they are (same storage, no copy), and q and k
    are rotated by one launch forward and one backward."""
    B, T, H, D = 2, 5, 3, 32
    qkv = torch.randn(B, T, 3 * H * D, device=device, dtype=torch.bfloat16, requires_grad=True)
    q, k, _ = qkv.view(B, T, 3, H, D).unbind(2)
    r = build_poisoned("triton_v4", D, 8, device)
    yq, yk = r(q, k)
    pairs = spies["rope_pairs_kernel"].launches
    assert len(pairs) == 1
    assert pairs[0][1][0] is q and pairs[0][1][1] is k
    assert yq.is_contiguous() and yk.is_contiguous()
    (yq.float().sum() + yk.float().sum()).backward()
    assert len(pairs) == 2 and not spies["rope_flat_kernel"].launches


def test_tuning_hook_sets_launches_inside_its_block_only(device):
    """``rope.triton.tuning``: fields given override, nested blocks keep the outer fields they do not set, leaving a
    block restores; bad settings are refused in one line before the block runs."""
    r = rope.build("triton_v4", 64, 8).to(device)
    q = torch.randn(1, 4, 2, 64, device=device)
    default = rt.plan_for(r, q)
    with rt.tuning(tiling="chunks", num_warps=4):
        with rt.tuning(tile=512):
            inner = rt.plan_for(r, q)
        outer = rt.plan_for(r, q)
    assert (inner.tiling, inner.num_warps, dict(inner.constexprs)["NCH"]) == ("chunks", 4, 512 // 16)
    assert (outer.tiling, outer.num_warps) == ("chunks", 4) and rt.plan_for(r, q) == default
    with rt.tuning(maxnreg=32):
        assert rt.plan_for(r, q).maxnreg == 32 and default.maxnreg == 0
    assert str(default).split(": ")[0] == default.tiling in rt.TILINGS, "the plan says its tiling first"
    for bad, match in (({"tiling": "diagonal"}, "tiling must be one of"), ({"tile": 100}, "tile must be a power"),
                       ({"num_warps": 3}, "num_warps must be"), ({"maxnreg": 8}, "maxnreg must be"),
                       ({"warps": 4}, "unknown setting 'warps'"), ({"tile": "1024"}, "tile must be an int"),
                       ({"num_warps": 4.0}, "num_warps must be an int")):
        with pytest.raises(ValueError, match=match), rt.tuning(**bad):
            pytest.fail("the block ran")


def test_plan_for_takes_a_triton_entry_and_a_call_it_would_accept(device):
    """``plan_for`` answers for calls the module accepts: another entry, or inputs the call refuses, raise the
    module's one-line error instead of a plan for a launch that never happens."""
    q = torch.randn(1, 4, 2, 24, device=device)
    with pytest.raises(ValueError, match="must be a Triton entry"):
        rt.plan_for(rope.build("torch", 24, 8).to(device), q)
    with pytest.raises(ValueError, match="head_dim=24"):
        rt.plan_for(rope.build("triton_v4", 24, 8).to(device), q[..., :8])


class SpillingKernel:
    """Stands in for the pairs kernel as a GPU launch sees it: runs the kernel (here through the interpreter) and
    returns a compiled binary that spills whenever the launch caps its registers (a binary without a packed
    launcher, so the launch keeps none and every call comes back here)."""

    def __init__(self, kernel) -> None:
        self.kernel, self.caps = kernel, []
        self.arg_names = kernel.arg_names

    def __getitem__(self, grid):
        def run(*args, maxnreg: int = 0, **kwargs):
            self.caps.append(maxnreg)
            self.kernel[grid](*args, **kwargs)
            return type("Binary", (), {"n_spills": 8 if maxnreg else 0})()

        return run


@pytest.mark.parametrize("forced,keeps", [(False, True), (False, False), (True, True)])
def test_a_register_cap_that_spills_is_dropped_unless_forced(forced, keeps, monkeypatch, device):
    """The plan caps registers (padded rows on fast memory); where the capped kernel spills, launches after the
    first drop the cap (the plan then says so), kept binaries or not (a launch hook). A cap a benchmark forces
    stays, spills or not."""
    monkeypatch.setattr(launch, "_register_cap", lambda device, traced: 32)
    monkeypatch.setattr(launch, "_keeps_binaries", lambda: keeps)
    monkeypatch.setattr(launch, "_JOBS", {})  # no job an earlier test worked out (uncapped, or its cap dropped)
    spill = SpillingKernel(kernels.rope_pairs_kernel)
    monkeypatch.setattr(kernels, "rope_pairs_kernel", spill)
    r = rope.build("triton_v4", 48, 8).to(device)  # 24 pairs padded to 32 lanes: rows, capped
    q, k = torch.randn(1, 3, 2, 48, device=device), torch.randn(1, 3, 2, 48, device=device)
    want = rope.build("torch", 48, 8).to(device)(q, k)
    with rt.tuning(maxnreg=32 if forced else 0):
        for _ in range(3):
            for got, ref in zip(r(q, k), want, strict=True):
                torch.testing.assert_close(got, ref, atol=1e-6, rtol=1e-6)
        plan = rt.plan_for(r, q, k)
    assert spill.caps == ([32, 32, 32] if forced else [32, 0, 0])
    assert plan.maxnreg == (32 if forced else 0)


def test_tuning_reaches_the_backward_on_autograds_own_thread(spies, device):
    """Autograd runs a CUDA graph's backward on a worker thread of its own: the backward's launch there takes the
    block's settings as the forward's does (here the backward runs on another thread, as autograd's would)."""
    r = build_poisoned("triton_v4", 48, 16, device, rotary_dim=24)  # the plan's own tiling: flat
    q, k = (torch.randn(2, 3, h, 48, device=device, requires_grad=True) for h in (3, 1))
    with rt.tuning(tiling="chunks", tile=64):
        yq, yk = r(q, k)
        worker = threading.Thread(target=lambda: torch.autograd.grad((yq.sum(), yk.sum()), (q, k)))
        worker.start()
        worker.join()
    launches = spies["rope_pairs_kernel"].launches
    assert not spies["rope_flat_kernel"].launches and len(launches) == 2  # forward, backward
    assert launches[1][2]["INVERSE"] and launches[1][2]["NCH"] == 64 // 4


def test_new_outputs_are_poisoned_on_request():
    """The shared output allocation (Triton and CuTeDSL): NaN-filled when the tests' poison hook asks."""
    from rope._launch import new_outputs

    q, k = torch.zeros(1, 2, 3, 4, dtype=torch.bfloat16), torch.zeros(1, 2, 1, 4, dtype=torch.bfloat16)
    oq, ok = new_outputs(q, k, poison=True)
    assert oq.isnan().all() and ok.isnan().all() and oq.shape == q.shape and ok.dtype == k.dtype
    assert new_outputs(q, None)[1] is None


def test_new_tables_reach_the_kernel(device):
    """Tables assigned after the build, or changed in place (dynamic scaling does), are the ones the kernels read,
    the flat tiling's element tables included."""
    for rotary_dim in (None, 8):
        r = build_poisoned("triton_v4", 16, 8, device, variant="full", rotary_dim=rotary_dim)
        q, k = torch.randn(1, 5, 2, 16, device=device), torch.randn(1, 5, 1, 16, device=device)
        r(q, k)
        r.cos, r.sin = torch.ones_like(r.cos), torch.zeros_like(r.sin)  # the identity rotation
        assert all(torch.equal(a, b) for a, b in zip(r(q, k), (q, k), strict=True))
        r.sin.fill_(1.0)
        r.cos.zero_()  # a quarter turn: y1 = x2
        half = (rotary_dim or 16) // 2
        assert torch.equal(r(q)[..., :half], q[..., half:2 * half])


def test_flat_tiling_takes_inference_tensors(device):
    """Tables made under ``torch.inference_mode`` keep no version counter; the element tables are then built
    each call instead of kept."""
    with torch.inference_mode():
        r = rope.build("triton_v4", 16, 8, rotary_dim=8).to(device)
        q = torch.randn(1, 3, 2, 16, device=device)
        assert rt.plan_for(r, q).tiling == "flat"
        assert torch.equal(r(q), r(q))


# -- the fused projection: rotate_qkv ------------------------------------------------------------------------
@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("HQ,HK,pos_kind,D", [(3, 3, "none", 32), (4, 2, "bt", 48), (3, 1, "t", 20)])
def test_rotate_qkv_matches_reference(impl, HQ, HK, pos_kind, D, device):
    """q, k rotated, v the view itself, and d qkv (one buffer) against the float64 reference; triton_v2 bit for bit
    the bf16 torch reference."""
    B, T, dtype = 2, 5, torch.bfloat16
    r = build_poisoned(impl, D, 8, device, variant="full")
    qkv = torch.randn(B, T, (HQ + 2 * HK) * D, device=device).to(dtype).requires_grad_()
    pos = make_positions(pos_kind, B, T, 8, device)
    out = r.rotate_qkv(qkv, HQ, HK, positions=pos)
    assert out[2].data_ptr() == qkv.data_ptr() + (HQ + HK) * D * qkv.element_size()  # v is the view itself
    grads = [torch.randn_like(x) for x in out]
    (dqkv,) = torch.autograd.grad(out, qkv, grads)
    reference = "float64" if impl == "triton_v4" else "bfloat16"
    ref = rope.build("torch", D, 8, variant="full", compute_dtype=reference).to(device)
    x = qkv.detach().to(torch.float64 if impl == "triton_v4" else dtype).requires_grad_()
    want = ref.rotate_qkv(x, HQ, HK, positions=pos)
    (dwant,) = torch.autograd.grad(want, x, [g.to(x.dtype) for g in grads])
    for what, a, b in zip(("q", "k", "v", "d qkv"), (*out, dqkv), (*want, dwant), strict=True):
        if impl == "triton_v4":
            assert_precise(a, b.detach(), dtype, what)
        else:
            assert torch.equal(a, b), what


@pytest.mark.parametrize("rotary_dim", [None, 4])
def test_rotate_qkv_backward_is_one_launch_into_d_qkv(rotary_dim, spies, device):
    """The backward is one launch: dq and dk rotated straight into their slices of d qkv (through the buffer
    itself) and v's gradient, arriving heads-major from an attention, copied beside them by the same launch's third
    programs, a copied tail (``rotary_dim`` < D) included; without a gradient for v its slice is zero."""
    B, T, HQ, HK, D = 2, 5, 4, 2, 16
    r = build_poisoned("triton_v4", D, 8, device, rotary_dim=rotary_dim)
    qkv = torch.randn(B, T, (HQ + 2 * HK) * D, device=device, requires_grad=True)
    yq, yk, v = r.rotate_qkv(qkv, HQ, HK)
    wv = torch.randn(B, HK, T, D, device=device)
    before = {name: len(spy.launches) for name, spy in spies.items()}
    (dqkv,) = torch.autograd.grad(yq.sum() + yk.sum() + (v.transpose(1, 2) * wv).sum(), qkv)
    (grid, args, _), = (x for name, spy in spies.items() for x in spy.launches[before[name]:])
    assert args[2] is not None  # v's gradient, copied by the same launch
    assert args[3].data_ptr() == dqkv.data_ptr() and args[4] is None  # dk through d qkv, after dq
    assert torch.equal(dqkv[..., (HQ + HK) * D:].view(B, T, HK, D), wv.transpose(1, 2))
    ref = rope.build("torch", D, 8, compute_dtype="float64", rotary_dim=rotary_dim).to(device)
    x = qkv.detach().double().requires_grad_()
    rq, rk, rv = ref.rotate_qkv(x, HQ, HK)
    (want,) = torch.autograd.grad(rq.sum() + rk.sum() + (rv.transpose(1, 2) * wv.double()).sum(), x)
    assert_precise(dqkv, want, torch.float32, "d qkv")
    yq, yk, v = r.rotate_qkv(qkv, HQ, HK)
    (dqkv,) = torch.autograd.grad(yq.sum() + yk.sum(), qkv)
    assert not dqkv.isnan().any() and not dqkv[..., (HQ + HK) * D:].any()


@pytest.mark.parametrize("layout", ["heads_major", "token_major", "strided"])
def test_qkv_backward_copies_v_of_any_layout(layout, device):
    """v's gradient reaches d qkv whatever its layout: dense heads-major or token-major (the kernel derives its
    strides from the token stride), or a strided view (copied dense first)."""
    B, T, HQ, HK, D = 2, 5, 4, 2, 16
    r = build_poisoned("triton_v4", D, 8, device)
    gq, gk = (torch.randn(B, T, h, D, device=device) for h in (HQ, HK))
    gv = {"heads_major": torch.randn(B, HK, T, D, device=device).transpose(1, 2),
          "token_major": torch.randn(B, T, HK, D, device=device),
          "strided": torch.randn(B, T, HK, 2 * D, device=device)[..., 1::2]}[layout]
    dqkv = launch.qkv_backward(gq, gk, gv, r.cos, r.sin, None, r.rotation, poison=True)
    assert torch.equal(dqkv[..., (HQ + HK) * D:].view(B, T, HK, D), gv)
    want = launch.qkv_backward(gq, gk, gv.contiguous(), r.cos, r.sin, None, r.rotation)
    assert torch.equal(dqkv, want)


@pytest.mark.parametrize("pos_kind", ["none", "t", "bt"])
def test_batches_beyond_the_grid_take_several_launches(pos_kind, spies, monkeypatch, device):
    """More batch elements than the grid's batch axis holds: launches of at most that many, the same result."""
    B, T, H, D = 5, 3, 2, 16
    r = build_poisoned("triton_v4", D, 8, device)
    q, k = (torch.randn(B, T, H, D, device=device) for _ in range(2))
    pos = make_positions(pos_kind, B, T, 8, device)
    want = r(q, k, positions=pos)
    monkeypatch.setattr(launch, "MAX_GRID_BATCH", 2)
    before = sum(len(spy.launches) for spy in spies.values())
    got = r(q, k, positions=pos)
    assert sum(len(spy.launches) for spy in spies.values()) - before == 3
    assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))


def test_rotate_qkv_without_grad(device):
    r = build_poisoned("triton_v4", 16, 8, device)
    qkv = torch.randn(2, 5, 3 * 2 * 16, device=device)
    with torch.no_grad():
        yq, yk, v = r.rotate_qkv(qkv.requires_grad_(), 2)
    want = r(*qkv.detach().view(2, 5, 3, 2, 16).unbind(2)[:2])
    assert torch.equal(yq, want[0]) and torch.equal(yk, want[1]) and yq.grad_fn is None


# -- torch.compile: ops with fakes and autograd, no graph breaks -------------------------------------------------
def test_ops_pass_opcheck(device):
    r = rope.build("triton_v4", 16, 8).to(device)
    q = torch.randn(1, 3, 2, 16, device=device, requires_grad=True)
    k = torch.randn(1, 3, 1, 16, device=device, requires_grad=True)
    pos = torch.tensor([2, 0, 5], device=device)
    flags = (True, False, False)  # partial, low_precision, interleaved
    torch.library.opcheck(torch.ops.ropelab.rope.default, (q, k, r.cos, r.sin, pos, *flags, False, True))
    qkv = torch.randn(3, 4 * 16, device=device)  # the fused forward takes the (B T, W) matmul output
    torch.library.opcheck(torch.ops.ropelab.rope_qkv.default, (qkv, 3, r.cos, r.sin, pos, 2, 1, *flags, False))
    gq, gk = torch.randn(1, 3, 2, 16, device=device), torch.randn(1, 3, 1, 16, device=device)
    gv = torch.randn(1, 1, 3, 16, device=device).transpose(1, 2)
    torch.library.opcheck(torch.ops.ropelab.rope_qkv_backward.default, (gq, gk, gv, r.cos, r.sin, None, *flags, False))


@pytest.mark.parametrize("impl", IMPLS)
def test_triton_ops_run_what_the_custom_ops_run(impl, device):
    """The triton ops compiled graphs call on a GPU (here run eagerly: the interpreter cannot be traced) launch
    what the custom ops launch, bit for bit: forward, backward, fused forward and fused backward."""
    traced = ops.traced_ops()
    if traced is None:
        pytest.skip("this torch has no torch.library.triton_op")
    r = rope.build(impl, 48, 16).to(device)
    q, k, gv = (torch.randn(2, 5, h, 48, device=device, dtype=torch.bfloat16) for h in (3, 1, 1))
    qkv, pos = torch.cat([q, k, gv], 2).flatten(2), torch.randint(0, 16, (5,), device=device)
    flags = (*r.rotation, False)
    for name, args in (("rope", (q, k, r.cos, r.sin, pos, *flags[:3], True, False)),
                       ("qkv", (qkv, 5, r.cos, r.sin, pos, 3, 1, *flags)),
                       ("qkv_backward", (q, k, gv, r.cos, r.sin, None, *flags))):
        got, want = ((x,) if torch.is_tensor(x) else x for x in (getattr(traced, name)(*args),
                                                                 getattr(ops.CUSTOM_OPS, name)(*args)))
        assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True)), name


@pytest.mark.parametrize("impl,entry,dynamic", [("triton_v4", "views", False), ("triton_v2", "fused", False),
                                                 ("triton_v4", "fused", True)])
def test_compiles_without_graph_breaks(impl, entry, dynamic, device):
    """fullgraph tracing of both entry points through the ops (fakes, autograd), static and dynamic shapes; the
    compiled results and gradients equal the eager ones bit for bit, with and without grad."""
    r = build_poisoned(impl, 16, 8, device, variant="full")
    qkv = torch.randn(2, 6, (2 + 2 * 1) * 16, device=device, requires_grad=True)
    pos = torch.randint(0, 8, (6,), device=device)

    def views(x):
        return r(*x[..., :48].view(2, 6, 3, 16).split([2, 1], dim=2), positions=pos)

    def fused(x):
        q, k, v = r.rotate_qkv(x, 2, 1, positions=pos)
        return q, k, v * 1

    fn = views if entry == "views" else fused
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    compiled = torch.compile(fn, backend="aot_eager", fullgraph=True, dynamic=dynamic)
    got, want = compiled(qkv), fn(qkv)
    grads = [torch.randn_like(x) for x in got]
    assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
    assert torch.equal(torch.autograd.grad(got, qkv, grads)[0], torch.autograd.grad(want, qkv, grads)[0])
    with torch.no_grad():
        assert all(torch.equal(a, b) for a, b in zip(compiled(qkv), fn(qkv), strict=True))
    assert not torch._dynamo.utils.counters["graph_break"]


def test_compiled_rotate_qkv_of_a_strided_projection(device):
    """A projection whose elements are not one apart (here a transposed buffer) rotates under compile as eagerly,
    values and gradients: the compiled ops read qkv by its row strides."""
    r = build_poisoned("triton_v4", 16, 8, device)
    qkv = torch.randn(64, 2, 6, device=device).permute(1, 2, 0).requires_grad_()  # (2, 6, 64), element stride 12

    def fused(x):
        q, k, v = r.rotate_qkv(x, 2, 1)
        return q, k, v * 1

    torch._dynamo.reset()
    got, want = torch.compile(fused, backend="aot_eager", fullgraph=True)(qkv), fused(qkv)
    assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
    grads = [torch.randn_like(x) for x in got]
    assert torch.equal(torch.autograd.grad(got, qkv, grads)[0], torch.autograd.grad(want, qkv, grads)[0])
    with torch.no_grad():
        assert all(torch.equal(a, b) for a, b in zip(torch.compile(fused, backend="aot_eager")(qkv), want,
                                                      strict=True))


def test_compiled_rotate_qkv_is_one_launch_each_way(spies, device):
    """A compiled block (``rotate_qkv``, then an attention's heads-major view of v) launches one kernel forward and
    one backward, whose d qkv is the float64 reference's (here the graph calls the custom ops: the interpreter
    cannot be traced; ``test_triton_gpu.py`` checks Inductor's own code)."""
    if ops.compiled_ops(torch.zeros(1, device=device)) is not ops.CUSTOM_OPS:
        pytest.skip("on a GPU the graph launches the kernels itself (wrap_triton), past the spies: "
                    "test_triton_gpu.py counts its launches")
    B, T, H, D = 2, 6, 2, 16
    r = build_poisoned("triton_v4", D, 8, device)
    qkv = torch.randn(B, T, 3 * H * D, device=device, requires_grad=True)
    w = torch.randn(B, H, T, D, device=device)

    def block(x, rotary):
        q, k, v = rotary.rotate_qkv(x, H)
        return (q.transpose(1, 2) * w).sum() + (k.transpose(1, 2) * w).sum() + (v.transpose(1, 2) * w).sum()

    torch._dynamo.reset()
    loss = torch.compile(block, backend="aot_eager", fullgraph=True)(qkv, r)
    assert len(spies["rope_pairs_kernel"].launches) == 1
    (dqkv,) = torch.autograd.grad(loss, qkv)
    assert len(spies["rope_pairs_kernel"].launches) == 2 and spies["rope_pairs_kernel"].launches[1][1][2] is not None
    x = qkv.detach().double().requires_grad_()
    (want,) = torch.autograd.grad(block(x, rope.build("torch", D, 8, compute_dtype="float64").to(device)), x)
    assert_precise(dqkv, want, torch.float32, "d qkv")


def test_compiled_ops_are_the_custom_ops_off_cuda(device):
    """Compiled graphs take the triton ops only where Inductor can launch the kernel itself (CUDA, no
    interpreter); here the custom ops."""
    x = torch.randn(1, 2, 3, 16, device=device)
    assert ops.compiled_ops(x) is (ops.TRACED_OPS if x.is_cuda and not launch.INTERPRETING else ops.CUSTOM_OPS)
    assert ops.flat_projection(torch.randn(2, 3, 8)).shape == (6, 8)
    assert ops.flat_projection(torch.randn(3, 2, 8).transpose(0, 1)).shape == (2, 3, 8)  # batch and time apart


def test_static_launch_is_the_default_unless_the_environment_says(monkeypatch):
    """A GPU build's triton ops have Inductor launch user-defined Triton kernels with its static launcher (this
    process's config, and the environment its compile workers start from), unless the environment already says.
    Stand-ins for both: on a GPU, changing the process's own Inductor config here broke later compiles in the same
    test process (the setting reported as not existing)."""
    import types

    import torch._inductor

    name, key = "static_launch_user_defined_triton_kernels", "TORCHINDUCTOR_STATIC_LAUNCH_USER_DEFINED_TRITON_KERNELS"
    config = types.SimpleNamespace(**{name: False})
    monkeypatch.setattr(torch._inductor, "config", config)
    monkeypatch.setattr(os, "environ", {k: v for k, v in os.environ.items() if k != key})
    ops.static_launch_by_default()
    assert os.environ[key] == "1" and getattr(config, name) is True
    os.environ[key] = "0"
    monkeypatch.setattr(config, name, False)
    ops.static_launch_by_default()
    assert os.environ[key] == "0" and getattr(config, name) is False


# -- errors, before any launch ------------------------------------------------------------------------------
@pytest.mark.parametrize("impl", IMPLS)
def test_cpu_tensor_without_interpreter(impl, monkeypatch, no_launch):
    monkeypatch.setattr("rope._launch.INTERPRETING", False)  # a process started without TRITON_INTERPRET=1
    r = build_poisoned(impl, 32, 8, "cpu")
    with pytest.raises(ValueError, match=r"q is on cpu.*CUDA.*TRITON_INTERPRET=1"):
        r(torch.randn(1, 4, 2, 32), torch.randn(1, 4, 2, 32))
    assert rope.get(impl).unavailable_reason(torch.device("cpu")).startswith(f"{impl} runs on a CUDA GPU, or on the "
                                                                               "CPU under Triton's interpreter")
    assert rope.get(impl).unavailable_reason(torch.device("cuda")) is None


@pytest.mark.parametrize("impl", IMPLS)
def test_meta_tensor_is_refused_in_one_line(impl, no_launch):
    """A meta tensor (shape inference, a model built on the meta device) is refused like any non-CUDA tensor, under
    the interpreter too: the kernels have no data to read."""
    r = build_poisoned(impl, 32, 8, "cpu").to("meta")
    x = torch.randn(1, 4, 2, 32, device="meta")
    with pytest.raises(ValueError, match=r"q is on meta.*CUDA"):
        r(x, x)


@pytest.mark.parametrize("dtype", [torch.int32, torch.float64])
def test_unsupported_dtype(dtype, device, no_launch):
    r = build_poisoned("triton_v4", 32, 8, device)
    x = torch.ones(1, 4, 2, 32, device=device, dtype=dtype)
    with pytest.raises(TypeError, match="floating|supports float32, bfloat16 and float16"):
        r(x, x)


def test_bad_calls_are_refused_before_any_launch(device, no_launch):
    r = build_poisoned("triton_v4", 32, 8, device)
    q = torch.randn(2, 4, 2, 32, device=device)
    with pytest.raises(ValueError, match="agree in B, T and D"):
        r(q, q[:1])
    if device.type == "cpu":  # on a GPU out-of-range positions give NaN rows instead (test_conformance.py)
        with pytest.raises(ValueError, match="positions must lie in"):
            r(q, q, positions=torch.tensor([0, 1, 2, 8], device=device))
    with pytest.raises(ValueError, match="qkv must have shape"):
        r.rotate_qkv(torch.randn(2, 4, 90, device=device), 2, 1)


def test_describe_and_config_files():
    OmegaConf = pytest.importorskip("omegaconf").OmegaConf
    assert rope.build("triton_v2", 32, 8, variant="full", layout="interleaved", rotary_dim=16).describe() == {
        "rope": "triton_v2", "variant": "full", "compute_dtype": "input", "layout": "interleaved",
        "rotary_dim": 16, "scaling": "none"}
    for name in ("triton_v4", "triton_v2", "triton_v4_full"):
        cfg = OmegaConf.load(ROOT / "conf" / "rope" / f"{name}.yaml")
        r = rope.build(cfg.name, 64, 16, base=cfg.base, **{k: v for k, v in cfg.items() if k not in ("name", "base")})
        assert r.registry_name == cfg.name and r.describe()["compute_dtype"] == ("input" if "v2" in name else "float32")


def test_without_triton_names_stay_and_build_explains():
    code = ("import sys; sys.modules['triton'] = None\n"
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
            "print('ok')\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr


# -- launching on the tensors' GPU -------------------------------------------------------------------------------
def test_on_device_of_switches_only_for_another_gpu(monkeypatch):
    """The helper every Python-launched kernel goes under (Triton, Liger, CuTeDSL): a switch to the tensor's GPU
    where it is not the current one, nothing otherwise (and nothing for CPU tensors)."""
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
