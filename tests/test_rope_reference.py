"""The registry and the PyTorch reference against an independent float64 formula."""

import math

import pytest
import torch

import rope


def formula64(x: torch.Tensor, positions: torch.Tensor, base: float, variant: str) -> torch.Tensor:
    """Independent float64 RoPE: element by element from the definition, no shared code with rope/."""
    B, T, H, D = x.shape
    half = D // 2
    if variant == "partial":
        q = D // 4
        freqs = [(1.0 / base) ** (i / (q - 1) if q > 1 else 0.0) for i in range(q)] + [0.0] * q
    else:
        freqs = [base ** (-2.0 * i / D) for i in range(half)]
    f = torch.tensor(freqs, dtype=torch.float64)
    pos = positions.double()
    theta = pos[..., None] * f  # (T, half) or (B, T, half)
    cos, sin = theta.cos(), theta.sin()
    if cos.dim() == 2:
        cos, sin = cos[None, :, None, :], sin[None, :, None, :]
    else:
        cos, sin = cos[:, :, None, :], sin[:, :, None, :]
    x = x.double()
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos + x2 * sin, -x1 * sin + x2 * cos], dim=-1)


def test_registry_lists_and_refuses_unknown():
    names = rope.available()
    assert {"torch", "none"} <= set(names)
    with pytest.raises(KeyError, match="available: .*torch"):
        rope.build("no_such_rope", 64, 128)


def test_every_registered_name_has_a_config_file():
    from pathlib import Path

    conf = Path(__file__).resolve().parent.parent / "conf" / "rope"
    for name in rope.available():
        assert (conf / f"{name}.yaml").is_file(), f"conf/rope/{name}.yaml missing"


def test_register_refuses_non_rotary_class():
    with pytest.raises(TypeError, match="RotaryEmbedding"):
        rope.register("bogus")(object)


@pytest.mark.parametrize("variant", ["partial", "full"])
@pytest.mark.parametrize("D", [16, 32, 48, 64, 128, 256])
def test_reference_matches_float64_formula(variant, D):
    T = 37
    x = torch.randn(2, T, 3, D)
    r = rope.build("torch", D, 64, base=10000.0, variant=variant)
    y = r(x)
    ref = formula64(x, torch.arange(T), 10000.0, variant)
    assert y.dtype == x.dtype and y.shape == x.shape
    assert (y.double() - ref).abs().max() < 2e-6


def test_partial_leaves_last_quarter_of_each_half_unrotated():
    D = 64
    x = torch.randn(1, 9, 2, D)
    y = rope.build("torch", D, 16)(x)
    q = D // 4
    torch.testing.assert_close(y[..., q:2 * q], x[..., q:2 * q], rtol=0, atol=0)
    torch.testing.assert_close(y[..., 3 * q:], x[..., 3 * q:], rtol=0, atol=0)
    assert not torch.allclose(y[:, 1:, :, :q], x[:, 1:, :, :q])


def test_buffers_are_float32_of_half_width():
    r = rope.build("torch", 48, 100)
    assert r.cos.dtype == torch.float32 and r.cos.shape == (100, 24)
    assert r.sin.dtype == torch.float32 and r.sin.shape == (100, 24)


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


def test_positions_select_cache_rows():
    D = 32
    r = rope.build("torch", D, 64)
    x = torch.randn(2, 5, 3, D)
    pos_t = torch.tensor([7, 0, 63, 12, 12])
    torch.testing.assert_close(r(x, positions=pos_t).double(), formula64(x, pos_t, 10000.0, "partial"),
                               rtol=0, atol=2e-6)
    pos_bt = torch.randint(0, 64, (2, 5))
    torch.testing.assert_close(r(x, positions=pos_bt).double(), formula64(x, pos_bt, 10000.0, "partial"),
                               rtol=0, atol=2e-6)


def test_q_and_k_with_fewer_kv_heads():
    r = rope.build("torch", 64, 32)
    q, k = torch.randn(2, 10, 8, 64), torch.randn(2, 10, 2, 64)
    q2, k2 = r(q, k)
    assert q2.shape == q.shape and k2.shape == k.shape
    torch.testing.assert_close(k2, r(k))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_output_dtype_follows_input_and_compute_dtype_is_honoured(dtype):
    x = torch.randn(1, 20, 2, 64).to(dtype)
    y32 = rope.build("torch", 64, 32)(x)
    ylow = rope.build("torch", 64, 32, compute_dtype="bfloat16")(x)
    assert y32.dtype == dtype and ylow.dtype == dtype
    ref = formula64(x, torch.arange(20), 10000.0, "partial")
    assert (y32.double() - ref).abs().max() <= (ylow.double() - ref).abs().max()


def test_none_is_identity():
    x = torch.randn(2, 8, 2, 16)
    q, k = rope.build("none", 16, 8)(x, x)
    assert q is x and k is x


@pytest.mark.parametrize(
    "kwargs,match",
    [({"head_dim": 30}, "multiple of 4"), ({"head_dim": 31, "variant": "full"}, "even"),
     ({"head_dim": 32, "variant": "diagonal"}, "variant"), ({"head_dim": 32, "max_seq_len": 0}, "max_seq_len")],
)
def test_bad_construction_is_refused(kwargs, match):
    args = {"head_dim": 32, "max_seq_len": 16, **kwargs}
    with pytest.raises(ValueError, match=match):
        rope.build("torch", **args)


def test_bad_calls_are_refused():
    r = rope.build("torch", 32, 16)
    with pytest.raises(ValueError, match="head_dim=32"):
        r(torch.randn(1, 4, 2, 16))
    with pytest.raises(ValueError, match="max_seq_len=16"):
        r(torch.randn(1, 17, 2, 32))
    with pytest.raises(TypeError, match="floating"):
        r(torch.ones(1, 4, 2, 32, dtype=torch.int64))
    with pytest.raises(ValueError, match="agree in B, T and D"):
        r(torch.randn(1, 4, 2, 32), torch.randn(1, 5, 2, 32))
    with pytest.raises(ValueError, match="positions must lie in"):
        r(torch.randn(1, 4, 2, 32), positions=torch.tensor([0, 1, 2, 16]))
    with pytest.raises(TypeError, match="integer"):
        r(torch.randn(1, 4, 2, 32), positions=torch.arange(4.0))
    with pytest.raises(ValueError, match="unknown compute_dtype|compute_dtype must be"):
        rope.build("torch", 32, 16, compute_dtype="int8")
    with pytest.raises(TypeError):
        rope.build("torch", 32, 16, no_such_option=1)


def test_gradient_is_transposed_rotation():
    x = torch.randn(2, 6, 2, 32, dtype=torch.float64, requires_grad=True)
    r = rope.build("torch", 32, 8, compute_dtype="float64")
    g = torch.randn_like(x)
    (r(x) * g).sum().backward()
    # rotation is orthogonal: grad = R^T g, and R^T = rotation by -theta, so R(grad) == g
    torch.testing.assert_close(r(x.grad), g, rtol=1e-6, atol=1e-6)
    assert math.isfinite(x.grad.abs().sum().item())
