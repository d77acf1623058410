"""rope=cutedsl on a machine without a GPU: the missing package is named, the CPU is refused with a
reason, the launch geometry, and (with nvidia-cutlass-dsl installed) the kernel compiled offline for
sm_90a with vector memory accesses. Its numerics run on the GPU: ``test_cutedsl_gpu.py``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

import rope
from rope import cutedsl

_ACCESS = re.compile(r"\b(ld|st)\.global(\.[\w:.]+)?\s")


def access_widths(ptx: str) -> dict[str, dict[int, int]]:
    """{"ld": {bytes per thread: instructions}, "st": {...}}: the global loads and stores of ``ptx`` by width."""
    out: dict[str, dict[int, int]] = {"ld": {}, "st": {}}
    for m in _ACCESS.finditer(ptx):
        mods = (m.group(2) or "").split(".")
        vec = next((int(x[1:]) for x in mods if re.fullmatch(r"v[248]", x)), 1)
        bits = next((int(x[1:]) for x in mods if re.fullmatch(r"[bfus](8|16|32|64)", x)), 0)
        width = vec * bits // 8
        out[m.group(1)][width] = out[m.group(1)].get(width, 0) + 1
    return out


def test_missing_package_is_named(monkeypatch):
    monkeypatch.setattr(cutedsl.importlib.util, "find_spec", lambda name: None)
    reason = rope.get("cutedsl").unavailable_reason(torch.device("cuda"))
    assert "nvidia-cutlass-dsl" in reason and "\n" not in reason
    with pytest.raises(RuntimeError, match="nvidia-cutlass-dsl"):
        rope.build("cutedsl", 64, 128)


def test_cpu_is_refused_with_a_reason(monkeypatch):
    monkeypatch.setattr(cutedsl, "package_missing", lambda: None)
    reason = rope.get("cutedsl").unavailable_reason(torch.device("cpu"))
    assert "CUDA GPU" in reason and "use the torch implementation" in reason and "rope=" not in reason


@pytest.mark.parametrize(
    "args,expected",
    [
        # D, R2, partial, interleaved, element bytes, row alignment (elements) -> V, CW, VP, RPC
        ((64, 32, True, False, 2, 8), {"V": 8, "CW": 16, "VP": 8, "RPC": 64}),
        ((48, 24, True, False, 2, 8), {"V": 8, "CW": 24, "VP": 8, "RPC": 85}),  # 12 pairs: not a multiple of V
        ((40, 20, True, False, 2, 8), {"V": 4, "CW": 20, "VP": 8, "RPC": 51}),
        ((48, 24, True, True, 2, 8), {"V": 4, "CW": 12, "VP": 8, "RPC": 42}),  # 2V elements per vector
        ((48, 6, True, False, 2, 8), {"V": 2, "CW": 6, "VP": 4, "RPC": 85}),  # rotary_dim 12: 36 copied
        ((64, 32, False, False, 4, 4), {"V": 4, "CW": 32, "VP": 4, "RPC": 32}),  # float32
        ((64, 32, True, False, 2, 2), {"V": 2, "CW": 16, "VP": 2, "RPC": 16}),  # rows only 4-byte aligned
    ],
)
def test_geometry(args, expected):
    geo = cutedsl.geometry(*args, cutedsl.CuteLaunchConfig(threads=256))
    assert {k: geo[k] for k in expected} == expected


def test_geometry_follows_the_launch_config():
    cfg = cutedsl.CuteLaunchConfig(threads=128, rows_per_thread=2)
    geo = cutedsl.geometry(256, 128, True, False, 2, 8, cfg)  # 16 threads a row
    assert (geo["RPC"], geo["RPT"]) == (8, 2)
    # without a config: the module's default launch
    assert cutedsl.geometry(256, 128, True, False, 2, 8) == cutedsl.geometry(256, 128, True, False, 2, 8,
                                                                              cutedsl.DEFAULT_LAUNCH)


def test_tuning_sets_the_launch_for_its_block_and_restores_it():
    """``rope.cutedsl.tuning``: a block's fields (nested blocks keep the outer ones), the default after it, and a
    bad field or value refused before the block, leaving the setting as it was."""
    with cutedsl.tuning(threads=128) as outer:
        assert outer == cutedsl.CuteLaunchConfig(threads=128)
        with cutedsl.tuning(rows_per_thread=2) as inner:
            assert inner == cutedsl.CuteLaunchConfig(threads=128, rows_per_thread=2)
        with pytest.raises(ValueError, match="threads"), cutedsl.tuning(threads=96):
            pass
        with pytest.raises(ValueError, match="unknown setting 'tile'"), cutedsl.tuning(tile=64):
            pass
        with cutedsl.tuning() as now:
            assert now == outer
    with cutedsl.tuning() as after:
        assert after == cutedsl.DEFAULT_LAUNCH


def test_the_ops_take_no_launch_setting():
    """A launch setting changes no result, so the custom ops (what a compiled graph records) carry none."""
    for op in (torch.ops.ropelab.cute_rope_fwd, torch.ops.ropelab.cute_rope_bwd):
        names = [a.name for a in op.default._schema.arguments]
        assert names == ["q", "k", "cos", "sin", "positions", "partial", "interleaved", "poison"]


def test_the_benchmark_hook_routes_cutedsl_fields_to_cutedsl():
    from bench import harness

    with harness.tuning({"threads": 256, "rows_per_thread": 2}), cutedsl.tuning() as now:
        assert now == cutedsl.CuteLaunchConfig(threads=256, rows_per_thread=2)
    with cutedsl.tuning() as after:
        assert after == cutedsl.DEFAULT_LAUNCH


@pytest.mark.parametrize("kwargs", [{"threads": 96}, {"threads": 2048}, {"rows_per_thread": 0}])
def test_launch_config_rejects_bad_values(kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        cutedsl.CuteLaunchConfig(**kwargs)


CONFIGS = [  # D, R2, interleaved, positions, inverse, rows per thread
    (64, 32, False, False, False, 1),
    (48, 24, False, True, False, 1),
    (80, 40, False, False, True, 2),
    (128, 64, True, False, False, 1),
    (48, 24, True, True, True, 1),
    (128, 32, False, False, False, 1),  # rotary_dim 64
    (256, 128, False, False, False, 4),
]


@pytest.mark.parametrize("D,R2,interleaved,has_pos,inverse,rpt", CONFIGS)
def test_compiles_offline_with_vector_accesses(D, R2, interleaved, has_pos, inverse, rpt):
    """The kernel compiles for sm_90a without a GPU; its row and table accesses are 16-byte vectors
    (the positions, one int32 per row, are the only narrower load). The PTX file CuTeDSL writes to
    keep the text does not land in the working directory (CuTeDSL's default dump directory)."""
    pytest.importorskip("cutlass", reason="nvidia-cutlass-dsl not installed (pip install -e '.[cutedsl]')")
    before = set(Path.cwd().iterdir())
    geo = cutedsl.geometry(D, R2, True, interleaved, 2, 8, cutedsl.CuteLaunchConfig(rows_per_thread=rpt))
    fn = cutedsl._compiled(torch.bfloat16, geo["D"], geo["R2"], geo["CW"], interleaved, geo["V"], geo["VP"], 8, 4,
                           geo["RPC"], geo["RPT"], has_pos, inverse, 16, "sm_90a")
    widths = access_widths(fn.artifacts.PTX)
    assert set(widths["st"]) == {16}, widths
    assert 16 in widths["ld"] and set(widths["ld"]) <= {16} | ({4} if has_pos else set()), widths
    assert set(Path.cwd().iterdir()) == before


def test_launch_passes_every_runtime_argument(monkeypatch):
    """The host side of a launch on a GQA qkv view with positions: one runtime argument per
    non-compile-time parameter of ``rope_launch``, in its order, strides in the compile-time unit
    (the kernel itself needs a GPU; here a recorder stands in for the compiled function)."""
    pytest.importorskip("cutlass", reason="nvidia-cutlass-dsl not installed (pip install -e '.[cutedsl]')")
    import inspect

    calls, specs = [], []
    monkeypatch.setattr(cutedsl, "_compiled", lambda *spec: specs.append(spec) or (lambda *a: calls.append(a)))
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: type("S", (), {"cuda_stream": 0})())
    B, T, HQ, HK, D = 2, 5, 4, 2, 48
    qkv = torch.randn(B, T, (HQ + 2 * HK) * D, dtype=torch.bfloat16)
    q, k, _ = rope.base.split_qkv(qkv, HQ, HK, D)
    cos, sin = torch.randn(64, 24), torch.randn(64, 24)
    pos = torch.randint(0, 64, (B, T))
    yq, yk = cutedsl.launch(q, k, cos, sin, pos, True, False)
    (args,) = calls
    params = inspect.signature(cutedsl._kernels().rope_launch).parameters
    runtime = [n for n, p in params.items() if "Constexpr" not in str(p.annotation)]
    assert len(args) == len(runtime)
    named = dict(zip(runtime, args, strict=True))
    (spec,) = specs
    sv = spec[7]  # SV: the strides' unit
    assert sv == 8  # row strides 384 and 48 bf16 elements, 16-byte rows
    assert [named[n] for n in ("B", "T", "HQ", "HK")] == [B, T, HQ, HK]
    assert [named[n] * sv for n in ("sqb", "sqt", "sqh", "skb", "skt", "skh")] == [*q.stride()[:3], *k.stride()[:3]]
    assert [named[n] * sv for n in ("soqb", "soqt", "soqh")] == list(yq.stride()[:3])
    assert named["n_pos"] == 64 and (named["spb"], named["spt"]) == pos.stride()
    assert named["q_ptr"] is not named["k_ptr"] and spec[11] is True  # HAS_POS
