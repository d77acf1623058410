"""triton_v4 / triton_v2 on a CUDA GPU: the CPU test cases at real sizes, int64 offsets, torch.compile.

Every test is marked ``gpu`` (conftest skips them without CUDA). Outputs are NaN-poisoned as on the CPU.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn import functional as F

import rope
import rope.triton as rt
from rope.triton import kernels, launch, ops

from .cases import DTYPE_NAMES, LAYOUTS, POSITIONS, assert_precise, build_poisoned, run_case
from .test_triton import DTYPES, GEOMETRIES, IMPLS, KernelSpy, _grads, _reference

pytestmark = pytest.mark.gpu
CUDA = torch.device("cuda")


@pytest.mark.parametrize("variant", ("partial", "full"))
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_NAMES.get)
@pytest.mark.parametrize("impl", IMPLS)
def test_impl_dtype_variant(impl, dtype, variant):
    run_case(impl, dtype, variant, "qkv", "bt", B=3, T=1031, HQ=16, HK=16, D=128, device=CUDA, max_seq_len=2048)


@pytest.mark.parametrize("pos_kind", POSITIONS)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_layout_positions(layout, pos_kind):
    hk = 4 if layout == "gqa" else 12
    run_case("triton_v4", torch.bfloat16, "partial", layout, pos_kind, B=2, T=777, HQ=12, HK=hk, D=256, device=CUDA)


@pytest.mark.parametrize("variant,D",
                         [("full", d) for d in range(16, 257, 2)] + [("partial", d) for d in range(16, 257, 4)])
def test_every_head_dim(variant, D):
    run_case("triton_v4", torch.bfloat16, variant, "qkv", "bt", B=2, T=301, HQ=8, HK=8, D=D, device=CUDA)


@pytest.mark.parametrize("D,variant,layout,rotary_dim", [*GEOMETRIES, (80, "full", "half", 40),
                                                         (128, "partial", "interleaved", 64)])
@pytest.mark.parametrize("heads", [(8, 8), (8, 2)], ids=["mha", "gqa"])
def test_every_tiling_at_size(D, variant, layout, rotary_dim, heads):
    """Each tiling forced through ``rope.triton.tuning`` gives the plan's own bits, within one ulp, at real sizes."""
    options = dict(variant=variant, layout=layout, rotary_dim=rotary_dim)
    r = build_poisoned("triton_v4", D, 512, CUDA, **options)
    q = torch.randn(2, 301, heads[0], D, device=CUDA, dtype=torch.bfloat16)
    k = torch.randn(2, 301, heads[1], D, device=CUDA, dtype=torch.bfloat16)
    pos = torch.randint(0, 512, (2, 301), device=CUDA)
    results, g = {}, None
    for tiling in (None, *rt.TILINGS):
        with rt.tuning(tiling=tiling):
            results[tiling], g = _grads(r, q, k, pos, g)
    for tiling, got in results.items():
        assert all(torch.equal(a, b) for a, b in zip(got, results[None], strict=True)), tiling
    for what, a, b in zip(("yq", "yk", "dq", "dk"), results[None], _reference(D, 512, q, k, pos, g, **options),
                          strict=True):
        assert_precise(a, b, torch.bfloat16, what)


@pytest.mark.parametrize("dtype", (torch.bfloat16, torch.float16), ids=DTYPE_NAMES.get)
def test_v2_low_precision_at_size(dtype):
    run_case("triton_v2", dtype, "partial", "gqa", "t", B=4, T=2048, HQ=32, HK=8, D=128, device=CUDA)


