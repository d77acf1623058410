"""scripts/profile_step.py on the CPU: a dry run prints every section for every rope, bad presets are
refused in one line, and the GPU-idle bookkeeping (the number that told host-bound from GPU-bound)
is right on hand-made intervals."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

from scripts import profile_step


@pytest.fixture(autouse=True)
def _triton_interpret_unchanged():
    """``main(["--device", "cpu", ...])`` sets TRITON_INTERPRET for a CLI run, whose triton is not imported yet;
    here triton is, so the variable would only mislead the tests after these (on a GPU machine, it made CPU
    tensors look runnable by the Triton entries)."""
    before = os.environ.get("TRITON_INTERPRET")
    yield
    if before is None:
        os.environ.pop("TRITON_INTERPRET", None)
    else:
        os.environ["TRITON_INTERPRET"] = before


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
    """Busy = the union of kernel intervals; each idle gap is keyed by the kernels around it (the one that
    ended last before it, not the one that started last)."""
    evs = [_ev("a", 0, 10), _ev("b", 5, 12), _ev("c", 20, 30), _ev("e", 21, 25), _ev("d", 40, 41)]
    busy, gaps = profile_step.gpu_timeline(evs)
    assert busy == 12 + 10 + 1
    assert gaps[("b", "c")] == [8, 1]
    assert gaps[("c", "d")] == [10, 1]


def test_timed_rounds_rotate_the_ropes_order():
    """Every rope leads a round in turn and each round times every rope: a rope's place in the run (the later,
    the slower, on the H100: docs/kernels.md, session 25) falls on all of them alike."""
    calls = []
    steps = {n: (lambda n=n: calls.append(n)) for n in ("a", "b", "c")}
    args = SimpleNamespace(iters=6, rounds=3)
    timing = profile_step.time_rounds(steps, args, cuda=False)
    # each rope: one untimed then 2 timed steps a round
    firsts = [calls[i * 9] for i in range(3)]
    assert firsts == ["a", "b", "c"]
    assert all(len(timing[n]["walls"]) == 3 and all(len(r) == 2 for r in timing[n]["walls"]) for n in steps)


def _cpu(name, start, end, id_=0):
    from torch.autograd import DeviceType
    return SimpleNamespace(name=name, device_type=DeviceType.CPU, time_range=SimpleNamespace(start=start, end=end),
                           id=id_, cpu_time_total=end - start, self_cpu_time_total=end - start,
                           is_user_annotation=False)


def _gpu(name, start, end, id_=0, annotation=False):
    """A device event as torch 2.11 gives it: its id the CUDA correlation id of the runtime call that launched
    it, no link attribute."""
    from torch.autograd import DeviceType
    return SimpleNamespace(name=name, device_type=DeviceType.CUDA, time_range=SimpleNamespace(start=start, end=end),
                           id=id_, is_user_annotation=annotation)


def test_summarize_keeps_a_ropes_own_kernels_and_no_annotation():
    """A rope's row counts the device events inside its own step windows only (the profile alternates ropes),
    not the ranges record_function projects onto the GPU (a phase's whole span: counted as busy, it hid the
    forward's idle time and made idle negative), and its gaps stay inside each of its steps. Kernels go to
    the phase whose window holds the runtime call that launched them (same correlation id), not to another
    CPU event sharing the number (phase_bwd's range, id 7, as on the H100; an aten::mm after k5's launch)."""
    events = [
        _cpu("prof_step a", 0, 100), _cpu("phase_fwd", 1, 50, id_=5), _cpu("phase_bwd", 55, 99, id_=7),
        _cpu("cudaLaunchKernel", 2, 3, id_=1), _cpu("cuLaunchKernel", 30, 31, id_=7),
        _cpu("cudaLaunchKernelExC", 60, 61, id_=9),
        _cpu("cudaLaunchKernel", 45, 46, id_=11), _cpu("aten::mm", 50.5, 51, id_=11),  # between the phases
        _gpu("k1", 10, 20, id_=1), _gpu("k2", 40, 60, id_=7), _gpu("k4", 62, 70, id_=9), _gpu("k5", 52, 54, id_=11),
        _gpu("phase_fwd", 10, 60, id_=5, annotation=True),
        _cpu("prof_step b", 100, 200), _cpu("cudaLaunchKernel", 101, 102, id_=3),
        _gpu("k3", 110, 190, id_=3),
    ]
    timing = {"walls": [[100.0]], "hosts": [[90.0]]}
    row = profile_step.summarize("a", events, [(0, 100)], timing, 0.0, P=1)
    assert set(row["kern"]) == {"k1", "k2", "k4", "k5"}
    assert row["busy"] == (10 + 20 + 8) / 1e3
    assert row["gaps"][("k1", "k2")] == (20, 1)
    assert row["gaps"][(profile_step.STEP_START, "k1")] == (10, 1)
    assert row["phases"]["phase_fwd"][1] == 32  # k1, k2 and k5, launched inside phase_fwd
    assert row["phases"]["phase_bwd"][1] == 8  # k4
    assert "phase_unattributed" not in row["phases"]
    other = profile_step.summarize("b", events, [(100, 200)], timing, 0.0, P=1)
    assert set(other["kern"]) == {"k3"} and other["busy"] == 80 / 1e3
