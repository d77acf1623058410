"""scripts/demo_attention.py: what it shows holds (causal, relative positions, cached decoding)."""

from __future__ import annotations

import pytest

from scripts.demo_attention import main


def test_demo_shows_shapes_causality_relative_positions_and_cached_decoding(capsys):
    result = main(["--impl", "torch", "--device", "cpu"])
    out = capsys.readouterr().out
    assert "x (2, 12, 64) -> y (2, 12, 64)" in out and "k (2, 12, 2, 16) -> (2, 12, 2, 16)" in out
    assert result["causal_before"] == 0 and result["causal_after"] > 0.01
    assert result["relative_moved"] < 1e-4 < result["relative_rotated"]
    assert result["cache_max_diff"] < 1e-5 and out.count("decode position") == 4


def test_demo_refuses_an_unknown_implementation_in_one_line(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--impl", "nope", "--device", "cpu"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.startswith("Error: impl='nope': unknown RoPE implementation")
    assert err.count("\n") == 1
