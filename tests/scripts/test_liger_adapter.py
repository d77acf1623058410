"""scripts/liger_adapter.py: Liger-Kernel's RoPE computing this repository's rotation (CPU, Triton interpreter).

Skipped where liger-kernel is not installed (it is an optional dependency of the benchmarks). The tables
are float32 here: the interpreter gets bf16 arithmetic wrong (the GPU benchmark checks the bf16 tables).
"""

from __future__ import annotations

import importlib

import pytest
import torch

import rope
from scripts import liger_adapter

pytestmark = pytest.mark.skipif(liger_adapter.liger_rope() is None, reason="liger-kernel is not installed")


def test_hf_tables_are_full_width_with_the_sine_negated():
    cos, sin = torch.rand(5, 3), torch.rand(5, 3)
    c, s = liger_adapter.hf_tables(cos, sin, torch.bfloat16)
    assert c.shape == (5, 6) and c.dtype == torch.bfloat16 and c.is_contiguous()
    assert torch.equal(c.float(), torch.cat((cos, cos), -1).bfloat16().float())
    assert torch.equal(s, -torch.cat((sin, sin), -1).bfloat16())


@pytest.mark.interpreter
@pytest.mark.parametrize("variant", ["partial", "full"])
@pytest.mark.parametrize("shape", [(2, 5, 3, 16), (1, 4, 1, 24)])
def test_native_forward_and_backward_match_the_reference(variant, shape):
    B, T, H, D = shape
    ref = rope.build("torch", D, 8, variant=variant)
    native = liger_adapter.LigerNative(ref, dtype=torch.float32)
    q, k, gq, gk = (torch.randn(B, T, H, D, dtype=torch.bfloat16) for _ in range(4))
    qg, kg = q.clone().requires_grad_(), k.clone().requires_grad_()
    want_f = ref(qg, kg)
    want_b = torch.autograd.grad(want_f, (qg, kg), (gq, gk))
    qq, kk = q.clone(), k.clone()
    got_f = native.forward(qq, kk)
    assert got_f[0].data_ptr() == qq.data_ptr()  # in place, no copy: the zero-copy layout
    got_b = native.backward(gq.clone(), gk.clone())
    for got, want in ((got_f, want_f), (got_b, want_b)):
        for a, b in zip(got, want, strict=True):
            assert a.shape == (B, T, H, D)
            torch.testing.assert_close(a.float(), b.float(), atol=2e-2, rtol=2e-2)
    pos = torch.tensor([[3, 0, 7, 1, 2][:T]] * B)
    cos, sin = native.tables(T, pos)
    assert cos.shape == (B, T, D)
    got = native.forward(q.clone(), k.clone(), cos, sin)
    torch.testing.assert_close(got[0].float(), ref(q, positions=pos).float(), atol=2e-2, rtol=2e-2)


def test_native_refuses_what_liger_does_not_compute():
    with pytest.raises(ValueError, match="half-split"):
        liger_adapter.LigerNative(rope.build("torch", 16, 8, layout="interleaved"))
    with pytest.raises(ValueError, match="whole head"):
        liger_adapter.LigerNative(rope.build("torch", 16, 8, rotary_dim=8))


def test_rope_file_is_loaded_alone_when_the_ops_package_fails(monkeypatch):
    real = importlib.import_module

    def failing(name, *args):
        if name == "liger_kernel.ops.rope":
            raise ImportError("an op of the package needs a newer triton")
        return real(name, *args)

    monkeypatch.setattr(importlib, "import_module", failing)
    liger_adapter.liger_rope.cache_clear()
    try:
        ops = liger_adapter.liger_rope()
        assert ops is not None and ops.__name__ == "_liger_rope_standalone" and callable(ops.rope_forward)
    finally:
        monkeypatch.undo()
        liger_adapter.liger_rope.cache_clear()


def test_cpu_tensors_without_the_interpreter_leave_liger_out_in_one_line(monkeypatch):
    """On a GPU machine (no interpreter), ``bench_rope --device cpu`` once launched Liger's kernels on CPU tensors
    and reported Triton's "Pointer argument cannot be accessed" for every configuration."""
    from scripts import bench_rope_modes as bm

    monkeypatch.setenv("TRITON_INTERPRET", "0")
    reason = liger_adapter.unavailable_reason(torch.device("cpu"))
    assert reason == ("Liger's kernels run on a CUDA GPU, or on the CPU under Triton's interpreter "
                      "(TRITON_INTERPRET=1), not on cpu: Liger's columns are left out")
    assert liger_adapter.unavailable_reason("cuda:1") is None and liger_adapter.unavailable_reason() is None
    names, notes = bm.impl_names("torch", torch.device("cpu"), liger=True, compiled=False)
    assert bm.LIGER not in names and reason in notes
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert liger_adapter.unavailable_reason(torch.device("cpu")) is None
    assert bm.LIGER in bm.impl_names("torch", torch.device("cpu"), liger=True, compiled=False)[0]
