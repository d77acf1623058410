"""scripts/profile_step.py on the CPU: a dry run prints every section for every rope, bad presets are
refused in one line, and the GPU-idle bookkeeping (the number that told host-bound from GPU-bound)
is right on hand-made intervals."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from scripts import profile_step


def test_dry_run_reports_every_rope(capsys):
    rc = profile_step.main(["--device", "cpu", "--tiny", "--no-compile", "--model", "tiny", "--ropes", "none,torch"])
    out = capsys.readouterr().out
    assert rc == 0
    for section in ("== per step (ms)", "== phases per step", "== kernels whose time differs most from none",
                    "== torch: top kernels"):
        assert section in out
    assert "  none " in out and "  torch " in out and "FAILED" not in out


def test_a_failing_rope_is_reported_and_the_others_go_on(capsys):
    rc = profile_step.main(["--device", "cpu", "--tiny", "--no-compile", "--model", "tiny", "--ropes", "nope,none"])
    out = capsys.readouterr().out
    assert rc == 0 and "nope           FAILED" in out and "  none " in out


@pytest.mark.parametrize("argv,message", [(["--model", "huge"], "--model: no preset"),
                                          (["--optim", "sgd"], "--optim: no preset"),
                                          (["--iters", "0"], "at least 1")])
def test_bad_arguments_are_refused(argv, message, capsys):
    with pytest.raises(SystemExit):
        profile_step.parse_args(argv)
    assert message in capsys.readouterr().err


def _ev(name, start, end):
    return SimpleNamespace(name=name, time_range=SimpleNamespace(start=start, end=end))


def test_gpu_timeline_busy_and_gaps():
    """Busy = the union of kernel intervals; each idle gap is keyed by the kernels around it, and a gap over
    a step start by the step start."""
    evs = [_ev("a", 0, 10), _ev("b", 5, 12), _ev("c", 20, 30), _ev("d", 40, 41)]
    busy, gaps = profile_step.gpu_timeline(evs, step_starts=[35])
    assert busy == 12 + 10 + 1
    assert gaps[("b", "c")] == [8, 1]
    assert gaps[("<step start: sync, guards, first launches>", "d")] == [10, 1]
