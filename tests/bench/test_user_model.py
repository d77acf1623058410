"""bench/user_model.py at tiny sizes on the CPU, and its table in docs/benchmarks.md."""

from __future__ import annotations

import pytest

from bench import harness, tables, user_model


def test_user_model_smoke_rows_against_none_and_torch(tmp_path, capsys):
    out = tmp_path / "user_model.csv"
    assert user_model.main(["--smoke", "--impls", "none,torch", "--head-dims", "8,12", "--profile",
                            "--out", str(out)]) == 0
    assert "--profile: the GPU's kernels are listed on a GPU only" in capsys.readouterr().err  # not nothing at all
    rows = harness.read_rows(out)
    assert [(r["head_dim"], r["implementation"]) for r in rows] == [("8", "none"), ("8", "torch"),
                                                                    ("12", "none"), ("12", "torch")]
    for r in rows:
        assert float(r["time_us"]) >= float(r["min_us"]) > 0 and r["steps"] == "2"
        assert r["shape"].startswith("B2xT8 2x") and "L1 vocab 64" in r["shape"]
    none, torch_row = rows[:2]
    assert float(none["vs_none_pct"]) == 0 and not torch_row["vs_torch_pct"]  # torch is the baseline
    assert float(none["vs_torch_lo"]) <= float(none["vs_torch_pct"]) <= float(none["vs_torch_hi"])
    expected = 100 * (float(torch_row["time_us"]) / float(none["time_us"]) - 1)
    assert float(torch_row["vs_none_pct"]) == pytest.approx(expected, abs=0.01)  # cells keep 6 significant digits


def test_user_model_refuses_odd_head_dims_and_unknown_entries(capsys):
    with pytest.raises(SystemExit) as exc:
        user_model.parse_args(["--smoke", "--head-dims", "7"])
    assert exc.value.code == 2 and "--head-dims takes positive even numbers" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        user_model.main(["--smoke", "--impls", "none,nope", "--out", "/dev/null"])
    assert exc.value.code == 2 and "unknown RoPE implementation(s) nope" in capsys.readouterr().err
    # even, yet not a multiple of 4 (the partial variant's D/4): refused before D = 8 is measured
    with pytest.raises(SystemExit) as exc:
        user_model.main(["--smoke", "--head-dims", "8,6", "--out", "/dev/null"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "--head-dims 6: torch: head_dim must be a multiple of 4" in err, err


def test_tables_show_the_user_model_against_torch(tmp_path):
    env = {"date": "2026-01-02T00:00Z", "gpu": "GPU X", "commit": "ccc3333", "torch": "2.11", "triton": "3.6",
           "head_dim": 48, "shape": "B24xT512 8x48 L6 vocab 50304", "steps": 30, "rounds": 6, "min_us": 1.0,
           "kernels_per_step": 300.0}
    csv_file = harness.ResultsCsv(tmp_path / "user_model.csv", user_model.COLUMNS)
    csv_file.append([{**env, "implementation": "none", "time_us": 10000.0, "vs_none_pct": 0.0, "vs_torch_pct": -2.0,
                      "vs_torch_lo": -2.5, "vs_torch_hi": -1.5},
                     {**env, "implementation": "torch", "time_us": 10200.0, "vs_none_pct": 2.0},
                     {**env, "implementation": "triton_v4", "time_us": 10100.0, "vs_none_pct": 1.0,
                      "vs_torch_pct": -1.0, "vs_torch_lo": -1.4, "vs_torch_hi": -0.6}])
    text = tables.render(tmp_path)
    assert "## A user's compiled model" in text
    assert "| 48 | B24xT512 8x48 L6 vocab 50304 | triton_v4 | 10.100 | +1.0% | -1.0% [-1.4, -0.6] | 300 | ccc3333 |" \
        in text
    assert text.index("| triton_v4 | 10.100") < text.index("| torch | 10.200") < text.index("| none | 10.000")


@pytest.mark.parametrize(("argv", "message"), [(["--head-dims", "abc"], "--head-dims takes positive even numbers"),
                                               (["--impls", ","], "--impls takes"),
                                               (["--heads", "0"], "--heads, --layers, --batch and --seq must be"),
                                               (["--vocab", "1"], "--vocab at least 2")])
def test_user_model_refuses_bad_options_in_one_line(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        user_model.parse_args(["--smoke", *argv])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and message in err and err.count("\n") == 1, err


def test_user_model_smoke_keeps_the_sizes_given():
    """--smoke makes the defaults tiny; a size given on the command line still stands, as --help says."""
    args = user_model.parse_args(["--smoke", "--rounds", "5", "--heads", "4"])
    assert (args.rounds, args.heads, args.layers, args.seq) == (5, 4, 1, 8)
