"""bench/step.py, bench/profile.py and bench/generate.py at tiny sizes on the CPU: a row per measurement."""

from __future__ import annotations

import pytest

from bench import generate, harness, profile, step


def test_step_smoke_times_every_implementation_against_torch(tmp_path):
    out = tmp_path / "step.csv"
    assert step.main(["--smoke", "--impls", "none,torch", "--out", str(out)]) == 0
    rows = harness.read_rows(out)
    assert [(r["model"], r["mode"], r["implementation"]) for r in rows] == [("tiny", "eager", "none"),
                                                                            ("tiny", "eager", "torch")]
    none, torch_row = rows
    assert int(none["steps"]) == 2 and int(none["rounds"]) == 2 and float(none["time_us"]) >= float(none["min_us"])
    assert none["vs_torch_pct"] and not torch_row["vs_torch_pct"]  # torch is the baseline
    assert float(none["vs_torch_lo"]) <= float(none["vs_torch_pct"]) <= float(none["vs_torch_hi"])
    assert step.main(["--smoke", "--impls", "torch", "--warm-only", "--out", str(tmp_path / "warm.csv")]) == 0
    assert not (tmp_path / "warm.csv").exists()


def test_step_refuses_an_unknown_mode_and_model(capsys):
    for argv, message in ((["--modes", "eager,jit"], "--modes takes eager, compile"),
                          (["--model", "huge"], "no conf/model/huge.yaml")):
        with pytest.raises(SystemExit) as exc:
            step.parse_args(["--smoke", *argv])
        assert exc.value.code == 2 and message in capsys.readouterr().err


def test_profile_smoke_breaks_a_step_down(tmp_path, capsys):
    out = tmp_path / "profile.csv"
    assert profile.main(["--smoke", "--impls", "none,torch", "--out", str(out)]) == 0
    parts = {(r["implementation"], r["part"]): float(r["time_us"]) for r in harness.read_rows(out)}
    for impl in ("none", "torch"):
        assert parts[(impl, "wall")] > 0 and parts[(impl, "forward host")] > 0 and parts[(impl, "gpu kernels")] > 0
    printed = capsys.readouterr().out
    assert "per phase, ms" in printed and "torch: top kernels" in printed


def test_generate_smoke_measures_decoding_per_implementation_and_batch(tmp_path):
    out = tmp_path / "generate.csv"
    assert generate.main(["--smoke", "--out", str(out)]) == 0
    rows = harness.read_rows(out)
    assert [(r["implementation"], r["batch"]) for r in rows] == [("none", "1"), ("none", "2"), ("torch", "1"),
                                                                 ("torch", "2")]
    for r in rows:
        assert float(r["tok_s_cache"]) > 0 and float(r["tok_s_no_cache"]) > 0 and float(r["rope_us"]) > 0
        base = next(b for b in rows if b["implementation"] == "none" and b["batch"] == r["batch"])
        assert float(r["step_vs_none_pct"]) == pytest.approx(100 * (float(r["time_us"]) / float(base["time_us"]) - 1),
                                                             rel=1e-3, abs=1e-3)