def test_large_tensor_int64_offsets():
    """48x32x4096x128 q and k as views of one 4.8 GB qkv: element offsets pass 2**31."""
    B, T, H, D = 48, 4096, 32, 128
    qkv = torch.randn(B, T, 3 * H * D, device=CUDA, dtype=torch.bfloat16)
    q, k, _ = qkv.view(B, T, 3, H, D).unbind(2)
    assert qkv.numel() > 2**31
    r = build_poisoned("triton_v4", D, T, CUDA)
    ref = rope.build("torch", D, T, compute_dtype="float64").to(CUDA)
    yq, yk = r(q, k)
    gq = torch.randn_like(yq)
    dq, _ = launch.rotate(gq, None, r.cos, r.sin, None, r.rotation, inverse=True, poison=True)  # the backward's kernel
    for b in (0, B - 1):  # the last batch element sits past 2**31 elements
        rq, rk = ref(q[b : b + 1].double(), k[b : b + 1].double())
        assert_precise(yq[b : b + 1], rq, torch.bfloat16, f"q[{b}]")
        assert_precise(yk[b : b + 1], rk, torch.bfloat16, f"k[{b}]")
        q64 = q[b : b + 1].double().requires_grad_()
        (rdq,) = torch.autograd.grad(ref(q64), q64, gq[b : b + 1].double())
        assert_precise(dq[b : b + 1], rdq, torch.bfloat16, f"dq[{b}]")


def test_tuning_reaches_the_backward_autograd_runs_on_its_own_thread(monkeypatch):
    """A CUDA graph's backward runs on autograd's worker thread: its launch takes the block's settings too (the
    launch of a new job goes through Triton's launch, so through the spies)."""
    spies = {name: KernelSpy(getattr(kernels, name)) for name in ("rope_pairs_kernel", "rope_flat_kernel")}
    for name, spy in spies.items():
        monkeypatch.setattr(kernels, name, spy)
    r = build_poisoned("triton_v4", 48, 512, CUDA, rotary_dim=24)  # the plan's own tiling: flat
    q, k = (torch.randn(2, 257, h, 48, device=CUDA, requires_grad=True) for h in (3, 1))
    with rt.tuning(tiling="chunks", tile=64):
        yq, yk = r(q, k)
        torch.autograd.grad((yq.sum(), yk.sum()), (q, k))
    launches = spies["rope_pairs_kernel"].launches
    assert not spies["rope_flat_kernel"].launches and len(launches) == 2  # forward, backward
    assert launches[1][2]["INVERSE"] and launches[1][2]["NCH"] == 64 // 4


@pytest.mark.parametrize("variant,D,rotary_dim,dtype", [("full", 30, None, torch.bfloat16),
                                                        ("partial", 36, None, torch.float16),
                                                        ("full", 96, None, torch.float32),
                                                        ("full", 64, 32, torch.bfloat16)])
def test_kept_compiled_kernels_launch_directly(variant, D, rotary_dim, dtype, monkeypatch):
    """From the second call of a launch's specialisation on (the third where the plan's register cap made the
    kernel spill), its compiled kernel is launched directly (not through Triton's launch): new data each call,
    forward and backward, positions, GQA, the strided views of a projection on and off 16-byte alignment, every
    result within one ulp."""
    spies = {}
    for name in ("rope_pairs_kernel", "rope_flat_kernel"):
        spies[name] = KernelSpy(getattr(kernels, name))
        monkeypatch.setattr(kernels, name, spies[name])
    m = build_poisoned("triton_v4", D, 64, CUDA, variant=variant, rotary_dim=rotary_dim)
    options = dict(variant=variant, rotary_dim=rotary_dim)
    width = (4 + 2 * 2) * D
    for off in (0, 1):  # a view one element in: another specialisation (alignment)
        for call in range(3):
            before = sum(len(s.launches) for s in spies.values())
            qkv = torch.randn(3, 17, width + 1, device=CUDA, dtype=dtype)[..., off:off + width]
            q, k, _ = rope.base.split_qkv(qkv, 4, 2, D)
            pos = torch.randint(0, 64, (3, 17), device=CUDA)
            got, g = _grads(m, q, k, pos)
            for what, a, b in zip(("q", "k", "dq", "dk"), got, _reference(D, 64, q, k, pos, g, **options),
                                  strict=True):
                assert_precise(a, b, dtype, f"off {off} call {call} {what}")
            through_triton = sum(len(s.launches) for s in spies.values()) - before
            first = 2 if off == 0 else 1  # forward and backward; the backward's binary kept from the first view on
            # the second call may compile once more where a capped kernel spilled (launch drops the cap)
            want = {0: [first], 1: list(range(first + 1)), 2: [0]}[call]
            assert through_triton in want, (off, call, through_triton)


