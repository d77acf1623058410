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


@pytest.mark.parametrize("compute_dtype", ["float64", "float32"])
@pytest.mark.parametrize("variant", ["partial", "full"])
def test_rotation_preserves_norm(variant, compute_dtype):
    """To float64 precision, with the default compute_dtype too: float64 inputs read float64 tables (float32 ones
    hold cos^2 + sin^2 = 1 to about 1e-7 only)."""
    x = torch.randn(3, 50, 4, 64, dtype=torch.float64)
    r = rope.build("torch", 64, 64, variant=variant, compute_dtype=compute_dtype)
    torch.testing.assert_close(r(x).norm(dim=-1), x.norm(dim=-1), rtol=1e-13, atol=0)


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
    torch.testing.assert_close(r(x.grad), g, rtol=1e-12, atol=1e-12)
    assert math.isfinite(x.grad.abs().sum().item())


@pytest.mark.parametrize("variant", ["partial", "full"])
def test_gradcheck_with_the_default_compute_dtype(variant):
    """float64 inputs are computed in float64 under the default compute_dtype (float32 is a floor), so gradcheck's
    finite differences agree with the gradients; in float32 they are off by far more than its tolerance."""
    x = torch.randn(2, 6, 2, 16, dtype=torch.float64, requires_grad=True)
    r = rope.build("torch", 16, 8, variant=variant)
    assert torch.autograd.gradcheck(r, (x,))
    assert torch.autograd.gradgradcheck(r, (x,))


def test_a_lower_compute_dtype_asked_for_is_kept_on_float64_inputs():
    """compute_dtype=bfloat16 emulates low precision on any input: float64 inputs are not promoted past it."""
    x = torch.randn(1, 8, 2, 32, dtype=torch.float64)
    ref = formula64(x, torch.arange(8), 10000.0, "partial")
    y = rope.build("torch", 32, 8, compute_dtype="bfloat16")(x)
    assert y.dtype == torch.float64 and (y - ref).abs().max() > 1e-4


def test_float64_tables_follow_the_buffers():
    """The float64 tables are those of the buffers in use: buffers swapped in (functional_call) or changed in place
    are used as they are, the dynamic_ntk tables of each length, a module materialised from the meta device, and a
    compiled graph rotates as eager code does."""
    from torch.func import functional_call

    D = 32
    r = rope.build("torch", D, 16)
    x = torch.randn(2, 10, 2, D, dtype=torch.float64)
    want = formula64(x, torch.arange(10), 10000.0, "partial")
    assert torch.allclose(r(x), want, rtol=0, atol=1e-13)
    identity = {"cos": torch.ones_like(r.cos), "sin": torch.zeros_like(r.sin)}
    assert torch.equal(functional_call(r, identity, (x,)), x)
    assert torch.allclose(r(x), want, rtol=0, atol=1e-13)  # the module's own tables again
    r.cos.fill_(1.0)
    r.sin.zero_()
    assert torch.equal(r(x), x)

    with torch.device("meta"):
        meta = rope.build("torch", D, 16)
    assert torch.allclose(meta.to_empty(device="cpu")(x), want, rtol=0, atol=1e-13)

    scaling = {"type": "dynamic_ntk", "factor": 2.0, "original_max_seq_len": 8}
    dyn = rope.build("torch", D, 64, variant="full", scaling=scaling)
    for T in (8, 30, 12):
        y = dyn(torch.randn(1, T, 1, D, dtype=torch.float64))
        c64, s64 = dyn.float64_tables()
        assert torch.equal(c64.float(), dyn.cos) and torch.equal(s64.float(), dyn.sin), T
        assert not torch.equal(c64, dyn.cos.double()), T  # float64 values, not the float32 ones widened
        assert y.dtype == torch.float64

    torch._dynamo.reset()
    compiled = torch.compile(rope.build("torch", D, 16), backend="aot_eager", fullgraph=True)
    assert torch.equal(compiled(x), rope.build("torch", D, 16)(x))


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
