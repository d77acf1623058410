"""``rope=liger``: Liger-Kernel's Triton RoPE computing this project's function.

Against the ``torch`` entry computing in float64, forward and backward: both variants, ``rotary_dim``
< D, positions (T,) / (B, T), GQA, strided views, q alone; the caller's tensors (inputs and output
gradients: Liger's kernel works in place) are left as they were; the errors (package missing or too
old, layout, device). Small shapes: on a CPU Liger's kernel runs under the Triton interpreter
(``tests/conftest.py`` sets ``TRITON_INTERPRET=1``); without ``liger-kernel`` installed the kernel
tests are skipped with the entry's own reason, and the error tests still run.
"""

from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import rope
import rope.liger as liger_module
from rope._numerics import ulp

from .cases import make_inputs, make_positions, output_grads

ROOT = Path(__file__).resolve().parents[2]
FLOAT32_ATOL = 2e-6
FLOAT32_EVAL = 2.0**-22  # relative to |x1| + |x2|: float32 evaluation of x1*c + x2*s (see test_conformance)


@pytest.fixture
def liger_device(device) -> torch.device:
    """The test device, where rope=liger can run there; else the test is skipped with the reason."""
    reason = rope.get("liger").unavailable_reason(device)
    if reason is not None:
        pytest.skip(reason)
    return device


def _pair_scale(x: torch.Tensor, R: int) -> torch.Tensor:
    """|x1| + |x2| of each element's pair within the rotated width (0 beyond it), float64."""
    x = x.detach().double().abs()
    x1, x2 = x[..., :R].chunk(2, dim=-1)
    s = x1 + x2
    return torch.cat([s, s, torch.zeros_like(x[..., R:])], dim=-1)


def assert_close(out: torch.Tensor, ref64: torch.Tensor, scale: torch.Tensor, what: str) -> None:
    """float32 arithmetic, rounded once to the input dtype: float32 within 2e-6 of the float64
    reference; bf16/fp16 within one ulp of it rounded, plus the float32 evaluation error."""
    assert out.shape == ref64.shape, f"{what}: shape {tuple(out.shape)}, expected {tuple(ref64.shape)}"
    assert not out.isnan().any(), f"{what}: NaN"
    if out.dtype == torch.float32:
        err, bound = (out.double() - ref64).abs(), torch.full_like(ref64, FLOAT32_ATOL)
    else:
        rounded = ref64.to(out.dtype)
        err = (out.double() - rounded.double()).abs()
        bound = ulp(rounded, out.dtype) + FLOAT32_EVAL * scale
    bad = err > bound
    assert not bad.any(), f"{what} ({out.dtype}): {int(bad.sum())} elements beyond the bound, max error {err.max():.3g}"


def _reference(D: int, max_seq_len: int, variant: str, rotary_dim: int | None, device) -> rope.RotaryEmbedding:
    return rope.build("torch", D, max_seq_len, variant=variant, rotary_dim=rotary_dim,
                      compute_dtype="float64").to(device)


# (variant, D, rotary_dim, memory layout, positions, dtype): every memory layout and position kind,
# both variants, the whole head and a part of it.
CASES = [
    (variant, D, R, memory, pos, dtype)
    for (variant, (D, R)), memory, pos, dtype in zip(
        itertools.cycle(itertools.product(("partial", "full"), ((32, None), (48, 16), (40, 24)))),
        ("contiguous", "qkv", "gqa", "transposed", "strided_d") * 3,
        ("none", "t", "bt", "bt_int32", "t") * 3,
        (torch.float32, torch.float32, torch.bfloat16, torch.float16, torch.float32) * 3,
    )
]


def _case_id(case) -> str:
    variant, D, R, memory, pos, dtype = case
    return f"{variant}-D{D}-R{R or D}-{memory}-pos_{pos}-{str(dtype).removeprefix('torch.')}"


