"""scripts/demo_attention.py: what it shows holds (causal, relative positions, cached decoding)."""

from __future__ import annotations

import pytest
import torch

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


@pytest.mark.parametrize("asked", [pytest.param("gpu", id="not-a-choice"), pytest.param("cuda", id="absent")])
def test_demo_refuses_a_device_it_cannot_use_in_one_line(asked, capsys, monkeypatch):
    """``--device gpu`` (not a choice) and ``--device cuda`` without a GPU: argparse's one line and exit 2, before
    any work (they ended in a torch traceback)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit) as exit_:
        main(["--device", asked])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 2 and "--device" in err[-1] and len(err) == 2, err  # usage line, then the error
