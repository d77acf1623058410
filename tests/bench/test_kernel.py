"""bench/kernel.py at tiny shapes on the CPU: every path a GPU run takes, checked outputs, one row per measurement."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import pytest
import torch
from helpers import ROOT

import rope
from bench import harness, kernel


@pytest.mark.interpreter
def test_smoke_run_times_and_checks_every_case(tmp_path, capsys):
    out = tmp_path / "kernel.csv"
    assert kernel.main(["--smoke", "--cases", "plain,positions,cu_seqlens", "--out", str(out)]) == 0
    assert "liger: computes the plain case only, not --cases positions,cu_seqlens: timed on the others" in \
        capsys.readouterr().err  # the cases Liger is not timed on are said, not skipped in silence
    rows = harness.read_rows(out)
    got = {(r["implementation"], r["positions"], r["direction"]) for r in rows}
    expected = {(i, p, d) for i in ("torch", "triton_v4") for p in ("arange", "tensor", "cu_seqlens")
                for d in ("forward", "backward")}
    assert got == expected | {("liger", "arange", d) for d in ("forward", "backward")}  # Liger: the plain case only
    for r in rows:
        assert r["gpu"] == "cpu (smoke)" and r["commit"] and r["torch"] and float(r["time_us"]) > 0
        assert float(r["max_err"]) < 1e-5, r  # float32 on the CPU: every entry, Liger's sign convention included
        assert float(r["pct_copy_bw"]) == pytest.approx(100 * float(r["gbps"]) / float(r["copy_gbps"]), rel=1e-4)
    assert {r["shape"] for r in rows if r["positions"] == "cu_seqlens"} == {"8x2x16"}
    assert all(r["plan"] for r in rows if r["implementation"] == "triton_v4")  # which tiling each row measured


CPU = torch.device("cpu")


def test_inputs_of_each_case():
    """Each case's call: (B, T) positions at offsets below the table's end, or packed sequences of 1 to T tokens
    covering (B T, H, D) tensors; B the fewest whole sequences reaching the elements asked for."""
    plain = kernel.make_inputs(kernel.Config(16, "partial", "plain"), 5000, 16, (4, 4), torch.float32, CPU)
    assert plain.q.shape == (5, 16, 4, 16) and plain.kwargs == {} and plain.max_seq_len == 32
    x = kernel.make_inputs(kernel.Config(16, "partial", "positions"), 8192, 16, (4, 4), torch.float32, CPU)
    pos = x.kwargs["positions"]
    assert pos.shape == (8, 16) and pos.dtype == torch.int64 and int(pos.max()) < x.max_seq_len
    assert (pos[:, 0] > 0).any() and bool((pos.diff(dim=1) == 1).all())
    x = kernel.make_inputs(kernel.Config(16, "full", "cu_seqlens"), 8192, 16, (4, 4), torch.float32, CPU)
    cu = x.kwargs["cu_seqlens"]
    assert x.q.shape == (128, 4, 16) and x.shape == "128x4x16" and cu.dtype == torch.int32
    assert int(cu[0]) == 0 and int(cu[-1]) == 128 and 1 <= int(cu.diff().min()) and int(cu.diff().max()) <= 16


def test_grouped_query_inputs_and_heads_option():
    """``--heads 8/2``: q takes the elements asked for, k the same tokens with its own heads, named in the shape."""
    x = kernel.make_inputs(kernel.Config(16, "full", "plain"), 4096, 16, (8, 2), torch.float32, CPU)
    assert x.q.shape == (2, 16, 8, 16) and x.k.shape == x.gk.shape == (2, 16, 2, 16) and x.shape == "2x16x8/2x16"
    assert kernel.parse_args(["--heads", "32/8"]).heads == (32, 8)
    assert kernel.parse_args(["--heads", "12"]).heads == (12, 12)


def test_smoke_keeps_the_elements_given():
    """--smoke makes the default tiny; a count given on the command line stands, the default's spelling included."""
    assert kernel.parse_args(["--smoke"]).elements == 256
    assert kernel.parse_args(["--smoke", "--elements", "32M"]).elements == 32 * 2**20
    assert kernel.parse_args(["--smoke", "--elements", "1K"]).elements == 1024
    assert kernel.parse_args([]).elements == 32 * 2**20


@pytest.mark.interpreter
def test_tuning_reaches_the_triton_launch_and_is_recorded(tmp_path):
    """The tuning column names the settings a row's launches took: none for torch, which --tuning does not reach."""
    out = tmp_path / "kernel.csv"
    kernel.main(["--smoke", "--impls", "torch,triton_v4,torch", "--tuning", "tiling=chunks,tile=128",
                 "--out", str(out)])
    rows = harness.read_rows(out)
    assert [(r["implementation"], r["tuning"]) for r in rows] == [
        ("torch", ""), ("torch", ""), ("triton_v4", "tiling=chunks,tile=128"), ("triton_v4", "tiling=chunks,tile=128")]
    assert all(r["plan"].startswith("chunks:") for r in rows if r["implementation"] == "triton_v4")