@pytest.mark.parametrize("case", CASES, ids=[_case_id(c) for c in CASES])
def test_matches_torch_forward_and_backward(case, liger_device):
    variant, D, R, memory, pos_kind, dtype = case
    device = liger_device
    B, T, HQ, max_seq_len = 2, 5, 3, 12
    HK = 2 if memory == "gqa" else HQ
    r = rope.build("liger", D, max_seq_len, variant=variant, rotary_dim=R).to(device)
    ref = _reference(D, max_seq_len, variant, R, device)
    q, k = make_inputs(memory, B, T, HQ, HK, D, dtype, device)
    pos = make_positions(pos_kind, B, T, max_seq_len, device)
    q_before, k_before = q.detach().clone(), k.detach().clone()

    yq, yk = r(q, k, positions=pos)
    assert yq.dtype == yk.dtype == dtype and yq.shape == q.shape and yk.shape == k.shape
    gq, gk = output_grads(yq.shape, yk.shape, dtype, device)
    gq_before, gk_before = gq.clone(), gk.clone()
    dq, dk = torch.autograd.grad((yq, yk), (q, k), (gq, gk))

    # Liger works in place: neither the inputs nor the output gradients may have changed.
    assert torch.equal(q.detach(), q_before) and torch.equal(k.detach(), k_before)
    assert torch.equal(gq, gq_before) and torch.equal(gk, gk_before)

    q64, k64 = q.detach().double().requires_grad_(), k.detach().double().requires_grad_()
    rq, rk = ref(q64, k64, positions=pos)
    rdq, rdk = torch.autograd.grad((rq, rk), (q64, k64), (gq.double(), gk.double()))
    width = R or D
    assert_close(yq, rq, _pair_scale(q, width), "q forward")
    assert_close(yk, rk, _pair_scale(k, width), "k forward")
    assert_close(dq, rdq, _pair_scale(gq, width), "q backward")
    assert_close(dk, rdk, _pair_scale(gk, width), "k backward")
    # beyond the rotated width, and (partial) the zero-frequency quarter of each half: bit for bit
    assert torch.equal(yq[..., width:], q_before[..., width:]) and torch.equal(dk[..., width:], gk[..., width:])
    if variant == "partial":
        quarter = width // 4
        for y, x in ((yq, q_before), (yk, k_before)):
            assert torch.equal(y[..., quarter : 2 * quarter], x[..., quarter : 2 * quarter])
            assert torch.equal(y[..., 3 * quarter : width], x[..., 3 * quarter : width])


@pytest.mark.parametrize("R", [None, 16])
def test_q_alone_and_gqa_k_alone(R, liger_device):
    """r(q) is one tensor (Liger gets a one-head zero k); k's rotation does not depend on q's heads."""
    device, D, T = liger_device, 32, 6
    r = rope.build("liger", D, 8, variant="full", rotary_dim=R).to(device)
    ref = _reference(D, 8, "full", R, device)
    q = torch.randn(2, T, 5, D, device=device, requires_grad=True)
    k = torch.randn(2, T, 1, D, device=device)
    y = r(q)
    assert isinstance(y, torch.Tensor) and y.shape == q.shape
    g = torch.randn_like(y)
    (dq,) = torch.autograd.grad(y, q, g)
    q64 = q.detach().double().requires_grad_()
    y64 = ref(q64)
    (dq64,) = torch.autograd.grad(y64, q64, g.double())
    assert_close(y, y64, _pair_scale(q, R or D), "forward")
    assert_close(dq, dq64, _pair_scale(g, R or D), "backward")
    _, yk = r(q.detach(), k)
    assert torch.equal(r(k), yk)


@pytest.mark.parametrize("scaling", [
    {"type": "yarn", "factor": 4.0, "original_max_seq_len": 8},
    {"type": "dynamic_ntk", "factor": 2.0, "original_max_seq_len": 4},
], ids=lambda s: s["type"])
def test_scaling_follows_the_base_tables(scaling, liger_device):
    """Liger's tables are made from the base class's at each call: YaRN's attention factor is in
    them, and dynamic_ntk's tables, rebuilt in place as the length grows, are followed."""
    device, D = liger_device, 32
    r = rope.build("liger", D, 16, variant="full", scaling=scaling).to(device)
    ref = rope.build("torch", D, 16, variant="full", scaling=scaling, compute_dtype="float64").to(device)
    for T in (3, 12):  # dynamic_ntk: within, then beyond original_max_seq_len
        q = torch.randn(2, T, 2, D, device=device)
        assert_close(r(q), ref(q.double()), _pair_scale(q, D), f"T={T}")


