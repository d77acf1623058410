"""What is particular to the PyTorch reference (``torch``); what every entry must do is in
``test_conformance.py``. Computing in float64 (``compute_dtype="float64"``), the reference shows the
mathematical properties of the rotation itself: it preserves norms, attention scores depend only on
relative positions, and its gradient is the transposed rotation."""

from __future__ import annotations

import math

import pytest
import torch

import rope

from .test_conformance import formula64


@pytest.mark.parametrize("variant", ["partial", "full"])
def test_rotation_preserves_norm(variant):
    x = torch.randn(3, 50, 4, 64, dtype=torch.float64)
    r = rope.build("torch", 64, 64, variant=variant, compute_dtype="float64")
    # cos/sin tables are float32 (cos^2 + sin^2 = 1 to ~1e-7), so the norm holds to that precision
    torch.testing.assert_close(r(x).norm(dim=-1), x.norm(dim=-1), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("variant", ["partial", "full"])
def test_scores_depend_only_on_relative_position(variant):
    D, T = 32, 40
    r = rope.build("torch", D, T, variant=variant, compute_dtype="float64")
    q = torch.randn(D, dtype=torch.float64)
    k = torch.randn(D, dtype=torch.float64)
    qs = r(q.expand(1, T, 1, D).contiguous())[0, :, 0]
    ks = r(k.expand(1, T, 1, D).contiguous())[0, :, 0]
    scores = qs @ ks.T  # scores[m, n]
    for delta in (0, 3, 11):
        diag = torch.diagonal(scores, offset=-delta)  # m - n = delta
        torch.testing.assert_close(diag, diag[0].expand_as(diag), rtol=1e-5, atol=1e-5)
    assert (scores.diagonal(-1) - scores.diagonal(-3)[0]).abs().max() > 1e-3  # it does depend on m - n


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_output_dtype_follows_input_and_compute_dtype_is_honoured(dtype):
    x = torch.randn(1, 20, 2, 64).to(dtype)
    y32 = rope.build("torch", 64, 32)(x)
    ylow = rope.build("torch", 64, 32, compute_dtype="bfloat16")(x)
    assert y32.dtype == dtype and ylow.dtype == dtype
    ref = formula64(x, torch.arange(20), 10000.0, "partial")
    assert (y32.double() - ref).abs().max() <= (ylow.double() - ref).abs().max()


def test_gradient_is_transposed_rotation():
    x = torch.randn(2, 6, 2, 32, dtype=torch.float64, requires_grad=True)
    r = rope.build("torch", 32, 8, compute_dtype="float64")
    g = torch.randn_like(x)
    (r(x) * g).sum().backward()
    # rotation is orthogonal: grad = R^T g, and R^T = rotation by -theta, so R(grad) == g
    torch.testing.assert_close(r(x.grad), g, rtol=1e-6, atol=1e-6)
    assert math.isfinite(x.grad.abs().sum().item())


@pytest.mark.parametrize("variant", ["partial", "full"])
def test_float64_inputs_are_computed_in_float64_under_the_default_compute_dtype(variant):
    """float64 inputs are rotated in float64 arithmetic (bit for bit compute_dtype="float64": the shared float32
    tables' values, exactly), not rounded through float32 and widened back; so a gradcheck passes."""
    x = torch.randn(2, 6, 2, 16, dtype=torch.float64, requires_grad=True)
    pos = torch.randint(0, 8, (2, 6))
    default = rope.build("torch", 16, 8, variant=variant)
    y = default(x, positions=pos)
    assert y.dtype == torch.float64
    assert torch.equal(y, rope.build("torch", 16, 8, variant=variant, compute_dtype="float64")(x, positions=pos))
    assert not torch.equal(y, default(x.float(), positions=pos).double())  # float32 arithmetic differs
    assert torch.autograd.gradcheck(lambda t: default(t, positions=pos), (x,))


def test_compute_dtype_is_checked_once_for_build_and_check_args():
    for call in (rope.check_args, rope.build):
        with pytest.raises(rope.RopeArgumentError, match="compute_dtype must be") as err:
            call("torch", 32, 16, compute_dtype="int8")
        assert err.value.argument == "compute_dtype"
    with pytest.raises(rope.RopeArgumentError, match="compute_dtype must be"):
        rope.get("torch")(32, 16, compute_dtype="int8")  # the constructor runs the same check
    assert rope.get("torch").option_defaults() == {
        "variant": "partial", "layout": "half", "rotary_dim": None, "scaling": None,
        "compute_dtype": "float32"}


def test_hot_path_table_references_follow_the_buffers():
    """The per-call path reads the cos/sin buffers through plain references (``_cos_sin``, cheaper than
    ``nn.Module.__getattr__``); they must follow every way the buffers change: ``.to()``, assignment,
    deepcopy, and reach the rotation (a stale reference would rotate with the old tables)."""
    import copy

    r = rope.build("torch", 16, 8)
    assert r._cos_sin[0] is r.cos and r._cos_sin[1] is r.sin
    before = r.cos
    r._apply(lambda t: t.clone())  # what .to(device) does: new tensors
    assert r.cos is not before and r._cos_sin[0] is r.cos and r._cos_sin[1] is r.sin
    r.to(torch.float64)  # a dtype cast leaves the float32 tables (test_conformance.py)
    assert r._cos_sin[0] is r.cos and r.cos.dtype == torch.float32
    r.sin = torch.zeros_like(r.sin)
    assert r._cos_sin[1] is r.sin
    twin = copy.deepcopy(r)
    assert twin._cos_sin[0] is twin.cos and twin.cos is not r.cos
    x = torch.randn(1, 8, 2, 16)  # float32, the entry's compute dtype
    r.cos = torch.ones_like(r.cos)  # cos 1, sin 0: the identity, if the new tables are the ones used
    assert torch.equal(r(x), x)
