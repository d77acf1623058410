"""rope=cutedsl on a CUDA GPU: the conformance cases at real sizes, every head size, bit-identity
with triton_v4, int64 offsets, torch.compile. Marked ``gpu``; skipped without nvidia-cutlass-dsl.

(The shared conformance grid, ``test_conformance.py``, runs it too wherever a GPU is present.)
"""

from __future__ import annotations

import contextlib

import pytest
import torch

import rope

from .cases import DTYPE_NAMES, LAYOUTS, POSITIONS, build_poisoned, make_inputs, make_positions, run_case
from .test_triton import DTYPES

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(rope.cutedsl.package_missing() is not None,
                                                  reason="nvidia-cutlass-dsl not installed")]
CUDA = torch.device("cuda")


@pytest.mark.parametrize("variant", ("partial", "full"))
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_NAMES.get)
def test_dtype_variant(dtype, variant):
    run_case("cutedsl", dtype, variant, "qkv", "bt", B=3, T=1031, HQ=16, HK=16, D=128, device=CUDA, max_seq_len=2048)


@pytest.mark.parametrize("pos_kind", POSITIONS)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_layout_positions(layout, pos_kind):
    hk = 4 if layout == "gqa" else 12
    run_case("cutedsl", torch.bfloat16, "partial", layout, pos_kind, B=2, T=777, HQ=12, HK=hk, D=256, device=CUDA)


@pytest.mark.parametrize(
    "variant,D",
    [("full", d) for d in range(16, 257, 2)] + [("partial", d) for d in range(16, 257, 4)],
)
def test_every_head_dim(variant, D):
    run_case("cutedsl", torch.bfloat16, variant, "qkv", "bt", B=2, T=301, HQ=8, HK=8, D=D, device=CUDA)


@pytest.mark.parametrize("D,layout,rotary_dim", [(48, "half", None), (80, "half", None), (128, "interleaved", None),
                                                 (48, "interleaved", 24), (128, "half", 64), (64, "half", 16)])
@pytest.mark.parametrize("pos_kind", ("none", "bt"))
def test_bit_identical_to_triton_v4(D, layout, rotary_dim, pos_kind):
    """Same arithmetic (float32 fma formula, one rounding): the same bf16 bits, forward and backward."""
    opts = {"layout": layout, "rotary_dim": rotary_dim}
    ours = build_poisoned("cutedsl", D, 1024, CUDA, **opts)
    theirs = build_poisoned("triton_v4", D, 1024, CUDA, **opts)
    q, k = make_inputs("gqa", 2, 513, 8, 2, D, torch.bfloat16, CUDA)
    pos = make_positions(pos_kind, 2, 513, 1024, CUDA)
    outs = []
    for r in (ours, theirs):
        yq, yk = r(q, k, positions=pos)
        g = torch.ones_like(yq), torch.ones_like(yk)
        outs.append((yq, yk, *torch.autograd.grad((yq, yk), (q, k), g)))
    for a, b in zip(*outs, strict=True):
        assert torch.equal(a, b), (a.float() - b.float()).abs().max()


@pytest.mark.parametrize("threads,rows", [(128, 2), (1024, 1), (256, 4), (64, 3), (256, 1)])
@pytest.mark.parametrize("D", (48, 256))
def test_launch_configs_give_the_default_bits(threads, rows, D):
    """Every CTA size and rows-per-thread count a benchmark may set (``rope.cutedsl.tuning``) computes the same bits
    as the default, forward and backward, on a row count that no CTA's rows divide (the last CTA is partial)."""
    from rope import cutedsl

    rotary = build_poisoned("cutedsl", D, 1024, CUDA)
    q, k = make_inputs("gqa", 3, 777, 8, 2, D, torch.bfloat16, CUDA)
    outs = []
    for setting in (cutedsl.tuning(threads=threads, rows_per_thread=rows), contextlib.nullcontext()):
        with setting:  # the backward inside too: it launches under the same setting
            yq, yk = rotary(q, k)
            outs.append((yq, yk, *torch.autograd.grad((yq, yk), (q, k), (torch.ones_like(yq), torch.ones_like(yk)))))
    for a, b in zip(*outs, strict=True):
        assert not a.isnan().any() and torch.equal(a, b)


def test_large_tensor_int64_offsets():
    """q and k as views of one qkv of more than 2**31 elements: the last batch element is right."""
    B, T, H, D = 48, 4096, 32, 128
    qkv = torch.randn(B, T, 3 * H * D, device=CUDA, dtype=torch.bfloat16)
    q, k, _ = qkv.view(B, T, 3, H, D).unbind(2)
    assert qkv.numel() > 2**31
    yq, yk = build_poisoned("cutedsl", D, T, CUDA)(q, k)
    ref = rope.build("triton_v4", D, T).to(CUDA)
    for b in (0, B - 1):
        rq, rk = ref(q[b:b + 1], k[b:b + 1])
        assert torch.equal(yq[b:b + 1], rq) and torch.equal(yk[b:b + 1], rk)


@pytest.mark.parametrize("fused", (False, True))
def test_torch_compile_fullgraph(fused):
    """A block with rope=cutedsl compiles with fullgraph=True (the custom ops), forward and backward."""
    from .test_triton_gpu import _Block

    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    torch.manual_seed(0)
    model = _Block("cutedsl", fused=fused).to(CUDA)
    x = torch.randn(4, 128, 256, device=CUDA, requires_grad=True)
    compiled = torch.compile(model, fullgraph=True)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = compiled(x)
        out_e = model(x)
    g = torch.randn_like(out)
    grads = torch.autograd.grad(out, [x, *model.parameters()], g)
    grads_e = torch.autograd.grad(out_e, [x, *model.parameters()], g)
    assert not torch._dynamo.utils.counters["graph_break"], dict(torch._dynamo.utils.counters["graph_break"])
    torch.testing.assert_close(out, out_e, rtol=2e-2, atol=2e-2)
    for a, b in zip(grads, grads_e, strict=True):
        torch.testing.assert_close(a, b, rtol=5e-2, atol=5e-2)