def test_config_file_builds():
    """conf/rope/liger.yaml's keys are the entry's build options (as llm.model passes them)."""
    OmegaConf = pytest.importorskip("omegaconf").OmegaConf
    cfg = OmegaConf.to_container(OmegaConf.load(ROOT / "conf" / "rope" / "liger.yaml"))
    assert cfg["name"] == "liger"
    opts = {k: v for k, v in cfg.items() if k not in ("name", "base")}
    rope.check_args("liger", 64, 16, base=cfg["base"], **opts)
    if rope.get("liger").unavailable_reason(torch.device("cuda")) is None:
        r = rope.build("liger", 64, 16, base=cfg["base"], **opts)
        assert r.registry_name == "liger" and r.variant == "partial" and r.layout == "half"


def test_rotate_qkv_leaves_the_projection_alone(liger_device):
    """The model's path: q, k are views of one fused projection, which Liger must not write."""
    device, B, T, HQ, HK, D = liger_device, 2, 5, 4, 2, 32
    r = rope.build("liger", D, 8).to(device)
    ref = _reference(D, 8, "partial", None, device)
    qkv = torch.randn(B, T, (HQ + 2 * HK) * D, device=device, requires_grad=True)
    before = qkv.detach().clone()
    yq, yk, v = r.rotate_qkv(qkv, HQ, HK)
    assert torch.equal(qkv.detach(), before)
    q, k, _ = qkv.detach().split([HQ * D, HK * D, HK * D], dim=-1)
    rq, rk = ref(q.reshape(B, T, HQ, D).double(), k.reshape(B, T, HK, D).double())
    assert_close(yq, rq, _pair_scale(yq, D), "q")
    assert_close(yk, rk, _pair_scale(yk, D), "k")
    (dqkv,) = torch.autograd.grad((yq.sum() + yk.sum() + v.sum()), qkv)
    assert dqkv.shape == qkv.shape and torch.equal(qkv.detach(), before)


@pytest.mark.parametrize("R", [None, 16])
def test_output_gradients_are_not_written(R, liger_device):
    """Liger's backward rotates the gradient in place when it is contiguous: the caller's own
    ``grad_outputs`` (contiguous here) must come out as they went in."""
    device, D = liger_device, 32
    r = rope.build("liger", D, 8, rotary_dim=R).to(device)
    q = torch.randn(2, 5, 3, D, device=device, requires_grad=True)
    k = torch.randn(2, 5, 1, D, device=device, requires_grad=True)
    yq, yk = r(q, k)
    gq, gk = torch.randn_like(yq), torch.randn_like(yk)
    gq_before, gk_before = gq.clone(), gk.clone()
    torch.autograd.grad((yq, yk), (q, k), (gq, gk))
    assert torch.equal(gq, gq_before) and torch.equal(gk, gk_before)


def test_outputs_can_be_modified_in_place(liger_device):
    """As with every other entry's outputs (a view returned by an autograd Function could not be)."""
    device = liger_device
    r = rope.build("liger", 16, 8, variant="full").to(device)
    q = torch.randn(1, 4, 2, 16, device=device, requires_grad=True)
    k = torch.randn(1, 4, 2, 16, device=device, requires_grad=True)
    yq, yk = r(q, k)
    (yq.mul_(2).sum() + yk.add_(1).sum()).backward()
    assert q.grad is not None and k.grad is not None


def test_out_of_range_position_gives_nan_rows(liger_device):
    """Past the host-side check (as on an accelerator): the token at a position outside the table is
    NaN, the others rotated as usual (``rope.reference.gather_cos_sin``'s semantics)."""
    device = liger_device
    r = rope.build("liger", 16, 8, variant="full").to(device)
    q = torch.randn(2, 3, 2, 16, device=device)
    pos = torch.tensor([[0, 8, 2], [1, 2, -1]], device=device)
    yq, _ = r.rotate(q, None, pos)
    assert yq[0, 1].isnan().all() and yq[1, 2].isnan().all()
    assert not yq[0, 0].isnan().any() and not yq[1, :2].isnan().any()