class _Block(nn.Module):
    """Attention with a fused qkv projection and the RoPE under test."""

    def __init__(self, impl: str, n_embd=256, n_head=4, seq=128, fused=False) -> None:
        super().__init__()
        self.fused = fused  # rotate_qkv (the model's path) or the module called on the q, k views
        self.n_head, self.head_dim = n_head, n_embd // n_head
        self.qkv = nn.Linear(n_embd, 3 * n_embd)
        self.proj = nn.Linear(n_embd, n_embd)
        self.rotary = rope.build(impl, self.head_dim, seq)
        self.rotary.poison_outputs = True

    def forward(self, x):
        B, T, C = x.shape
        if self.fused:
            q, k, v = self.rotary.rotate_qkv(self.qkv(x), self.n_head)
        else:
            q, k, v = self.qkv(x).view(B, T, 3, self.n_head, self.head_dim).unbind(2)
            q, k = self.rotary(q, k)
        y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(B, T, C))


@pytest.mark.parametrize("fused", (False, True))
@pytest.mark.parametrize("impl", IMPLS)
def test_torch_compile_fullgraph(impl, fused):
    """The whole block compiles with fullgraph=True (inductor): forward and backward, no graph break."""
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    torch.manual_seed(0)
    model = _Block(impl, fused=fused).to(CUDA)
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


@pytest.mark.parametrize("impl", IMPLS)
def test_gpt_compiles_fullgraph(impl):
    """The training model (llm.model.GPT, rotate_qkv path) compiles whole with fullgraph=True; its gradients
    match the reference with the compiled fused-qkv backward writing through d qkv."""
    from omegaconf import OmegaConf

    from llm.model import build_model, compile_model

    torch._dynamo.reset()
    torch.manual_seed(0)
    cfg = OmegaConf.create({"n_layer": 2, "n_head": 4, "n_embd": 256, "seq_len": 128})
    model = build_model(cfg, {"name": impl}, 1000).to(CUDA)
    ref = build_model(cfg, {"name": "torch"}, 1000).to(CUDA)
    ref.load_state_dict(model.state_dict())
    for m in model.modules():
        if isinstance(m, rope.RotaryEmbedding):
            m.poison_outputs = True
    x = torch.randint(0, 1000, (4, 128), device=CUDA)
    compiled = compile_model(model, fullgraph=True)  # as the trainer compiles: Inductor's static launcher
    with torch.autocast("cuda", dtype=torch.bfloat16):
        _, loss = compiled(x, x)
        _, loss_ref = ref(x, x)
    loss.backward()
    loss_ref.backward()
    torch.testing.assert_close(loss, loss_ref, rtol=1e-2, atol=1e-2)
    for (name, p), q in zip(model.named_parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, rtol=5e-2, atol=5e-3, msg=name)


# The plan's own tilings under compile (a compiled graph takes the default plan): rows, chunks, flat with aligned and
# shifted partners, odd halves, interleaved; GQA.
COMPILED = [(64, "full", "half", None, (4, 2)), (80, "full", "half", None, (3, 3)), (48, "full", "half", 24, (3, 1)),
            (80, "full", "half", 40, (2, 2)), (18, "full", "half", None, (3, 3)),
            (48, "partial", "interleaved", None, (4, 2))]


@pytest.mark.parametrize("D,variant,layout,rotary_dim,heads", COMPILED)
def test_compiled_rotate_qkv_equals_eager(D, variant, layout, rotary_dim, heads):
    """Compiled by Inductor, ``rotate_qkv`` (q and k read through the projection itself, d qkv written through its
    buffer) gives the eager results bit for bit, forward, gradient and without grad, with and without positions, on
    a projection that starts on and off a 16-byte boundary."""
    hq, hk = heads
    m = build_poisoned("triton_v4", D, 64, CUDA, variant=variant, layout=layout, rotary_dim=rotary_dim)
    width = (hq + 2 * hk) * D

    def f(qkv, pos):
        q, k, v = m.rotate_qkv(qkv, hq, hk, positions=pos)
        return q, k, v * 1

    for off in (0, 1):
        for pos in (None, torch.randint(0, 64, (3, 40), device=CUDA)):
            torch._dynamo.reset()  # a graph per case: fullgraph=True raises past the recompile limit
            compiled = torch.compile(f, fullgraph=True, dynamic=False)
            qkv = torch.randn(3, 40, width + 1, device=CUDA, dtype=torch.bfloat16)[..., off:off + width]
            grads = [torch.randn(3, 40, h, D, device=CUDA, dtype=torch.bfloat16) for h in (hq, hk, hk)]
            results = []
            for fn in (f, compiled):
                x = qkv.detach().requires_grad_()
                out = fn(x, pos)
                results.append((*out, *torch.autograd.grad(out, x, grads)))
            for got, want in zip(results[1], results[0], strict=True):
                assert torch.equal(got, want), (off, pos is not None)
            with torch.no_grad():
                for got, want in zip(compiled(qkv, pos), f(qkv, pos), strict=True):
                    assert torch.equal(got, want), (off, pos is not None, "no grad")


