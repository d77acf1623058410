"""scripts/position_precision.py: its float64 yardstick is right, it finds what it claims (the float32
cache within half an ulp at 2^20, float32 angles far off there, the relative-position property exact
in float64 and lost with float32 angles), it writes the expected rows, and a bad option is one line
and exit 2 before any work. Small head dims and few positions: the whole file runs in seconds."""

from __future__ import annotations

import csv
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import rope
from scripts import position_precision as pp

ROOT = Path(__file__).resolve().parents[2]
P20 = 2**20


def test_reference_forward_matches_a_hand_computation():
    """D = 4: one frequency pair. partial: f = (1, 0); full: f = (1, base^-1/2). At p = 2^20 + 3, where a
    float32 angle p * 0.01 is off by ~1e-4 rad."""
    x = torch.tensor([0.3, -1.2, 0.7, 2.0], dtype=torch.float64).view(1, 1, 1, 4)
    p, base = P20 + 3, 10000.0
    a, b, c, d = x.flatten().tolist()
    pos = torch.tensor([p])
    want = [a * math.cos(p) + c * math.sin(p), b, -a * math.sin(p) + c * math.cos(p), d]
    got = pp.reference_forward(x, pos, base, "partial").flatten().tolist()
    assert got == pytest.approx(want, abs=1e-12)
    g = p * base**-0.5
    want = [a * math.cos(p) + c * math.sin(p), b * math.cos(g) + d * math.sin(g),
            -a * math.sin(p) + c * math.cos(p), -b * math.sin(g) + d * math.cos(g)]
    got = pp.reference_forward(x, pos, base, "full").flatten().tolist()
    assert got == pytest.approx(want, abs=1e-12)


@pytest.mark.parametrize("variant", ["partial", "full"])
@pytest.mark.parametrize("base", [1e4, 5e5])
def test_reference_frequencies_are_the_definitions(base, variant):
    ours, theirs = pp.reference_frequencies(64, base, variant), rope.rope_frequencies(64, base, variant)
    # equal to a few ulps: rope raises 1/base to linspace(0, 1) (rounded), the script to i / (q - 1)
    assert ours.dtype == torch.float64 and torch.allclose(ours, theirs, rtol=1e-13, atol=0)


def test_exact_cos_sin_is_exact():
    cos, sin = pp.exact_cos_sin([0, 1, P20], torch.tensor([1.0, 0.5, 0.0], dtype=torch.float64))
    assert cos[2].tolist() == [math.cos(P20), math.cos(P20 / 2), 1.0]
    assert sin[1, 1] == math.sin(0.5) and sin[0].tolist() == [0.0, 0.0, 0.0]