@pytest.mark.parametrize("argv,message", [
    (["--impls", "nope"], "--impls: unknown nope"),
    (["--tuning", "tiling=sideways"], "tiling must be one of"),
    (["--elements", "0"], "--elements takes a positive count"),
    (["--heads", "8/3"], "--heads takes H or HQ/HK"),
    (["--cases", "plain,diagonal"], "--cases takes comma-separated values of plain, interleaved"),
    (["--variants", "both"], "--variants takes comma-separated values of partial, full, got both"),
    (["--impls", ","], "--impls takes a comma-separated list of one item or more"),  # not every implementation
    (["--variants", ","], "--variants takes a comma-separated list of one item or more"),
    (["--cases", ""], "--cases takes a comma-separated list of one item or more"),
    (["--head-dims", ","], "--head-dims takes a comma-separated list of one item or more"),
    (["--tuning", ","], "--tuning takes a comma-separated list of one item or more"),
    (["--impls", "none"], "--impls none: rotates nothing"),  # it timed a WRONG row
    (["--impls", "torch", "--tuning", "tiling=rows"], "--tuning tiling: no implementation of --impls (torch)"),
    # --smoke runs on the CPU: triton_v4 and liger only under the interpreter (else left out, another refusal)
    pytest.param(["--impls", "triton_v4", "--tuning", "tile=128,threads=64"], "--tuning threads: no implementation",
                 marks=pytest.mark.interpreter),
    pytest.param(["--impls", "liger", "--cases", "interleaved"], "nothing to measure: every choice of --impls",
                 marks=pytest.mark.interpreter),
    (["--reps", "0"], "--reps must be at least 1"),  # given values are checked, not replaced by the default
    (["--seq-len", "0"], "--seq-len takes a positive number"),
    (["--seq-len", "-3"], "--seq-len takes a positive number"),
    (["--head-dims", "17", "--variants", "partial"], "nothing to measure: every choice of --head-dims"),
])
def test_bad_arguments_are_one_line_before_any_work(tmp_path, capsys, argv, message):
    out = tmp_path / "kernel.csv"
    with pytest.raises(SystemExit) as exc:
        kernel.main(["--smoke", *argv, "--out", str(out)])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and message in err.splitlines()[-1]
    assert err.count("\n") == 1 or "nothing to measure" in message, err  # argparse's usage text is not printed
    assert "liger: computes the plain case only, not --cases interleaved: left out" in err or "liger" not in argv
    assert not out.exists()


@pytest.mark.parametrize("option", ["--variants", "--cases"])
def test_help_offers_only_values_the_option_takes(option):
    """Each value --help names for a list option is accepted (``--variants both`` was offered and refused)."""
    action = next(a for a in kernel.parse_args([]).parser._actions if option in a.option_strings)
    offered = [w for w in re.split(r", | or ", action.help.split(" (")[0].removeprefix("comma-separated, of "))
               if w != "comma-separated"]
    assert len(offered) >= 2
    for value in [*offered, ",".join(offered)]:
        assert getattr(kernel.parse_args([option, value]), option[2:]) == value.split(",")


def test_compile_workers_leave_a_ctrl_c_to_the_parent(monkeypatch):
    """The --jobs workers ignore SIGINT (harness.ignore_ctrl_c): a Ctrl-C reaches the whole process group, and each
    worker printed a traceback of its own beside the parent's one line."""
    made = {}

    class Pool:
        def __init__(self, processes, initializer=None):
            made.update(processes=processes, initializer=initializer)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def imap_unordered(self, fn, tasks):
            return (1 for _ in tasks)

    monkeypatch.setattr(kernel.multiprocessing, "get_context", lambda method: type("Ctx", (), {"Pool": Pool}))
    args = kernel.parse_args(["--smoke", "--jobs", "2"])
    kernel.warm_in_workers(args, [kernel.Config(16, "partial", "plain")], ["torch"], lambda message: None)
    assert made == {"processes": 2, "initializer": harness.ignore_ctrl_c}


def test_rope_path_times_another_copy_of_the_code_and_names_its_commit(tmp_path):
    """--rope-path DIR imports DIR/rope (an older commit's tree, git archive'd there) and the rows carry the commit
    DIR/.commit names."""
    shutil.copytree(ROOT / "rope", tmp_path / "old" / "rope", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "old" / ".commit").write_text("abc1234\n")
    out = tmp_path / "kernel.csv"
    proc = subprocess.run([sys.executable, "-m", "bench.kernel", "--smoke", "--impls", "torch", "--rope-path",
                           str(tmp_path / "old"), "--out", str(out)], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert f"rope code abc1234 ({tmp_path / 'old'})" in proc.stderr
    assert {r["commit"] for r in harness.read_rows(out)} == {"abc1234"}


def test_a_rope_path_without_rope_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        harness.import_rope(tmp_path)
    assert exc.value.code == 2 and "no rope/__init__.py there" in capsys.readouterr().err


class _SignFlipped(rope.get("torch")):
    """The reference with its rotation's sign flipped: the wrong answer a kernel under development gives."""

    def rotate(self, q, k, positions):
        yq, yk = super().rotate(q, k, positions)
        return -yq, None if yk is None else -yk


class _Broken(rope.get("torch")):
    def rotate(self, q, k, positions):
        raise RuntimeError("no kernel for this shape")


def test_a_wrong_or_failing_implementation_fails_the_run_and_keeps_every_row(tmp_path, monkeypatch, capsys):
    """A run in which an implementation computed something else, or raised, exits 1 after a line counting the
    problems (a script must not take it for a clean run); the rows measured, the wrong one's included with its
    max_err, are kept."""
    monkeypatch.setitem(rope.registry._REGISTRY, "sign_flipped", _SignFlipped)
    monkeypatch.setitem(rope.registry._REGISTRY, "broken", _Broken)
    out = tmp_path / "kernel.csv"
    assert kernel.main(["--smoke", "--impls", "torch,sign_flipped,broken", "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "sign_flipped WRONG (max_err" in err and "broken failed: RuntimeError: no kernel for this shape" in err
    assert "bench.kernel: 2 problem(s)" in err.splitlines()[-1]
    rows = harness.read_rows(out)
    assert {r["implementation"] for r in rows} == {"torch", "sign_flipped"}
    assert all(float(r["max_err"]) > kernel.MAX_ERR for r in rows if r["implementation"] == "sign_flipped")