@pytest.mark.parametrize("impl,plain", [("triton_v4", True), ("triton_v2", False)])
def test_compiled_gpt_launches_the_kernels_from_inductor(impl, plain, monkeypatch):
    """Under torch.compile (static shapes) the training path goes through the triton ops: Inductor's generated code
    launches the kernels itself, one launch a layer forward and one backward (v's gradient copied by it), no
    ropelab custom op (Python dispatch, Triton's launcher: host time) is left in the graph, the launches hand over
    buffers rather than views of them, and they go through Inductor's static launcher, whether the model is
    compiled as a user writes it (``plain``: the entry's default) or as the trainer compiles it."""
    from omegaconf import OmegaConf
    from torch._inductor import async_compile
    from torch._inductor.utils import run_and_get_code
    from triton.backends.nvidia import driver

    from llm.model import build_model, compile_model

    torch._dynamo.reset()
    cfg = OmegaConf.create({"n_layer": 2, "n_head": 4, "n_embd": 192, "seq_len": 64})  # head_dim 48
    model = build_model(cfg, {"name": impl}, 500).to(CUDA)
    compile_fn = torch.compile if plain else compile_model
    compiled = compile_fn(model, fullgraph=True, dynamic=False)
    x = torch.randint(0, 500, (2, 64), device=CUDA)

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            _, loss = compiled(x, x)
        loss.backward()
        return loss

    async_compile.CompiledTritonKernels.cache_clear()  # kernels compiled by earlier tests under other options
    with torch._inductor.config.patch(force_disable_caches=True):
        _, codes = run_and_get_code(step)
    custom = [f"ropelab.{op}.default" for op in ("rope", "rope_qkv", "rope_qkv_backward")]
    assert not [op for op in custom for code in codes if op in code], codes[-1][-3000:]
    launches = [[line for line in code.splitlines() if "rope_pairs_kernel" in line and ".run(" in line]
                for code in codes]
    assert [len(x) for x in launches] == [2, 2], launches  # forward graph, backward graph: one a layer each
    assert not any("reinterpret_tensor" in line for line in launches[0]), launches
    python_launches = []
    monkeypatch.setattr(driver.CudaLauncher, "__call__", lambda self, *a: python_launches.append(a))
    step()
    torch.cuda.synchronize()
    assert not python_launches, f"{len(python_launches)} launches through Triton's Python launcher"


def test_triton_ops_run_eagerly_then_traced():
    """A triton op run eagerly (``wrap_triton`` off: the body launches the bare kernel) and then traced by a compiled
    graph (``wrap_triton`` on: the launch becomes a graph node on fake tensors): each gets its own wrapping."""
    traced = ops.traced_ops()
    if traced is None:
        pytest.skip("this torch has no torch.library.triton_op")
    r = rope.build("triton_v4", 48, 16).to(CUDA)
    q, k, gv = (torch.randn(2, 5, h, 48, device=CUDA, dtype=torch.bfloat16) for h in (3, 1, 1))

    def both(q, k, gv):
        yq, yk = traced.rope(q, k, r.cos, r.sin, None, *r.rotation, False, False)
        return yq, yk, traced.qkv_backward(yq, yk, gv, r.cos, r.sin, None, *r.rotation, False)

    eager = both(q, k, gv)
    torch._dynamo.reset()
    compiled = torch.compile(both, fullgraph=True, backend="aot_eager")(q, k, gv)
    for got, want in zip(compiled, eager, strict=True):
        assert torch.equal(got, want)