def test_positions_near_each_power_of_two():
    near = pp.positions_near([10, 20], seed=5)
    for k, ps in near.items():
        p = 2**k
        assert set(range(p - pp.NEAR, p + pp.NEAR + 1)) <= set(ps) and ps == sorted(set(ps))
        assert all(abs(x - p) <= p // 64 for x in ps)
    assert near == pp.positions_near([10, 20], seed=5)
    assert near[20] != pp.positions_near([10, 20], seed=6)[20]  # the random ones follow the seed


D = 16  # frequencies 1, 0.32, 0.1, ...: small tables, yet several products p * f that float32 rounds
FREQS = rope.rope_frequencies(D, 10000.0, "full")


@pytest.fixture(scope="module")
def cache20() -> rope.RotaryEmbedding:
    """A module whose float32 cache covers 2^20 and the positions near it (2^20 ± 2^20/64)."""
    return rope.build("torch", D, P20 + P20 // 64 + 256, base=10000.0, variant="full")


def test_cache_within_half_an_ulp_where_float32_angles_are_far_off(cache20):
    positions = pp.positions_near([20], seed=1)[20]
    idx = torch.tensor(positions)
    row = pp.table_errors(cache20.cos[idx], cache20.sin[idx], positions, FREQS, pp.exact_cos_sin(positions, FREQS))
    assert row["cache_ulp"] <= 0.5 and row["cache_cos_abs"] <= 2**-25 and row["cache_sin_abs"] <= 2**-25
    assert row["cache_ulp_vs_exact"] <= 0.5 + 1e-3  # the float64 yardstick is exact to ~1e-10 (f64 err)
    assert row["f64_vs_exact_abs"] < 1e-9
    # theta32 at 2^20 and f = 1: float32 spacing 0.125 rad there; the cos/sin error follows
    assert row["f32angle_rad"] > 1e-2 and max(row["f32angle_cos_abs"], row["f32angle_sin_abs"]) > 1e-3


def test_forward_error_flat_for_the_cache_grows_with_float32_angles(cache20):
    positions = [1000, 1001, P20 - 1, P20, P20 + 1]
    groups = {10: slice(0, 2), 20: slice(2, 5)}
    pos = torch.tensor(positions)
    x = torch.randn(2, len(positions), 2, D)
    ref = pp.reference_forward(x, pos, 10000.0, "full")
    ours = pp.output_errors(cache20(x, positions=pos), ref, x, groups)
    f32 = pp.output_errors(pp.float32_angle_forward(x, pos, FREQS), ref, x, groups)
    for k in groups:
        assert ours[k][0] < 2e-6 and ours[k][1] < 2  # abs, ulps at the pair scale
    assert f32[20][0] > 1e-3 and f32[20][1] > 1000


def test_relative_position_property_by_arithmetic(cache20):
    offsets = [2**10, P20]
    ms, ns = pp.relpos_positions(offsets)
    assert (ms[0] - ns[0], len(ms)) == (pp.GAPS[0], len(pp.GAPS) * 3)
    q, k = torch.randn(D, dtype=torch.float64), torch.randn(D, dtype=torch.float64)
    pm, pn = torch.tensor(ms), torch.tensor(ns)
    rq, rk = pp.rotate64(q, pm, FREQS), pp.rotate64(k, pn, FREQS)
    ref_scores = (rq * rk).sum(-1)[: len(pp.GAPS)]

    def worst(rq: torch.Tensor, rk: torch.Tensor) -> float:  # at the offset 2^20
        rows = pp.score_errors(rq, rk, offsets, ref_scores, float(q.norm() * k.norm()))
        return max(r["rel"] for r in rows if r["offset_log2"] == 20)

    assert worst(rq, rk) < 1e-9  # float64: the property holds to the float64 rounding of the angles
    q1, k1 = q.float().expand(1, len(ms), 1, D), k.float().expand(1, len(ns), 1, D)
    cq, ck = cache20(q1, k1, positions=pm)[0][0, :, 0], cache20(q1, k1, positions=pn)[1][0, :, 0]
    assert worst(cq, ck) < 1e-6  # the float32 cache: float32 rounding, independent of the offset
    fq, fk = pp.rotate_f32_angles(q, pm, FREQS), pp.rotate_f32_angles(k, pn, FREQS)
    assert worst(fq, fk) > max(1e-5, 10 * worst(cq, ck))  # float32 angles: lost at large offsets


def test_writes_the_tables(tmp_path, capsys, device):
    out = tmp_path / "pp"
    args = ["--out", str(out), "--bases", "1e4", "--log2-positions", "10,20", "--head-dim", "16",
            "--variants", "partial", "--impls", "torch,triton_v4,none", "--dtypes", "float32,bfloat16",
            "--seed", "3", "--device", str(device)]
    assert pp.main(args) == 0
    md = (out / "position_precision.md").read_text()
    for heading in ("## 1. The cos/sin tables", "## 2. Forward error", "## 3. The relative-position property",
                    "## Not measured"):
        assert heading in md
    assert "`none`: the identity baseline" in md and "seed 3" in md and "--impls torch,triton_v4,none" in md
    assert "| base | variant | dtype | 2^k | torch | triton_v4 | f32 angles |" in md
    rows = list(csv.DictReader((out / "position_precision.csv").open()))
    by = {}
    for r in rows:
        by.setdefault(r["table"], []).append(r)
    assert len(by["cos_sin"]) == 2  # one base, one variant, two powers
    assert len(by["forward"]) == 3 * 2 * 2  # (torch, triton_v4, f32 angles) x 2 dtypes x 2 powers
    assert len(by["relpos"]) == 4 * 2 * len(pp.GAPS)  # (float64, f32 angles, torch, triton_v4) x 2 offsets x gaps
    assert {r["impl"] for r in by["forward"]} == {"torch", "triton_v4", pp.F32_ANGLES}
    t20 = next(r for r in by["cos_sin"] if r["log2_pos"] == "20")
    assert float(t20["cache_ulp"]) <= 0.5 and float(t20["f32angle_cos_abs"]) > 1e-3
    for r in by["forward"]:
        if r["impl"] != pp.F32_ANGLES and r["dtype"] == "float32":
            assert float(r["abs"]) < 2e-6, r
    assert all(r["seed"] == "3" for r in rows)
    assert "seed=3" in capsys.readouterr().err


@pytest.mark.parametrize("argv, option", [
    (["--bases", "1e4,abc"], "--bases"),
    (["--bases", "1"], "--bases"),
    (["--log2-positions", "10..30"], "--log2-positions"),
    (["--log2-positions", "ten"], "--log2-positions"),
    (["--head-dim", "30"], "--head-dim"),
    (["--variants", "partial,half"], "--variants"),
    (["--impls", "torch,nope"], "--impls"),
    (["--dtypes", "int8"], "--dtypes"),
    (["--device", "tpu"], "--device"),
    (["--seed", "x"], "--seed"),
])
def test_a_bad_option_is_one_line_naming_it(argv, option, capsys, tmp_path):
    with pytest.raises(SystemExit) as exc:
        pp.main(["--out", str(tmp_path / "never"), *argv])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and len(err.strip().splitlines()) == 1 and option in err, err
    assert not (tmp_path / "never").exists()


def test_the_command_line_exits_2_before_any_work(tmp_path):
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    res = subprocess.run([sys.executable, "-m", "scripts.position_precision", "--out", str(tmp_path / "o"),
                          "--variants", "sideways"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and "--variants" in res.stderr, res.stderr
    assert res.stdout == "" and not (tmp_path / "o").exists()
