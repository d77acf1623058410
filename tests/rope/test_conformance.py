"""Conformance: every registered RoPE implementation computes the reference function.

The entries are read from ``rope.available()`` when this file is imported, so an implementation is
tested the moment it is registered (plus ``EXTRA_OPTIONS``: option sets that change the arithmetic).
Each is checked against ``formula64``, an independent float64 transcription of docs/usage.md's
"Reference semantics" (nothing imported from ``rope``): forward and backward (against the formula's
autograd), both variants, positions None / (T,) / (B, T), strided views (a fused qkv projection,
a transposed layout, a stride-2 head dim), k with fewer heads, ``rotate_qkv``, q alone, odd sizes,
outputs poisoned with NaN (``poison_outputs``), inputs left unwritten, outputs that are each call's own new
tensors (not a buffer kept from call to call, nor q or k), the module under ``torch.compile``
(forward and backward), and the errors of bad builds and bad calls. An entry that runs
another's code on some input dtype (``SAME_CODE``) is tested on that dtype as the other.

An entry declares its arithmetic through ``describe()["compute_dtype"]``, and that picks its bound:

* ``"none"``: the identity; the outputs are the input tensors themselves.
* ``"float32"`` (the base class's default) or ``"float64"``: float32 inputs within 2e-6 absolute
  of the formula (inputs are standard normal); bf16 (and fp16) inputs within one ulp of the
  formula rounded once, plus 2**-22 (|x1| + |x2|) for the float32 evaluation (a plain float32
  ``x1*c + x2*s`` is no more accurate than that where the two products nearly cancel, which makes
  the torch reference 2-21 ulps off at about 1 element in 2 million; ``test_triton.py`` holds
  ``triton_v4`` to one ulp everywhere).
* low precision (``"input"`` on bf16/fp16 inputs, ``"bfloat16"``, ``"float16"``): within
  5 u (|x1| + |x2|), u the unit roundoff of the arithmetic (2**-8 for bf16, 2**-11 for fp16):
  the input, cos/sin, each product and the sum are rounded once each (4 u at worst), plus a margin.

The pair scale |x1| + |x2| is that of the rotated pair (of the output gradient, for gradients).
With ``variant="partial"`` the zero-frequency quarter of each half must pass through bit for bit,
unless the arithmetic is coarser than the input (torch computing in bf16 on float32 inputs).
Shapes are small: on a CPU the Triton entries run under the Triton interpreter.
"""

from __future__ import annotations

import inspect
import itertools
import math
import os
import re

import pytest
import torch
from helpers import FLOAT32_SAME_AS

import rope
from rope._numerics import ulp

from .cases import LAYOUTS, POSITIONS, make_inputs, make_positions, output_grads

#: Option sets, beyond each entry's defaults, that change its arithmetic (and so its bound).
EXTRA_OPTIONS = {"torch": [{"compute_dtype": "bfloat16"}]}


def _entries() -> list:
    out = [pytest.param(name, {}, id=name) for name in rope.available()]
    for name, option_sets in EXTRA_OPTIONS.items():
        if name in rope.available():
            out += [pytest.param(name, opts, id="-".join([name, *(f"{k}={v}" for k, v in opts.items())]))
                    for opts in option_sets]
    return out


ENTRIES = _entries()
FLOAT32_ATOL = 2e-6
FLOAT32_EVAL = 2.0**-22  # relative to |x1| + |x2|: float32 evaluation of x1*c + x2*s
LOW_PRECISION_UNITS = 5  # in unit roundoffs, relative to |x1| + |x2|
DTYPES = (torch.float32, torch.bfloat16, torch.float16)
VARIANTS = ("partial", "full")
HEAD_DIMS = (48, 16, 80)

#: (entry, input dtype) -> the entry whose code the entry runs on that dtype, so that its cases there repeat the
#: other's (helpers.FLOAT32_SAME_AS: triton_v2 on float32 inputs launches triton_v4's kernels with triton_v4's
#: arguments). Such cases run under the other entry only; the entry's cases in its other dtypes stay.
SAME_CODE = {(name, torch.float32): other for name, other in FLOAT32_SAME_AS.items()}


def _runs_as_another(entry, dtype: torch.dtype) -> bool:
    name, opts = entry.values
    return not opts and SAME_CODE.get((name, dtype)) in rope.available()


def with_entries(cases: list, dtype_of, ids: list[str]) -> list:
    """(name, opts, case) for every entry and case, less the cases whose dtype SAME_CODE runs under another entry."""
    return [pytest.param(*entry.values, case, id=f"{entry.id}-{case_id}") for entry in ENTRIES
            for case, case_id in zip(cases, ids, strict=True) if not _runs_as_another(entry, dtype_of(case))]