def test_describe_declares_float32_arithmetic():
    if rope.get("liger").unavailable_reason(torch.device("cuda")) is not None:
        pytest.skip("liger-kernel not installed")
    d = rope.build("liger", 32, 8, variant="full", rotary_dim=16).describe()
    assert {k: d[k] for k in ("rope", "variant", "compute_dtype", "layout", "rotary_dim")} == {
        "rope": "liger", "variant": "full", "compute_dtype": "float32", "layout": "half", "rotary_dim": 16}
    assert d["liger_kernel"]


# -- errors --------------------------------------------------------------------------------------------
def test_interleaved_layout_is_refused_naming_layout():
    for call in (rope.check_args, rope.build):
        with pytest.raises(rope.RopeArgumentError, match="liger.*layout|layout.*liger") as e:
            call("liger", 32, 16, layout="interleaved")
        assert e.value.argument == "layout" and "\n" not in str(e.value)


def _without_liger(monkeypatch) -> None:
    """Make ``import liger_kernel...`` fail as when the package is not installed."""
    for name in [m for m in sys.modules if m == "liger_kernel" or m.startswith("liger_kernel.")]:
        monkeypatch.delitem(sys.modules, name)
    for name in ("liger_kernel", "liger_kernel.ops", "liger_kernel.ops.rope"):
        monkeypatch.setitem(sys.modules, name, None)


def test_missing_package_gives_one_line_naming_it(monkeypatch):
    _without_liger(monkeypatch)
    assert "liger" in rope.available()
    rope.check_args("liger", 32, 16)  # the arguments are fine; it is the machine that lacks the package
    with pytest.raises(RuntimeError, match=r"`liger-kernel` package \(pip install liger-kernel\)") as e:
        rope.build("liger", 32, 16)
    assert "\n" not in str(e.value)
    for device in ("cpu", "cuda"):
        reason = rope.get("liger").unavailable_reason(torch.device(device))
        assert reason == str(e.value)


def test_too_old_package_is_refused(monkeypatch):
    if rope.get("liger").unavailable_reason(torch.device("cuda")) is not None:
        pytest.skip("liger-kernel not installed")
    monkeypatch.setattr(liger_module.metadata, "version", lambda name: "0.5.2")
    with pytest.raises(RuntimeError, match=r"liger-kernel>=0\.5\.3.*found 0\.5\.2"):
        rope.build("liger", 32, 16)


def test_version_tuple():
    v = liger_module._version_tuple
    assert v("0.8.5") == (0, 8, 5) and v("0.5.3.dev20250101") == (0, 5, 3) and v("1.0+local") == (1, 0)
    assert v("weird") == () and v("0.5.2") < liger_module.MIN_VERSION <= v("0.5.3")


def test_cpu_without_interpreter_is_refused(monkeypatch):
    if rope.get("liger").unavailable_reason(torch.device("cuda")) is not None:
        pytest.skip("liger-kernel not installed")
    monkeypatch.setattr("rope._launch.INTERPRETING", False)  # a process started without TRITON_INTERPRET=1
    reason = rope.get("liger").unavailable_reason(torch.device("cpu"))
    assert reason and "\n" not in reason and "use the torch implementation" in reason and "rope=" not in reason
    assert rope.get("liger").unavailable_reason(torch.device("cuda")) is None
    r = rope.build("liger", 16, 8)
    with pytest.raises(ValueError, match="needs CUDA tensors"):
        r(torch.randn(1, 4, 2, 16))


def test_float64_inputs_are_refused():
    if rope.get("liger").unavailable_reason(torch.device("cuda")) is not None:
        pytest.skip("liger-kernel not installed")
    with pytest.raises(TypeError, match="float32, bfloat16 and float16"):
        rope.build("liger", 16, 8)(torch.randn(1, 4, 2, 16, dtype=torch.float64))


def test_importing_rope_does_not_import_liger():
    """Liger's package import takes seconds: it happens when the entry is built, never on ``import rope``."""
    code = "import sys, rope; assert 'liger' in rope.available(); assert 'liger_kernel' not in sys.modules"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