def _dtype_id(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


#: Each entry with each dtype (the tests' dtype parameter), SAME_CODE's repeats left out.
ENTRY_DTYPES = with_entries(list(DTYPES), lambda d: d, [_dtype_id(d) for d in DTYPES])


# -- the independent formula ------------------------------------------------------------------------
def formula64(x: torch.Tensor, positions: torch.Tensor, base: float, variant: str, layout: str = "half",
              rotary_dim: int | None = None) -> torch.Tensor:
    """Independent float64 RoPE, from the definition: differentiable, so its autograd gives gradients.

    The first R = ``rotary_dim`` (default D) elements rotate, with the frequencies of a head of
    size R; pair i is (i, i + R/2) for ``layout="half"``, (2i, 2i + 1) for ``"interleaved"``; the
    rest passes through.
    """
    D = x.shape[-1]
    R = D if rotary_dim is None else rotary_dim
    half = R // 2
    if variant == "partial":
        q = R // 4
        freqs = [(1.0 / base) ** (i / (q - 1) if q > 1 else 0.0) for i in range(q)] + [0.0] * q
    else:
        freqs = [base ** (-2.0 * i / R) for i in range(half)]
    f = torch.tensor(freqs, dtype=torch.float64, device=x.device)
    theta = positions.double()[..., None] * f  # (T, half) or (B, T, half)
    cos, sin = theta.cos(), theta.sin()
    if cos.dim() == 2:
        cos, sin = cos[None, :, None, :], sin[None, :, None, :]
    else:
        cos, sin = cos[:, :, None, :], sin[:, :, None, :]
    x = x.double()
    first, second = pair_index(R, layout)
    x1, x2 = x[..., first], x[..., second]
    y1, y2 = x1 * cos + x2 * sin, -x1 * sin + x2 * cos
    out = [None] * D
    for j in range(half):
        out[first[j]], out[second[j]] = y1[..., j], y2[..., j]
    for j in range(R, D):
        out[j] = x[..., j]
    return torch.stack(out, dim=-1)


def pair_index(R: int, layout: str) -> tuple[list[int], list[int]]:
    """The element indices of the first and second member of each rotated pair."""
    if layout == "half":
        return list(range(R // 2)), list(range(R // 2, R))
    return list(range(0, R, 2)), list(range(1, R, 2))


def pair_scale(x: torch.Tensor, layout: str = "half", rotary_dim: int | None = None) -> torch.Tensor:
    """|x1| + |x2| of the pair each element belongs to (|x| for passed-through elements), float64."""
    a = x.detach().double().abs()
    R = x.shape[-1] if rotary_dim is None else rotary_dim
    first, second = pair_index(R, layout)
    s = a[..., first] + a[..., second]
    out = a.clone()
    out[..., first], out[..., second] = s, s
    return out


# -- building an entry and judging its output -----------------------------------------------------------
def build(name: str, opts: dict, D: int, max_seq_len: int, device: torch.device,
          variant: str = "partial") -> rope.RotaryEmbedding:
    """The entry on ``device`` with the NaN-poison hook on; skipped where it cannot run."""
    reason = rope.get(name).unavailable_reason(device)
    if reason is not None:
        pytest.skip(reason)
    r = rope.build(name, D, max_seq_len, variant=variant, **opts).to(device)
    r.poison_outputs = True
    return r


def arithmetic(r: rope.RotaryEmbedding, dtype: torch.dtype) -> torch.dtype | None:
    """The arithmetic ``r`` is held to on ``dtype`` inputs (it picks the bound); None = identity.

    A float32 (or float64) computation is held to its own dtype whatever the input's: it rounds once into a bf16 or
    fp16 output, so it must land within one ulp of the exact result, not within the low-precision bound (taking the
    coarser of the two here would give every float32 entry on bf16 inputs the bound of bf16 arithmetic, and an entry
    declaring float32 while computing in bf16 would pass). A low-precision computation is held to the coarser of it
    and the input (torch computing in float16 still rounds a bf16 output to bf16).
    """
    declared = r.describe()["compute_dtype"]
    if declared == "none":
        return None
    compute = dtype if declared == "input" else getattr(torch, declared)
    if torch.finfo(compute).eps <= torch.finfo(torch.float32).eps:
        return compute
    return compute if torch.finfo(compute).eps > torch.finfo(dtype).eps else dtype


def coarser(arith: torch.dtype, dtype: torch.dtype) -> bool:
    """Whether arithmetic ``arith`` is coarser than the input ``dtype``: then even a zero-frequency pair comes out
    rounded, not bit for bit."""
    return torch.finfo(arith).eps > torch.finfo(dtype).eps


def assert_conforms(out: torch.Tensor, ref64: torch.Tensor, scale: torch.Tensor, arith: torch.dtype,
                    dtype: torch.dtype, what: str) -> None:
    """``out`` has ``dtype`` and lies within the bound of its arithmetic (module docstring) of ``ref64``."""
    assert out.dtype == dtype, f"{what}: dtype {out.dtype}, expected the input's {dtype}"
    assert out.shape == ref64.shape, f"{what}: shape {tuple(out.shape)}, expected {tuple(ref64.shape)}"
    assert not out.isnan().any(), f"{what}: {int(out.isnan().sum())} elements not written (NaN poison left)"
    err = (out.double() - ref64).abs()
    if torch.finfo(arith).eps > torch.finfo(torch.float32).eps:
        bound = LOW_PRECISION_UNITS * torch.finfo(arith).eps / 2 * scale
    elif dtype == torch.float32:
        bound = torch.full_like(err, FLOAT32_ATOL)
    else:
        rounded = ref64.to(dtype)
        err = (out.double() - rounded.double()).abs()
        bound = ulp(rounded, dtype) + FLOAT32_EVAL * scale
    bad = err > bound
    # a float32 bound missed on low-precision inputs only: most likely arithmetic in the input dtype, undeclared
    hint = ("; an implementation computing in the input's precision declares it: describe()['compute_dtype'] = "
            "'input'" if arith in (torch.float32, torch.float64) and dtype != torch.float32 else "")
    assert not bad.any(), (
        f"{what} ({dtype}, {arith} arithmetic): {int(bad.sum())} of {bad.numel()} elements beyond the bound, "
        f"worst {(err / bound).max().item():.3g}x the bound (max abs error {err.max().item():.3g}){hint}"
    )


def assert_passes_through(y: torch.Tensor, x: torch.Tensor) -> None:
    """variant=partial: the zero-frequency quarter of each half comes out bit for bit."""
    quarter = x.shape[-1] // 4
    assert torch.equal(y[..., quarter : 2 * quarter], x[..., quarter : 2 * quarter].detach())
    assert torch.equal(y[..., 3 * quarter :], x[..., 3 * quarter :].detach())


def assert_inputs_unchanged(names: tuple[str, ...], inputs: tuple[torch.Tensor, ...],
                            before: list[torch.Tensor]) -> None:
    """The call left its inputs as they were: an implementation that writes its result into q or k (or into the
    projection they are views of) corrupts v and the caller's tensors, and would otherwise show as a wrong forward,
    the formula being evaluated on the overwritten input."""
    for name, x, was in zip(names, inputs, before, strict=True):
        assert torch.equal(x.detach(), was), f"{name}: the call wrote into its input (outputs must be new tensors)"


def _leaf64(x: torch.Tensor) -> torch.Tensor:
    return x.detach().double().requires_grad_()


def check_against_formula(r: rope.RotaryEmbedding, memory: str, pos_kind: str, dtype: torch.dtype, variant: str,
                          B: int, T: int, HQ: int, HK: int, max_seq_len: int, device: torch.device,
                          layout: str = "half", R: int | None = None):
    """Rotate q, k (in memory layout ``memory``) with ``r`` forward and backward and hold all four
    results to formula64's bound. Returns ((yq, yk, dq, dk), (q, k, gq, gk), positions, arithmetic),
    or None for the identity (after checking it returned its inputs)."""
    q, k = make_inputs(memory, B, T, HQ, HK, r.head_dim, dtype, device)
    pos = make_positions(pos_kind, B, T, max_seq_len, device)
    before = [x.detach().clone() for x in (q, k)]
    yq, yk = r(q, k, positions=pos)
    assert_inputs_unchanged(("q", "k"), (q, k), before)
    arith = arithmetic(r, dtype)
    if arith is None:
        assert yq is q and yk is k
        return None
    gq, gk = output_grads(yq.shape, yk.shape, dtype, device)
    dq, dk = torch.autograd.grad((yq, yk), (q, k), (gq, gk))
    q64, k64 = _leaf64(q), _leaf64(k)
    rows = torch.arange(T, device=device) if pos is None else pos
    rq, rk = (formula64(x, rows, r.base, variant, layout, R) for x in (q64, k64))
    rdq, rdk = torch.autograd.grad((rq, rk), (q64, k64), (gq.double(), gk.double()))
    for what, out, ref, like in (("q forward", yq, rq, q), ("k forward", yk, rk, k),
                                 ("q backward", dq, rdq, gq), ("k backward", dk, rdk, gk)):
        assert_conforms(out, ref, pair_scale(like, layout, R), arith, dtype, what)
    return (yq, yk, dq, dk), (q, k, gq, gk), pos, arith


# -- forward and backward ----------------------------------------------------------------------------
# Every (dtype, variant, layout) once, the position kinds and head dims taken in turn: all 20
# (layout, positions) pairs appear, each head dim with both variants and dtypes.
CASES = [
    (dtype, variant, layout, POSITIONS[i % len(POSITIONS)], HEAD_DIMS[i % len(HEAD_DIMS)])
    for i, (dtype, variant, layout) in enumerate(itertools.product(DTYPES, VARIANTS, LAYOUTS))
]


def _case_id(case) -> str:
    dtype, variant, layout, pos, D = case
    return f"{str(dtype).removeprefix('torch.')}-{variant}-{layout}-pos_{pos}-D{D}"


@pytest.mark.parametrize("name,opts,case", with_entries(CASES, lambda c: c[0], [_case_id(c) for c in CASES]))
def test_forward_and_backward_match_formula(name, opts, case, device):
    """q, k in a memory layout (GQA: 2 k heads for 3 q heads), forward and gradients against formula64."""
    dtype, variant, layout, pos_kind, D = case
    B, T, HQ, HK, max_seq_len = 2, 7, 3, 2 if layout == "gqa" else 3, 12
    r = build(name, opts, D, max_seq_len, device, variant)
    got = check_against_formula(r, layout, pos_kind, dtype, variant, B, T, HQ, HK, max_seq_len, device)
    if got is None:
        return
    (yq, yk, dq, dk), (q, k, gq, gk), pos, arith = got
    if variant == "partial" and not coarser(arith, dtype):
        assert_passes_through(yq, q)
        assert_passes_through(yk, k)
    if layout == "gqa":  # k's rotation does not depend on q (or its head count)
        assert torch.equal(r(k.detach(), positions=pos), yk.detach())


@pytest.mark.parametrize(
    "variant,D",
    [("partial", d) for d in (16, 32, 48, 64, 80, 128, 256)]
    + [("full", d) for d in (16, 18, 32, 48, 64, 80, 128, 256)],
)
@pytest.mark.parametrize("name,opts", [e for e in ENTRIES if not _runs_as_another(e, torch.float32)])
def test_head_dims(name, opts, variant, D, device):
    """Head dims from 16 to 256 (80: no power of two; 18: full only), T=37, float32; the tables. One batch element:
    a head dim changes how a token's heads are rotated, not where a batch element starts (the tests above and
    below rotate two)."""
    T, max_seq_len = 37, 64
    r = build(name, opts, D, max_seq_len, device, variant)
    assert r.cos.dtype == torch.float32 and r.cos.shape == (max_seq_len, D // 2)
    assert r.sin.dtype == torch.float32 and r.sin.shape == (max_seq_len, D // 2)
    x = torch.randn(1, T, 3, D, device=device)
    y = r(x)
    arith = arithmetic(r, x.dtype)
    if arith is None:
        assert y is x
        return
    ref = formula64(x, torch.arange(T, device=device), r.base, variant)
    assert_conforms(y, ref, pair_scale(x), arith, x.dtype, "forward")
    if variant == "partial":  # the first quarter does rotate (beyond position 0), the rest passes
        assert not torch.allclose(y[:, 1:, :, : D // 4], x[:, 1:, :, : D // 4])
        if not coarser(arith, x.dtype):
            assert_passes_through(y, x)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("name,opts", [e for e in ENTRIES if not _runs_as_another(e, torch.float32)])
def test_the_base_and_the_scaling_built_are_the_ones_rotated_by(name, opts, variant, device):
    """Every other test builds with the default base 10000: an implementation computing its own frequencies with
    that base, rather than reading the tables the module was built with, would pass them all and train
    ``rope.base=500000`` (or a scaled context) with the wrong rotation. Built with base 500 (and, where the entry
    takes ``scaling``, linear scaling by 4: positions divided by 4), against formula64 of the same."""
    check_base_and_scaling(lambda **extra: build(name, {**opts, **extra}, 16, 12, device, variant), variant, device)


def check_base_and_scaling(make, variant: str, device: torch.device) -> None:
    """``make(base=..., scaling=...)`` (a head_dim 16, max_seq_len 12 module) rotates by the tables of that base and
    scaling, or refuses ``scaling`` by name and rotates by that base."""
    D, T, max_seq_len, base = 16, 7, 12, 500.0
    try:
        r, factor = make(base=base, scaling={"type": "linear", "factor": 4.0}), 4.0
    except rope.RopeArgumentError as e:  # an entry without the option refuses it by name
        assert e.argument == "scaling", e
        r, factor = make(base=base), 1.0
    x = torch.randn(2, T, 3, D, device=device)
    pos = torch.randint(0, max_seq_len, (2, T), device=device)
    y = r(x, positions=pos)
    arith = arithmetic(r, x.dtype)
    if arith is None:
        assert y is x
        return
    ref = formula64(x, pos.double() / factor, base, variant)
    assert_conforms(y, ref, pair_scale(x), arith, x.dtype, f"forward with base={base:g}, linear scaling x{factor:g}")


@pytest.mark.parametrize("name,opts", ENTRIES)
def test_a_model_cast_to_another_dtype_keeps_float32_tables(name, opts, device):
    """``module.to(bf16)`` / ``.half()`` / ``.double()`` (a model cast whole) leaves the tables float32 and the
    rotation unchanged; a move to a device still moves them."""
    r = build(name, opts, 32, 16, device)
    x = torch.randn(2, 5, 3, 32, device=device)
    want = r(x.clone())
    for cast in (lambda m: m.to(torch.bfloat16), lambda m: m.half(), lambda m: m.double(),
                 lambda m: m.to(device, torch.bfloat16)):
        c = cast(build(name, opts, 32, 16, device))
        assert c.cos.dtype == c.sin.dtype == torch.float32 and c.cos.device == x.device
        assert torch.equal(c(x.clone()), want)


@pytest.mark.parametrize("name,opts", ENTRIES)
def test_positions_select_cache_rows(name, opts, device):
    """(T,) positions with repeats and the last cache row, and (B, T) positions over the whole cache."""
    D, max_seq_len = 32, 64
    r = build(name, opts, D, max_seq_len, device)
    x = torch.randn(2, 5, 3, D, device=device)
    for pos in (torch.tensor([7, 0, 63, 12, 12], device=device), torch.randint(0, 64, (2, 5), device=device)):
        y = r(x, positions=pos)
        arith = arithmetic(r, x.dtype)
        if arith is None:
            assert y is x
            continue
        ref = formula64(x, pos, r.base, "partial")
        assert_conforms(y, ref, pair_scale(x), arith, x.dtype, f"positions {tuple(pos.shape)}")


@pytest.mark.parametrize("name,opts,dtype", ENTRY_DTYPES)
def test_q_alone(name, opts, dtype, device):
    """r(q) returns one tensor: forward and gradient against the formula."""
    D, T = 32, 13
    r = build(name, opts, D, 16, device)
    q = torch.randn(2, T, 5, D, device=device).to(dtype).requires_grad_()
    y = r(q)
    assert isinstance(y, torch.Tensor) and y.shape == q.shape and y.dtype == dtype
    arith = arithmetic(r, dtype)
    if arith is None:
        assert y is q
        return
    g = torch.randn(y.shape, device=device).to(dtype)
    (dq,) = torch.autograd.grad(y, q, g)
    q64 = _leaf64(q)
    y64 = formula64(q64, torch.arange(T, device=device), r.base, "partial")
    (dq64,) = torch.autograd.grad(y64, q64, g.double())
    assert_conforms(y, y64, pair_scale(q), arith, dtype, "forward")
    assert_conforms(dq, dq64, pair_scale(g), arith, dtype, "backward")


def _bytes_of(t: torch.Tensor) -> torch.Tensor:
    """The address of every byte that ``t``'s elements occupy (from its storage, offset and strides), on the CPU."""
    size, storage = t.element_size(), t.untyped_storage()
    first = torch.arange(storage.nbytes() // size).as_strided(t.shape, t.stride(), t.storage_offset()).flatten()
    return ((storage.data_ptr() + first * size)[:, None] + torch.arange(size)).flatten()


def assert_new_tensors(name: str, inputs: dict[str, torch.Tensor], outputs: dict[str, torch.Tensor],
                       dtype: torch.dtype, when: str = "") -> None:
    """Each output is a tensor in the inputs' ``dtype`` whose memory is its own: no byte of it is a byte of an input
    (q, k, a view of them) or of another output (a buffer handed out twice). Two outputs that are disjoint slices of
    one allocation share no byte, and pass."""
    required = "rotate must return new tensors of its own, never q or k, a view of them or a buffer it keeps"
    items = list(outputs.items())
    for i, (what, y) in enumerate(items):
        assert y.dtype == dtype, (f"rope={name}{when}: the {what} has dtype {y.dtype}: outputs must be new tensors "
                                  f"in q's dtype {dtype}")
        for other, x in [*inputs.items(), *items[i + 1 :]]:
            shared = torch.isin(_bytes_of(y), _bytes_of(x)).any()
            assert not shared, f"rope={name}{when}: the {what} shares memory with the {other}: {required}"


@pytest.mark.parametrize("name,opts,dtype", ENTRY_DTYPES)
def test_each_call_returns_new_tensors(name, opts, dtype, device):
    """Every call returns tensors of its own, whatever came before (the docs: new tensors in q's dtype). A kernel
    that writes its result into a buffer it keeps and returns it passes every check of one call, yet a second call
    of the same shape (the next layer) rewrites the first's outputs: attention's saved q and k change under its
    backward ("modified by an inplace operation"), or an earlier result changes silently. Checked on two calls of
    fresh inputs, without and with gradients: the first call's outputs unchanged by the second; no output sharing
    memory with an input or another output, also at T == 1 with no positions (position 0: the rotation is the
    identity, and q itself would be the right values); and a backward through both calls giving each call's
    gradients as that call alone does, each call's outputs saved for the backward before the next call (a product of
    each with itself, as attention saves its q and k before the next layer rotates). The identity entry
    (``rope=none``) returns its inputs by design."""
    B, T, HQ, HK, D = 2, 5, 3, 2, 32
    r = build(name, opts, D, 16, device)

    def fresh(t: int, heads: int, grad: bool) -> torch.Tensor:
        return torch.randn(B, t, heads, D, device=device).to(dtype).requires_grad_(grad)

    if arithmetic(r, dtype) is None:
        q, k = fresh(T, HQ, False), fresh(T, HK, False)
        yq, yk = r(q, k)
        assert yq is q and yk is k
        return
    for grad in (False, True):
        q1, k1 = fresh(T, HQ, grad), fresh(T, HK, grad)
        yq1, yk1 = r(q1, k1)
        kept = yq1.detach().clone(), yk1.detach().clone()
        saved = [y * y for y in (yq1, yk1)] if grad else []  # saved for the backward before the next call
        q2, k2 = fresh(T, HQ, grad), fresh(T, HK, grad)
        yq2, yk2 = r(q2, k2)
        for what, y, was in (("q", yq1, kept[0]), ("k", yk1, kept[1])):
            assert torch.allclose(y.detach(), was, rtol=0, atol=0, equal_nan=True), (
                f"rope={name}: the second call changed the first call's {what} output: rotate must return new "
                f"tensors, not a buffer it keeps")
        inputs = {"first call's q": q1, "first call's k": k1, "second call's q": q2, "second call's k": k2}
        outputs = {f"{key} output": y for key, y in zip(inputs, (yq1, yk1, yq2, yk2), strict=True)}
        assert_new_tensors(name, inputs, outputs, dtype)
        if grad:
            check_two_graphs(r, (q1, k1, q2, k2), [*saved, yq2 * yq2, yk2 * yk2])
        q0, k0 = fresh(1, HQ, grad), fresh(1, HK, grad)
        yq0, yk0 = r(q0, k0)
        at_zero = " at T == 1 with no positions (the identity rotation)"
        assert_new_tensors(name, {"q": q0, "k": k0}, {"q output": yq0, "k output": yk0}, dtype, at_zero)
        assert_new_tensors(name, {"q": q0}, {"output of r(q) alone": r(q0)}, dtype, at_zero)


def check_two_graphs(r: rope.RotaryEmbedding, inputs: tuple[torch.Tensor, ...],
                     squares: list[torch.Tensor]) -> None:
    """The backward of the sum of ``squares`` (``y * y`` of each output of two calls, of q1, k1, q2, k2 in order,
    each made right after its call) runs, and gives each input the gradient that its call alone gives (within a
    margin for a backward that sums in another order; a lost or rewritten graph is off by the size of the values)."""
    name = r.registry_name
    try:
        grads = torch.autograd.grad(sum(y.sum() for y in squares), inputs, allow_unused=True)
    except RuntimeError as e:
        pytest.fail(f"rope={name}: the backward through two consecutive calls failed ({type(e).__name__}: "
                    f"{str(e).splitlines()[0]}): each call's outputs must be new tensors that no later call writes")
    for c, call in enumerate(("first", "second")):
        alone = [t.detach().clone().requires_grad_() for t in inputs[2 * c : 2 * c + 2]]
        wants = torch.autograd.grad(sum((y * y).sum() for y in r(*alone)), alone)
        for got, want, which in zip(grads[2 * c : 2 * c + 2], wants, "qk", strict=True):
            assert got is not None, (f"rope={name}: after two calls no gradient reached the {call} call's {which}: "
                                     f"each call's outputs must keep their own graph")
            diff = (got.double() - want.double()).abs().max().item()
            assert torch.allclose(got.double(), want.double(), rtol=1e-2, atol=1e-2), (
                f"rope={name}: after two calls the gradient of the {call} call's {which} differs from that of the "
                f"call alone (max diff {diff:.3g}): each call's graph must be its own")


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("name,opts", ENTRIES)
def test_float64_inputs_are_computed_in_float64_or_refused_in_one_line(name, opts, variant, device):
    """float64 inputs (a gradcheck, a precise reference) are rotated in float64 by the entry's own tables where it
    declares ``supports_float64``, and refused in one line where it does not: never computed in float32 and returned
    as float64 (the base class refuses them for an entry that does not declare it, a plugin's included)."""
    r = build(name, opts, 48, 12, device, variant)
    q = torch.randn(2, 7, 3, 48, dtype=torch.float64, device=device)
    pos = torch.randint(0, 12, (2, 7), device=device)
    if not r.supports_float64:
        with pytest.raises(TypeError, match=r"supports float32, bfloat16 and float16 inputs, got .*float64") as e:
            r(q, positions=pos)
        assert "\n" not in str(e.value)
        return
    y = r(q, positions=pos)
    assert y.dtype == torch.float64
    if r.describe()["compute_dtype"] in ("bfloat16", "float16"):  # a lower precision asked for is kept
        return
    c, s = (t.double()[pos][:, :, None, :] for t in (r.cos, r.sin))
    x1, x2 = q.chunk(2, dim=-1)
    ref = torch.cat((x1 * c + x2 * s, x2 * c - x1 * s), dim=-1) if r.rotates() else q
    assert (y - ref).abs().max() <= 1e-12 * q.abs().max(), f"rope={name}: float64 inputs not computed in float64"


def test_an_entry_not_declaring_float64_refuses_it_in_one_line():
    class Float32Only(rope.RotaryEmbedding):
        registry_name = "mine"

        def rotate(self, q, k, positions):
            return q.float().double(), None if k is None else k.float().double()

    with pytest.raises(TypeError, match=r"^mine supports float32, bfloat16 and float16 inputs, got q of dtype "):
        Float32Only(16, 8)(torch.randn(1, 4, 1, 16, dtype=torch.float64))


#: Entries that ``torch.compile`` cannot trace under Triton's interpreter (on the CPU): their kernels launch from
#: Python, not through custom ops, and the interpreter's launch is not traceable.
NOT_TRACEABLE_INTERPRETED = {"liger": "Liger's kernel launches from Python, and Triton's interpreter cannot be traced"}


@pytest.mark.parametrize("name,opts", [e for e in ENTRIES if not _runs_as_another(e, torch.float32)])
def test_compiled_matches_formula(name, opts, device):
    """``torch.compile(r)`` (the trainer compiles the model, ``train.compile``) rotates as the formula says, forward
    and backward: an implementation that fails to trace, or whose traced graph computes something else than its eager
    code (a branch on ``torch.compiler.is_compiling()``, state read at trace time), is caught here. AOT-autograd
    without Inductor's code generation: the graph is what is checked, and on a CPU it builds no C++."""
    if device.type == "cpu" and os.environ.get("TRITON_INTERPRET") == "1" and name in NOT_TRACEABLE_INTERPRETED:
        pytest.skip(NOT_TRACEABLE_INTERPRETED[name])
    check_compiled(build(name, opts, 16, 12, device), device)


def check_compiled(r: rope.RotaryEmbedding, device: torch.device) -> None:
    """``torch.compile(r, backend="aot_eager")`` of q, k (GQA) at (B, T) positions, forward and backward against
    formula64 (``r`` built for head_dim 16, max_seq_len 12)."""
    name, (B, T, D, max_seq_len) = r.registry_name, (2, 5, r.head_dim, r.max_seq_len)
    q = torch.randn(B, T, 3, D, device=device, requires_grad=True)
    k = torch.randn(B, T, 1, D, device=device, requires_grad=True)
    pos = torch.randint(0, max_seq_len, (B, T), device=device)
    torch._dynamo.reset()
    try:
        yq, yk = torch.compile(r, backend="aot_eager")(q, k, positions=pos)
    except Exception as e:  # noqa: BLE001 - any failure to trace is the finding, named in one line
        pytest.fail(f"rope={name} fails under torch.compile: {type(e).__name__}: {str(e).splitlines()[0]}")
    arith = arithmetic(r, torch.float32)
    if arith is None:
        return
    gq, gk = torch.randn_like(yq), torch.randn_like(yk)
    dq, dk = torch.autograd.grad((yq, yk), (q, k), (gq, gk))
    q64, k64 = _leaf64(q), _leaf64(k)
    rq, rk = (formula64(x, pos, r.base, "partial") for x in (q64, k64))
    rdq, rdk = torch.autograd.grad((rq, rk), (q64, k64), (gq.double(), gk.double()))
    for what, out, ref, like in (("compiled q forward", yq, rq, q), ("compiled k forward", yk, rk, k),
                                 ("compiled q backward", dq, rdq, gq), ("compiled k backward", dk, rdk, gk)):
        assert_conforms(out, ref, pair_scale(like), arith, torch.float32, what)


class _Rotation(rope.RotaryEmbedding):
    """Wrong implementations the checks above must catch (never registered): the reference rotation, computed in
    ``self.arith``, written into the input when ``self.in_place``, otherwise than eagerly under torch.compile
    when ``self.compiled_differs``, and with tables of its own (base 10000, no scaling) when ``self.own_tables``."""

    arith, in_place, compiled_differs, own_tables = torch.float32, False, False, False

    def rotate(self, q, k, positions):
        from rope.reference import gather_tables, rotate_half_split

        cos, sin = self.cos, self.sin
        if self.own_tables:  # frequencies of its own, with the default base, instead of the tables built
            theta = torch.outer(torch.arange(self.max_seq_len, dtype=torch.float64),
                                rope.rope_frequencies(self.head_dim, 10000.0, self.variant))
            cos, sin = theta.cos().float().to(q.device), theta.sin().float().to(q.device)
        cos, sin = gather_tables(positions, q.shape[1], cos, sin)
        if self.compiled_differs and torch.compiler.is_compiling():
            cos, sin = sin, cos

        def one(x):
            y = rotate_half_split(x.to(self.arith), cos.to(self.arith), sin.to(self.arith)).to(x.dtype)
            return x.detach().copy_(y) if self.in_place else y

        return one(q), None if k is None else one(k)


def _wrong(D: int, max_seq_len: int, device: torch.device, build: dict | None = None,
           **flags: object) -> rope.RotaryEmbedding:
    r = _Rotation(D, max_seq_len, **(build or {})).to(device)
    for key, value in flags.items():
        setattr(r, key, value)
    return r


def test_a_float32_entry_computing_in_bf16_is_caught(device):
    """An entry declaring float32 arithmetic (the default ``describe()``) is held to one ulp on bf16 inputs, as the
    docs say: one computing in bf16 is caught, though it passes the bound of bf16 arithmetic."""
    torch.manual_seed(0)
    r = _wrong(48, 12, device, arith=torch.bfloat16)
    with pytest.raises(AssertionError, match=r"q forward \(torch.bfloat16, torch.float32 arithmetic\)"):
        check_against_formula(r, "contiguous", "bt", torch.bfloat16, "partial", 4, 7, 3, 3, 12, device)
    check_against_formula(_wrong(48, 12, device), "contiguous", "bt", torch.bfloat16, "partial", 4, 7, 3, 3, 12,
                          device)


def test_a_write_into_the_input_is_named(device):
    """An entry that writes its result into q is told so, not that its forward is wrong."""
    r = _wrong(16, 12, device, in_place=True)
    with pytest.raises(AssertionError, match="q: the call wrote into its input"):
        check_against_formula(r, "contiguous", "t", torch.float32, "partial", 2, 5, 3, 3, 12, device)


def test_a_compiled_graph_computing_otherwise_is_caught(device):
    """An entry whose traced graph differs from its eager code passes every eager check, and is caught here."""
    check_compiled(_wrong(16, 12, device), device)
    with pytest.raises(AssertionError, match="compiled q forward"):
        check_compiled(_wrong(16, 12, device, compiled_differs=True), device)


def test_a_kernel_with_tables_of_its_own_is_caught(device):
    """An entry computing its frequencies with the default base, not reading the tables it was built with, passes
    every test built with that base, and is caught by the one built with another base and a scaling."""
    check_base_and_scaling(lambda **extra: _wrong(16, 12, device, {"variant": "full", **extra}), "full", device)
    with pytest.raises(AssertionError, match="forward with base=500, linear scaling x4"):
        check_base_and_scaling(lambda **extra: _wrong(16, 12, device, {"variant": "full", **extra}, own_tables=True),
                               "full", device)


# -- layouts and partial rotation ------------------------------------------------------------------------
ROTATED = ("all", "half", "quarter")  # rotary_dim None, D/2, D/4
GRID_HEAD_DIMS = (16, 48, 80, 112, 160, 256)
# Every (layout, rotated width, variant, dtype) once; head dims, memory layouts and positions in turn.
GRID = [
    (layout, rotated, variant, dtype, GRID_HEAD_DIMS[i % len(GRID_HEAD_DIMS)], LAYOUTS[i % len(LAYOUTS)],
     POSITIONS[i % len(POSITIONS)])
    for i, (layout, rotated, variant, dtype) in enumerate(
        itertools.product(("half", "interleaved"), ROTATED, VARIANTS, DTYPES))
]


def _rotary_dim(rotated: str, D: int) -> int | None:
    return {"all": None, "half": D // 2, "quarter": D // 4}[rotated]


def _grid_id(case) -> str:
    layout, rotated, variant, dtype, D, memory, pos = case
    return f"{layout}-rot_{rotated}-{variant}-{str(dtype).removeprefix('torch.')}-D{D}-{memory}-pos_{pos}"


def _takes(cls: type[rope.RotaryEmbedding], option: str) -> bool:
    """Whether ``cls``'s constructor takes the keyword ``option``: one of its options (``option_defaults``), or any
    name through ``**kwargs``. ``check_args`` refuses a keyword the constructor lacks as an unknown option naming it
    (a ``RopeArgumentError``, also a TypeError): a correct refusal, as an implementation written without ``layout``
    or ``rotary_dim`` rotates the whole head in the half layout and nothing else."""
    params = inspect.signature(cls.__init__).parameters.values()
    return option in cls.option_defaults() or any(p.kind == p.VAR_KEYWORD for p in params)


def _built_or_refused(name: str, opts: dict, D: int, variant: str, layout: str, R: int | None,
                      device: torch.device) -> rope.RotaryEmbedding | None:
    """The entry built for the case (poisoned outputs), or None once its build refused a combination it does not
    support, naming the argument (the test skips where the entry cannot run on ``device``). A layout it does not
    declare (``layouts``) or a rotary_dim where it declares none (``supports_rotary_dim``) must be refused; so must
    a value other than the default of a keyword its constructor lacks (:func:`_takes`), as an unknown option. Such a
    keyword is left out of the build at its default (layout "half", rotary_dim None), which the entry computes."""
    cls = rope.get(name)
    given = {key: value for key, value, default in (("layout", layout, "half"), ("rotary_dim", R, None))
             if _takes(cls, key) or value != default}
    unknown = {key for key in given if not _takes(cls, key)}
    refused = set(unknown)
    refused |= {"layout"} if layout not in cls.layouts else set()
    refused |= {"rotary_dim"} if R is not None and not cls.supports_rotary_dim else set()
    if refused:
        with pytest.raises(rope.RopeArgumentError) as e:
            rope.build(name, D, 12, variant=variant, **given, **opts)
        assert e.value.argument in refused, (f"rope={name} refused {e.value.argument!r} ({e.value}); the refusal "
                                             f"must name what it does not support: one of {sorted(refused)}")
        if e.value.argument in unknown:  # the constructor lacks it: check_args's refusal of an unknown option
            assert isinstance(e.value, TypeError), f"rope={name}: {e.value.argument!r} refused, but not as unknown"
        return None
    reason = cls.unavailable_reason(device)
    if reason is not None:
        pytest.skip(reason)
    r = rope.build(name, D, 12, variant=variant, **given, **opts).to(device)
    r.poison_outputs = True
    return r


@pytest.mark.parametrize("name,opts,case", with_entries(GRID, lambda c: c[3], [_grid_id(c) for c in GRID]))
def test_layouts_and_rotary_dim(name, opts, case, device):
    """layout x rotary_dim x variant x dtype, forward and backward against formula64; an entry that
    does not support a combination must refuse it at build time, naming the argument."""
    layout, rotated, variant, dtype, D, memory, pos_kind = case
    R = _rotary_dim(rotated, D)
    r = _built_or_refused(name, opts, D, variant, layout, R, device)
    if r is None:
        return
    got = check_against_formula(r, memory, pos_kind, dtype, variant, 2, 5, 3, 2 if memory == "gqa" else 3, 12,
                                device, layout, R)
    if got is None:
        return
    (yq, yk, dq, dk), (q, k, gq, gk), _, arith = got
    if R is not None and not coarser(arith, dtype):  # the elements beyond rotary_dim come out bit for bit
        assert torch.equal(yq[..., R:], q[..., R:].detach()) and torch.equal(dk[..., R:], gk[..., R:])


# An odd head size rotating its first R elements: only the copied tail is odd (Gemma-style heads cut by a
# rotary_dim); (D, R, variant, layout, memory, q heads, k heads): the Triton entries tile such heads by pairs.
# interleaved with 2 and 4/2 heads: q's and k's H D even, so a flat tiling could take them, whose neighbour pairs
# straddled the heads at odd offsets (the Triton entries gave another function there)
ODD_HEADS = [(9, 4, "partial", "half", "contiguous", 3, 1), (13, 6, "full", "interleaved", "transposed", 3, 3),
             (7, 2, "full", "half", "gqa", 3, 1), (5, 4, "full", "interleaved", "contiguous", 2, 2),
             (9, 4, "partial", "interleaved", "gqa", 4, 2)]


@pytest.mark.parametrize("name,opts,case", with_entries(ODD_HEADS, lambda c: torch.float32,
                                                        [f"D{c[0]}-R{c[1]}-{c[2]}-{c[3]}-{c[4]}" for c in ODD_HEADS]))
def test_odd_head_dims_with_rotary_dim(name, opts, case, device):
    """An odd head_dim is accepted with an even rotary_dim: every entry that takes rotary_dim (and the layout)
    rotates the first R elements and copies the odd tail, forward and backward, or refuses it at build."""
    D, R, variant, layout, memory, HQ, HK = case
    r = _built_or_refused(name, opts, D, variant, layout, R, device)
    if r is not None:
        check_against_formula(r, memory, "bt", torch.float32, variant, 2, 5, HQ, HK, 12, device, layout, R)


# -- packed sequences (cu_seqlens) ---------------------------------------------------------------------
def _packed_rows(lengths: list[int], offsets: list[int]) -> torch.Tensor:
    """Each token's position, written out sequence by sequence (independent of rope.base)."""
    return torch.tensor([off + i for n, off in zip(lengths, offsets, strict=True) for i in range(n)])


@pytest.mark.parametrize("offsets", (None, 3, "per_sequence"))
@pytest.mark.parametrize("name,opts,dtype", [p for p in ENTRY_DTYPES if p.values[2] != torch.float16])
def test_packed_sequences(name, opts, offsets, dtype, device):
    """r(q, k, cu_seqlens=cu): positions restart at each sequence (plus its offset); an empty
    sequence included; GQA; forward and backward."""
    lengths = [3, 0, 5, 1, 4]
    D, HQ, HK, total = 48, 3, 1, sum(lengths)
    r = build(name, opts, D, 16, device)
    cu = torch.tensor([0, *itertools.accumulate(lengths)], dtype=torch.int32, device=device)
    offs = {None: [0] * 5, 3: [3] * 5, "per_sequence": [0, 7, 2, 11, 1]}[offsets]
    arg = offsets if offsets != "per_sequence" else torch.tensor(offs, device=device)
    q = torch.randn(total, HQ, D, device=device).to(dtype).requires_grad_()
    k = torch.randn(total, HK, D, device=device).to(dtype).requires_grad_()
    yq, yk = r(q, k, cu_seqlens=cu, seqlen_offsets=arg)
    assert yq.shape == q.shape and yk.shape == k.shape
    arith = arithmetic(r, dtype)
    if arith is None:
        return
    rows = _packed_rows(lengths, offs).to(device)
    gq, gk = torch.randn_like(yq), torch.randn_like(yk)
    dq, dk = torch.autograd.grad((yq, yk), (q, k), (gq, gk))
    q64, k64 = _leaf64(q), _leaf64(k)
    rq, rk = (formula64(x[None], rows, r.base, "partial")[0] for x in (q64, k64))
    rdq, rdk = torch.autograd.grad((rq, rk), (q64, k64), (gq.double(), gk.double()))
    for what, out, ref, like in (("q", yq, rq, q), ("k", yk, rk, k), ("dq", dq, rdq, gq), ("dk", dk, rdk, gk)):
        assert_conforms(out, ref, pair_scale(like), arith, dtype, what)


def test_a_packed_call_s_backward_makes_no_full_size_copy(device):
    """The backward of r(q, k, cu_seqlens=cu) hands the gradients straight to the rotation's backward: no op of the
    packing (an index's backward zero-fills a tensor of the input's size and copies into it) in between."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Ops(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.names: list[str] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.names.append(func.__name__)
            return func(*args, **(kwargs or {}))

    r = build("torch", {}, 32, 16, device)
    cu = torch.tensor([0, 3, 8, 12], dtype=torch.int32, device=device)
    q, k = (torch.randn(12, 2, 32, device=device, requires_grad=True) for _ in range(2))
    for out in (r(q, k, cu_seqlens=cu), (r(q, None, cu_seqlens=cu),)):
        with Ops() as ops:
            torch.autograd.grad(out, q, [torch.ones_like(y) for y in out], allow_unused=True)
        assert not [n for n in ops.names if n.startswith(("select_backward", "zeros", "new_zeros", "fill_", "zero_"))]


def test_packed_positions_compiled_match_the_written_out_rows(device):
    """Under torch.compile the packed positions are the eager ones. Guards pytorch/pytorch#182343:
    Inductor's searchsorted on a slice of ``cu_seqlens`` came out one too high on CUDA (torch 2.11),
    indexing past the offsets (the bench's compiled reference crashed with a device-side assert). Inductor's own
    code on a GPU, where the bug was; on the CPU the traced graph (a C++ build there takes most of a minute and
    checks Inductor's CPU code, not the GPU's)."""
    from rope.base import packed_positions

    torch._dynamo.reset()
    lengths, offs = [3, 0, 5, 1, 4, 2], [0, 7, 2, 11, 1, 0]
    cu = torch.tensor([0, *itertools.accumulate(lengths)], dtype=torch.int32, device=device)
    offsets = torch.tensor(offs, device=device)
    backend = "inductor" if device.type == "cuda" else "aot_eager"
    compiled = torch.compile(packed_positions, backend=backend)
    got = compiled(cu, sum(lengths), 32, offsets, device)
    assert torch.equal(got.cpu(), _packed_rows(lengths, offs).int())
    r = build("torch", {}, 32, 16, device)
    q = torch.randn(sum(lengths), 2, 32, device=device)
    want = r(q, None, cu_seqlens=cu)
    # Close, not equal: on CUDA Inductor's fused float32 arithmetic rounds differently from eager's (a few ulp); a
    # row taken at a wrong position is off by O(1)
    torch.testing.assert_close(torch.compile(r, backend=backend)(q, None, cu_seqlens=cu), want, rtol=1e-5, atol=1e-5)


def test_a_packed_call_compiles_whole_and_still_refuses_bad_cu_seqlens(device):
    """torch.compile(fullgraph=True) takes a packed call (no read to the host breaks the graph) and gives the eager
    result; a bad cu_seqlens still raises, naming it (on the CPU: a GPU's device-side assert would end the process's
    CUDA context, so the bad case runs here on the CPU only)."""
    torch._dynamo.reset()
    r = build("torch", {}, 32, 8, device)
    cu = torch.tensor([0, 3, 8, 12], dtype=torch.int32, device=device)
    q, k = (torch.randn(12, 2, 32, device=device) for _ in range(2))
    # Inductor's own code on a GPU; on the CPU the graph alone (what fullgraph checks), not its C++ build
    backend = "inductor" if device.type == "cuda" else "aot_eager"
    compiled = torch.compile(r, fullgraph=True, dynamic=False, backend=backend)
    for got, want in zip(compiled(q, k, cu_seqlens=cu), r(q, k, cu_seqlens=cu), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    if device.type == "cpu":
        for bad in ([0, 3, 2, 12], [0, 3, 8, 11], [0, 1, 2, 12]):  # decreasing; wrong end; a position past 8
            with pytest.raises(RuntimeError, match="cu_seqlens must start at 0, never decrease"):
                compiled(q, k, cu_seqlens=torch.tensor(bad, dtype=torch.int32))


def test_packed_positions_are_checked_once_per_cu_seqlens_tensor(monkeypatch, device):
    """The packed positions (and the check that synchronises with the device) are computed once per
    cu_seqlens tensor: the layers of a step share it. Reused for the same unchanged objects; computed
    again for a new tensor, after an in-place change of cu_seqlens or of the offsets (a bad change still
    refused), and for another length; the results stay those of the written-out rows."""
    import rope._packed as packed  # where packed_positions_once looks packed_positions up

    calls = []
    real = packed.packed_positions
    monkeypatch.setattr(packed, "packed_positions", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    r = build("torch", {}, 32, 16, device)
    lengths, offs = [3, 0, 5, 1], [0, 7, 2, 11]
    cu = torch.tensor([0, *itertools.accumulate(lengths)], dtype=torch.int32, device=device)
    offsets = torch.tensor(offs, device=device)
    q = torch.randn(sum(lengths), 2, 32, device=device)
    ref = build("torch", {}, 32, 16, device)
    want = ref(q[None], None, positions=_packed_rows(lengths, offs).to(device)[None])[0]
    for _ in range(3):
        assert torch.equal(r(q, None, cu_seqlens=cu, seqlen_offsets=offsets), want)
    assert len(calls) == 1
    offsets[1] = 0  # in place: computed again
    offs[1] = 0
    want = ref(q[None], None, positions=_packed_rows(lengths, offs).to(device)[None])[0]
    assert torch.equal(r(q, None, cu_seqlens=cu, seqlen_offsets=offsets), want) and len(calls) == 2
    r(q, None, cu_seqlens=cu.clone(), seqlen_offsets=offsets)  # another tensor
    assert len(calls) == 3
    r(q, None, cu_seqlens=cu, seqlen_offsets=offsets)
    r(q, None, cu_seqlens=cu, seqlen_offsets=1)  # other offsets
    assert len(calls) == 4
    cu[2] = 1  # in place, now decreasing: refused
    with pytest.raises(ValueError, match="cu_seqlens must start at 0, never decrease"):
        r(q, None, cu_seqlens=cu, seqlen_offsets=offsets)


# -- positions outside the table --------------------------------------------------------------------------
@pytest.mark.parametrize("name,opts", ENTRIES)
def test_out_of_range_positions_give_nan_rows(name, opts, device):
    """Where the range is not checked on the host (positions on an accelerator: it would cost a
    synchronisation per call), a position outside the table gives NaN rows, never another row's
    rotation. Called through ``rotate`` (what runs after validation) so the CPU shows it too."""
    r = build(name, opts, 32, 16, device)
    if arithmetic(r, torch.float32) is None:
        return
    x = torch.randn(1, 4, 2, 32, device=device)
    pos = torch.tensor([0, 16, 5, -1], device=device)
    how = "rope.reference.gather_cos_sin(self.cos, positions, T) reads the rows so"
    try:
        y, _ = r.rotate(x, None, pos)
    except (IndexError, RuntimeError) as e:
        pytest.fail(f"rope={name}: positions 16 and -1, outside its table of 16 rows, raised {type(e).__name__} "
                    f"({str(e).splitlines()[0]}); they must give NaN rows ({how})")
    rotated = y[..., :8]  # the first quarter has nonzero frequencies
    assert rotated[:, [1, 3]].isnan().all(), (f"rope={name}: positions 16 and -1, outside its table of 16 rows, must "
                                              f"give NaN rows, not another row's rotation ({how})")
    assert not y[:, [0, 2]].isnan().any(), f"rope={name}: NaN in the rows of positions 0 and 5, inside the table"


@pytest.mark.parametrize("name,opts", ENTRIES)
def test_inputs_are_validated_once_per_signature(name, opts, device, monkeypatch):
    """The shape/dtype/device checks run once per input signature (host time at small shapes), and
    again for a new one; positions in host memory are range-checked on every call."""
    r = build(name, opts, 32, 16, device)
    calls = []
    real = r._validate_signature
    monkeypatch.setattr(r, "_validate_signature", lambda *a: calls.append(1) or real(*a))
    x = torch.randn(1, 4, 2, 32, device=device)
    r(x), r(x), r(x.clone())
    assert len(calls) == 1
    r(torch.randn(1, 5, 2, 32, device=device))
    assert len(calls) == 2
    if device.type == "cpu":
        with pytest.raises(ValueError, match="positions must lie in"):
            r(x, positions=torch.tensor([0, 1, 2, 16]))


# -- the fused projection ----------------------------------------------------------------------------
def _split(qkv: torch.Tensor, hq: int, hk: int, D: int):
    B, T, _ = qkv.shape
    q, k, v = qkv.split([hq * D, hk * D, hk * D], dim=-1)
    return q.reshape(B, T, hq, D), k.reshape(B, T, hk, D), v.reshape(B, T, hk, D)


@pytest.mark.parametrize("HQ,HK,pos_kind", [(3, 3, "none"), (4, 2, "bt"), (5, 1, "t")])
@pytest.mark.parametrize("name,opts,dtype", ENTRY_DTYPES)
def test_rotate_qkv(name, opts, dtype, HQ, HK, pos_kind, device):
    """q, k rotated, v the untouched view of qkv, and d qkv against the formula's autograd."""
    B, T, D = 2, 7, 48
    r = build(name, opts, D, 12, device)
    pos = make_positions(pos_kind, B, T, 12, device)
    qkv, v = check_rotate_qkv(r, dtype, B, T, HQ, HK, pos, device)
    assert v.data_ptr() == qkv.data_ptr() + (HQ + HK) * D * qkv.element_size()  # v is the view itself
    assert torch.equal(v, qkv[..., (HQ + HK) * D :].view(B, T, HK, D))


def check_rotate_qkv(r: rope.RotaryEmbedding, dtype: torch.dtype, B: int, T: int, HQ: int, HK: int,
                     pos: torch.Tensor | None, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """``r.rotate_qkv`` of a fresh (B, T, (HQ + 2 HK) D) projection: q and k against the formula (the identity: the
    views themselves), d qkv against the formula's autograd, v's part of it as it came. Returns qkv and v."""
    D = r.head_dim
    qkv = torch.randn(B, T, (HQ + 2 * HK) * D, device=device).to(dtype).requires_grad_()
    yq, yk, v = r.rotate_qkv(qkv, HQ, HK, positions=pos)
    arith = arithmetic(r, dtype)
    q, k, _ = _split(qkv.detach(), HQ, HK, D)
    if arith is None:
        assert torch.equal(yq, q) and torch.equal(yk, k) and yq.data_ptr() == qkv.data_ptr()
        return qkv, v
    grads = [torch.randn(t.shape, device=device).to(dtype) for t in (yq, yk, v)]
    (dqkv,) = torch.autograd.grad((yq, yk, v), qkv, grads)
    x64 = _leaf64(qkv)
    q64, k64, v64 = _split(x64, HQ, HK, D)
    rows = torch.arange(T, device=device) if pos is None else pos
    rq, rk = formula64(q64, rows, r.base, "partial"), formula64(k64, rows, r.base, "partial")
    (rdqkv,) = torch.autograd.grad((rq, rk, v64), x64, [g.double() for g in grads])
    assert_conforms(yq, rq, pair_scale(q), arith, dtype, "q forward")
    assert_conforms(yk, rk, pair_scale(k), arith, dtype, "k forward")
    dq, dk, dv = _split(dqkv, HQ, HK, D)
    rdq, rdk, _ = _split(rdqkv, HQ, HK, D)
    assert_conforms(dq, rdq, pair_scale(grads[0]), arith, dtype, "d qkv (q part)")
    assert_conforms(dk, rdk, pair_scale(grads[1]), arith, dtype, "d qkv (k part)")
    assert torch.equal(dv, grads[2]), "d qkv (v part) must be v's gradient as it came"
    return qkv, v


@pytest.mark.parametrize("call", ["q_k", "rotate_qkv"])
@pytest.mark.parametrize("name,opts", ENTRIES)
def test_second_derivatives_are_the_formula_s(name, opts, call, device):
    """A Hessian-vector product (the gradient of a gradient taken with ``create_graph``, as a gradient penalty
    does) through ``r(q, k)`` and ``r.rotate_qkv``: the formula's. The rotation is linear, so its backward is the
    inverse rotation, which autograd must record to differentiate again; the Triton entries' ``rotate_qkv`` ran its
    backward out of autograd's sight, and the RoPE part of the second derivative was lost without an error."""
    B, T, D, HQ, HK = 2, 5, 16, 2, 1
    r = build(name, opts, D, 8, device)
    arith = arithmetic(r, torch.float32)
    if arith is None:
        pytest.skip("rotates nothing")

    def loss_of(q, k, v):  # q enters squared: a second derivative in every direction
        return (q.pow(2).sum((-2, -1)) * k.sum((-2, -1)) * v.sum((-2, -1))).sum()

    x = torch.randn(B, T, (HQ + 2 * HK) * D, device=device, requires_grad=True)
    if call == "rotate_qkv":
        q, k, v = r.rotate_qkv(x, HQ, HK)
    else:
        q, k, v = _split(x, HQ, HK, D)
        q, k = r(q, k)
    (g,) = torch.autograd.grad(loss_of(q, k, v), x, create_graph=True)
    (h,) = torch.autograd.grad(g.pow(2).sum(), x)
    x64 = _leaf64(x)
    q64, k64, v64 = _split(x64, HQ, HK, D)
    rows = torch.arange(T, device=device)
    rq, rk = formula64(q64, rows, r.base, "partial"), formula64(k64, rows, r.base, "partial")
    (g64,) = torch.autograd.grad(loss_of(rq, rk, v64), x64, create_graph=True)
    (h64,) = torch.autograd.grad(g64.pow(2).sum(), x64)
    tol = 1e-4 if arith in (torch.float32, torch.float64) else 0.05  # relative to the largest element
    assert (h.double() - h64).abs().max() <= tol * h64.abs().max(), f"{name} {call}"


# -- another GPU than the current one -----------------------------------------------------------------
@pytest.fixture
def second_gpu():
    """cuda:1, with cuda:0 the current device during the test (restored after)."""
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two CUDA GPUs")
    before = torch.cuda.current_device()
    torch.cuda.set_device(0)
    yield torch.device("cuda", 1)
    torch.cuda.set_device(before)


@pytest.mark.gpu
@pytest.mark.parametrize("name,opts", ENTRIES)
def test_an_entry_on_another_gpu_than_the_current_one(name, opts, second_gpu):
    """A module moved to cuda:1 and called while cuda:0 is current (no ``torch.cuda.set_device``) rotates on
    cuda:1: forward and backward against the formula, q/k as views of a fused projection and through
    ``rotate_qkv``, twice (the second call takes the Triton entries' cached launch). Kernels launched from
    Python go to the current device unless the entry switches."""
    dev, D, T = second_gpu, 48, 301
    r = build(name, opts, D, T + 5, dev)
    for _ in range(2):
        check_against_formula(r, "qkv", "bt", torch.bfloat16, "partial", 2, T, 8, 8, T + 5, dev)
        check_rotate_qkv(r, torch.bfloat16, 2, T, 8, 4, None, dev)
    assert torch.cuda.current_device() == 0  # the entry switched back


# -- errors --------------------------------------------------------------------------------------------
def _x(device, *shape, dtype=torch.float32):
    return torch.randn(*shape, device=device).to(dtype)


# name -> (call on a module built for head_dim 32, max_seq_len 16; exception; message pattern)
BAD_CALLS = {
    "rank": (lambda r, d: r(_x(d, 4, 2, 32)), ValueError, r"shape \(B, T, H, D\)"),
    "head_dim": (lambda r, d: r(_x(d, 1, 4, 2, 16)), ValueError, "head_dim=32"),
    "beyond_cache": (lambda r, d: r(_x(d, 1, 17, 2, 32)), ValueError, "max_seq_len=16"),
    "not_floating": (lambda r, d: r(torch.ones(1, 4, 2, 32, device=d, dtype=torch.int64)), TypeError, "floating"),
    "qk_batch": (lambda r, d: r(_x(d, 1, 4, 2, 32), _x(d, 2, 4, 2, 32)), ValueError, "agree in B, T and D"),
    "qk_time": (lambda r, d: r(_x(d, 1, 4, 2, 32), _x(d, 1, 3, 2, 32)), ValueError, "agree in B, T and D"),
    "qk_head_dim": (lambda r, d: r(_x(d, 1, 4, 2, 32), _x(d, 1, 4, 2, 16)), ValueError, "head dim 16|agree"),
    "qk_dtype": (lambda r, d: r(_x(d, 1, 4, 2, 32), _x(d, 1, 4, 2, 32, dtype=torch.bfloat16)), TypeError,
                 "same dtype"),
    "positions_high": (lambda r, d: r(_x(d, 1, 4, 2, 32), positions=torch.tensor([0, 1, 2, 16])),
                       ValueError, "positions must lie in|positions must be on"),
    "positions_negative": (lambda r, d: r(_x(d, 1, 4, 2, 32), positions=torch.tensor([0, -1, 2, 3])),
                           ValueError, "positions must lie in|positions must be on"),
    "cu_decreasing": (lambda r, d: r(_x(d, 6, 2, 32), cu_seqlens=torch.tensor([0, 4, 2, 6], device=d,
                                                                              dtype=torch.int32)),
                      ValueError, "cu_seqlens must start at 0, never decrease"),
    "cu_total": (lambda r, d: r(_x(d, 6, 2, 32), cu_seqlens=torch.tensor([0, 2, 5], device=d, dtype=torch.int32)),
                 ValueError, "end at total_tokens=6"),
    "cu_dtype": (lambda r, d: r(_x(d, 6, 2, 32), cu_seqlens=torch.tensor([0.0, 6.0], device=d)),
                 ValueError, "cu_seqlens must be a 1-D int32/int64"),
    "cu_rank": (lambda r, d: r(_x(d, 1, 6, 2, 32), cu_seqlens=torch.tensor([0, 6], device=d, dtype=torch.int32)),
                ValueError, r"with cu_seqlens, q must have shape \(total_tokens, H, D\)"),
    "cu_too_long": (lambda r, d: r(_x(d, 20, 2, 32), cu_seqlens=torch.tensor([0, 3, 20], device=d,
                                                                             dtype=torch.int32)),
                    ValueError, "max_seq_len=16"),
    "cu_and_positions": (lambda r, d: r(_x(d, 6, 2, 32), cu_seqlens=torch.tensor([0, 6], device=d, dtype=torch.int32),
                                        positions=torch.arange(6, device=d)), ValueError, "not both"),
    "cu_offsets_shape": (lambda r, d: r(_x(d, 6, 2, 32), cu_seqlens=torch.tensor([0, 6], device=d, dtype=torch.int32),
                                        seqlen_offsets=torch.zeros(3, dtype=torch.long, device=d)),
                         ValueError, "seqlen_offsets must be"),
    "positions_float": (lambda r, d: r(_x(d, 1, 4, 2, 32), positions=torch.arange(4.0, device=d)), TypeError,
                        "integer"),
    "positions_bool": (lambda r, d: r(_x(d, 1, 4, 2, 32), positions=torch.tensor([True, False, True, True], device=d)),
                       TypeError, "integer"),
    "cu_offsets_bool": (lambda r, d: r(_x(d, 6, 2, 32), cu_seqlens=torch.tensor([0, 6], device=d, dtype=torch.int32),
                                       seqlen_offsets=torch.ones(1, dtype=torch.bool, device=d)),
                        ValueError, "seqlen_offsets must be"),
    "positions_shape": (lambda r, d: r(_x(d, 2, 4, 2, 32), positions=torch.zeros(3, 4, dtype=torch.long, device=d)),
                        ValueError, "shape"),
    "qkv_width": (lambda r, d: r.rotate_qkv(_x(d, 1, 4, 90), 2, 1), ValueError, r"qkv must have shape .*\(B, T, 128\)"),
    "qkv_rank": (lambda r, d: r.rotate_qkv(_x(d, 4, 192), 2, 2), ValueError, "qkv must have shape"),
    "qkv_n_head": (lambda r, d: r.rotate_qkv(_x(d, 1, 4, 128), 0, 1), ValueError, "n_head must be a positive int"),
    "qkv_n_kv_head": (lambda r, d: r.rotate_qkv(_x(d, 1, 4, 128), 2, 1.5), ValueError,
                      "n_kv_head must be a positive int"),
    # named as the caller passed them: the projection, not the q view of it
    "qkv_dtype": (lambda r, d: r.rotate_qkv(_x(d, 1, 4, 128).long(), 2, 1), TypeError,
                  r"qkv must be a floating tensor \(float32/bfloat16/float16\), got torch.int64"),
    "qkv_too_long": (lambda r, d: r.rotate_qkv(_x(d, 1, 17, 128), 2, 1), ValueError,
                     "qkv has T=17 > max_seq_len=16"),
}


@pytest.mark.parametrize("bad", list(BAD_CALLS))
@pytest.mark.parametrize("name,opts", ENTRIES)
def test_bad_calls_are_refused(name, opts, bad, device):
    call, exc, match = BAD_CALLS[bad]
    r = build(name, opts, 32, 16, device)
    with pytest.raises(exc, match=match):
        call(r, device)


@pytest.mark.parametrize("name,opts", ENTRIES)
def test_tables_on_another_device_than_q_are_one_line(name, opts, device):
    """A module never moved with ``.to()`` called on tensors elsewhere (meta here: any other device): one line,
    the entry's own word for a device it cannot run on, else the shared one naming the tables (the reference failed
    inside its arithmetic, with torch's device-mismatch error); the identity reads no table and returns q."""
    r = build(name, opts, 32, 16, device)
    q = torch.zeros(1, 4, 2, 32, device="meta")
    if arithmetic(r, torch.float32) is None:
        assert r(q) is q
        return
    with pytest.raises(ValueError) as e:
        r(q)
    said = str(e.value)
    assert "\n" not in said and ("is on meta" in said or said == (
        f"the cos/sin tables are on {r.cos.device} but q is on meta: move the module with .to()")), said
    if name == "torch":
        assert said.startswith("the cos/sin tables are on")


# (build arguments over head_dim=32, max_seq_len=16; the argument named; message pattern)
BAD_BUILDS = [
    ({"head_dim": 30}, "head_dim", "multiple of 4"),
    ({"head_dim": 31, "variant": "full"}, "head_dim", "even"),
    ({"head_dim": 0, "variant": "full"}, "head_dim", "positive int"),
    ({"variant": "diagonal"}, "variant", "variant"),
    ({"max_seq_len": 0}, "max_seq_len", "max_seq_len"),
    ({"base": 0.0}, "base", "base"),
    ({"base": math.inf}, "base", "base"),
    ({"no_such_option": 1}, "no_such_option", "no_such_option"),
    ({"layout": "zigzag"}, "layout", "layout must be one of"),
    ({"rotary_dim": 7, "variant": "full"}, "rotary_dim", "rotary_dim must be even"),
    ({"rotary_dim": 6}, "rotary_dim", "rotary_dim must be a multiple of 4"),
    ({"rotary_dim": 40}, "rotary_dim", "at most head_dim=32"),
    ({"rotary_dim": 0}, "rotary_dim", "positive int"),
]
#: The messages of the rules of a head's split: the identity, which splits nothing, takes what they refuse.
SPLIT_RULES = ("multiple of 4", "even", "rotary_dim must be even", "rotary_dim must be a multiple of 4")


@pytest.mark.parametrize("kwargs,argument,match", BAD_BUILDS, ids=[f"{b[1]}-{i}" for i, b in enumerate(BAD_BUILDS)])
@pytest.mark.parametrize("name,opts", ENTRIES)
def test_bad_builds_are_refused(name, opts, kwargs, argument, match):
    """check_args and build refuse the same arguments with the same RopeArgumentError. A keyword the entry's
    constructor lacks (``no_such_option`` for every entry; ``layout`` or ``rotary_dim`` for one written without them)
    is refused as an unknown option naming it, before any rule of its value: that refusal is the correct one."""
    args, cls = {"head_dim": 32, "max_seq_len": 16, **opts, **kwargs}, rope.get(name)
    if name == "none" and match in SPLIT_RULES:
        rope.check_args(name, **args)
        assert rope.build(name, **args).head_dim == args["head_dim"]
        return
    lacking = [key for key in kwargs if key not in ("head_dim", "max_seq_len", "base") and not _takes(cls, key)]
    if lacking:  # the case's rule is not the entry's: its refusal is that of an unknown option, naming it
        argument, match = lacking[0], re.escape(lacking[0])
    with pytest.raises(rope.RopeArgumentError, match=match) as checked:
        rope.check_args(name, **args)
    with pytest.raises(rope.RopeArgumentError, match=match) as built:
        rope.build(name, **args)
    assert checked.value.argument == built.value.argument == argument
    assert str(checked.value) == str(built.value)
    if argument in lacking:
        assert isinstance(built.value, TypeError)  # what Python says of an unexpected keyword


@pytest.mark.parametrize("name,opts", ENTRIES)
def test_check_args_allocates_nothing(name, opts):
    """A cache of 10**12 positions would need terabytes: check_args must not build the tables."""
    rope.check_args(name, 64, 10**12, **opts)


@pytest.mark.parametrize("name,opts", ENTRIES)
def test_unavailable_reason_is_none_or_one_line(name, opts, device):
    reason = rope.get(name).unavailable_reason(device)
    assert reason is None or (isinstance(reason, str) and reason and "\n" not in reason)
