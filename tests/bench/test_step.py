"""bench/step.py, bench/profile.py and bench/generate.py at tiny sizes on the CPU: a row per measurement."""

from __future__ import annotations

import argparse
import re

import pytest
import torch

import rope
from bench import generate, harness, profile, step
from rope import fused_attention


def test_step_smoke_times_every_implementation_against_torch(tmp_path, capsys):
    out = tmp_path / "step.csv"
    assert step.main(["--smoke", "--impls", "none,torch,none", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    # a line per implementation built (compiling several takes minutes on a GPU), each asked for once
    assert "tiny eager none: built and warmed up (1/2)" in err and "tiny eager torch: built and warmed up (2/2)" in err
    rows = harness.read_rows(out)
    assert [(r["model"], r["mode"], r["implementation"]) for r in rows] == [("tiny", "eager", "none"),
                                                                            ("tiny", "eager", "torch")]
    none, torch_row = rows
    assert int(none["steps"]) == 2 and int(none["rounds"]) == 2 and float(none["time_us"]) >= float(none["min_us"])
    assert none["vs_torch_pct"] and not torch_row["vs_torch_pct"]  # torch is the baseline
    assert float(none["vs_torch_lo"]) <= float(none["vs_torch_pct"]) <= float(none["vs_torch_hi"])
    assert step.main(["--smoke", "--impls", "torch", "--warm-only", "--out", str(tmp_path / "warm.csv")]) == 0
    assert not (tmp_path / "warm.csv").exists()


class _FailsAfterWarmUp(rope.get("torch")):
    """The reference, until its third call: a kernel that builds and warms up, then fails in the timed rounds."""

    calls = 0

    def rotate(self, q, k, positions):
        type(self).calls += 1
        if type(self).calls > 2:
            raise RuntimeError("illegal memory access")
        return super().rotate(q, k, positions)


def test_a_step_failing_in_the_timed_rounds_is_left_out_and_fails_the_run(tmp_path, monkeypatch, capsys):
    """An implementation that fails after its warm-up loses only its own row: the others' rounds go on and are
    written, and the run exits 1 naming it."""
    monkeypatch.setitem(rope.registry._REGISTRY, "fails_later", _FailsAfterWarmUp)
    out = tmp_path / "step.csv"
    assert step.main(["--smoke", "--impls", "torch,fails_later", "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "tiny eager fails_later failed in timed round 1: RuntimeError: illegal memory access; left out" in err
    assert "bench.step: 1 problem(s)" in err.splitlines()[-1]
    rows = harness.read_rows(out)
    assert [r["implementation"] for r in rows] == ["torch"] and int(rows[0]["steps"]) == 2


def test_step_times_the_document_aligned_packing_as_training_lays_it_out(tmp_path, monkeypatch):
    """--packings random,documents: a row per implementation and packing; the documents step passes the model its
    positions restarting at each document and a document mask built anew each step, as the trainer does."""
    from llm.doc_attention import DocumentMask

    built, build = [], DocumentMask.build.__func__

    def spy(cls, doc_ids, *, dense=False):
        built.append((doc_ids.clone(), dense))
        return build(cls, doc_ids, dense=dense)

    monkeypatch.setattr(DocumentMask, "build", classmethod(spy))
    out = tmp_path / "step.csv"
    assert step.main(["--smoke", "--impls", "torch", "--packings", "random,documents", "--out", str(out)]) == 0
    rows = harness.read_rows(out)
    assert [(r["implementation"], r["shape"]) for r in rows] == [
        ("torch", "B2xT8 vocab 256"), ("torch+documents", "B2xT8 vocab 256 documents~4 sdpa dense mask")]
    assert rows[1]["vs_torch_pct"] and not rows[0]["vs_torch_pct"], "documents against random windows of torch"
    assert len(built) == 1 + 2 * (1 + 1), "a mask per step: the warm-up step, each round's untimed and timed one"
    assert all(dense for _, dense in built), "off a GPU attention takes the dense mask"
    assert built[0][0].max() > 0, "the windows hold several documents"

    x, positions, doc_ids = step.document_inputs(torch.randint(0, 50, (3, 64)), 50, 8)
    eot = x == 49
    assert eot.any() and (positions[eot] == 0).all() and (positions[~eot] != 0).sum() > 0
    starts = eot.clone()
    starts[:, 0] = True
    assert torch.equal(positions == 0, starts), "positions restart exactly where a document starts"
    assert torch.equal(doc_ids, starts.cumsum(1).to(doc_ids.dtype) - 1)


def test_step_refuses_an_unknown_mode_and_model(capsys):
    for argv, message in ((["--modes", "eager,jit"], "--modes takes eager, compile"),
                          (["--modes", "both"], "--modes takes eager, compile"),
                          (["--packings", "random,shuffled"], "--packings takes random, documents"),
                          (["--model", "huge"], "no conf/model/huge.yaml"),
                          (["--optim", "nosuch"], "--optim nosuch: no conf/optim/nosuch.yaml; the presets: adamw")):
        with pytest.raises(SystemExit) as exc:
            step.parse_args(["--smoke", *argv])
        assert exc.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.parametrize("option", ["--impls", "--model", "--modes", "--packings"])
def test_step_refuses_an_empty_list(option, capsys):
    """``--impls ,`` timed every implementation: an option given names one item or more, or is refused."""
    with pytest.raises(SystemExit) as exc:
        step.parse_args(["--smoke", option, ","])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and f"{option} takes a comma-separated list of one item or more" in err
    assert err.count("\n") == 1


def test_step_help_offers_only_the_modes_it_takes():
    """Each value --help names for --modes is accepted (``both`` was offered and refused)."""
    action = next(a for a in step.parse_args(["--smoke"]).parser._actions if "--modes" in a.option_strings)
    offered = [w for w in re.split(r", | or ", action.help.split(" (")[0].removeprefix("comma-separated, of "))
               if w != "comma-separated"]
    assert len(offered) >= 2
    for value in [*offered, ",".join(offered)]:
        assert step.parse_args(["--smoke", "--modes", value]).modes == value.split(",")


@pytest.mark.parametrize(("argv", "message"), [
    (["--batch", "0"], "--batch must be at least 1"),  # the rows said the preset's batch
    (["--vocab", "0"], "--vocab at least 2"),
    (["--optim", "nosuch"], "--optim nosuch: no conf/optim/nosuch.yaml"),  # a traceback per implementation
    (["--impls", ","], "--impls takes a comma-separated list of one item or more"),
    # --impls torch: on a GPU machine --smoke's CPU leaves triton_v4 out (a line of its own) without the interpreter
    (["--impls", "torch", "--out", "{tmp}"], "not a file"),  # refused after the whole profile was printed
    (["--impls", "torch", "--out", "{tmp}/a.csv/b.csv"], "is a file, not a folder"),
])
def test_profile_refuses_bad_options_before_any_work(argv, message, tmp_path, capsys):
    (tmp_path / "a.csv").write_text("")
    with pytest.raises(SystemExit) as exc:
        profile.main(["--smoke", *[a.format(tmp=tmp_path) for a in argv]])
    captured = capsys.readouterr()
    assert exc.value.code == 2 and message in captured.err and captured.err.count("\n") == 1, captured.err
    assert captured.out == ""  # nothing was profiled


@pytest.mark.parametrize("tool", [step, profile])
def test_nothing_to_measure_is_refused(tool, tmp_path, capsys):
    """Every implementation asked for left out (cutedsl needs a GPU): exit 2, not a run that measured nothing."""
    out = tmp_path / "rows.csv"
    with pytest.raises(SystemExit) as exc:
        tool.main(["--smoke", "--impls", "cutedsl", "--out", str(out)])
    err = capsys.readouterr().err.splitlines()
    assert exc.value.code == 2 and "cutedsl left out" in err[0] and "nothing to measure" in err[-1]
    assert not out.exists()


def test_profile_table_columns_never_run_together(capsys):
    """A wall far from the baseline's makes its [CI] wider than its column: it must still stand apart."""
    def part(wall: float) -> dict:
        return {"walls": [[wall]] * 3, "wall": wall, "host": 1.0, "kernel_sum": 2.0, "busy": 3.0,
                "phases": {p: (1e3, 2e3) for p in profile.PHASES}, "kernels": {"k": 1.0}, "gaps": {}}

    profile.report({"none": part(1.9), "a_long_name_here": part(158.12)}, argparse.Namespace(rounds=3, top=2))
    line = next(s for s in capsys.readouterr().out.splitlines() if s.startswith("a_long_name_here "))
    cells = line.split()
    assert cells[:2] == ["a_long_name_here", "158.120"] and cells[2].startswith("+"), line
    assert len(cells) == 9, line  # name, wall, pct, [lo, hi], host, kernels, busy, idle


def test_profile_smoke_breaks_a_step_down(tmp_path, capsys):
    out = tmp_path / "profile.csv"
    assert profile.main(["--smoke", "--impls", "none,torch", "--out", str(out)]) == 0
    parts = {(r["implementation"], r["part"]): float(r["time_us"]) for r in harness.read_rows(out)}
    for impl in ("none", "torch"):
        assert parts[(impl, "wall")] > 0 and parts[(impl, "forward host")] > 0 and parts[(impl, "gpu kernels")] > 0
    printed = capsys.readouterr().out
    assert "per phase, ms" in printed and "torch: top kernels" in printed


def test_generate_smoke_writes_a_row_per_point(tmp_path):
    out = tmp_path / "generate.csv"
    assert generate.main(["--smoke", "--batches", "1,2", "--prompts", "4", "--out", str(out)]) == 0
    rows = harness.read_rows(out)
    per_batch = [("captured", "sdpa"), ("captured", "fused_rope"), ("eager", "sdpa"), ("eager", "fused_rope"),
                 ("dynamic", "sdpa"), ("dynamic", "fused_rope"), ("none", "sdpa")]  # no cache: SDPA only
    if fused_attention.unavailable_reason("cpu") is not None:  # a GPU machine: the smoke's CPU has no interpreter
        per_batch = [p for p in per_batch if p[1] == "sdpa"]
    assert [(r["batch"], r["mode"], r["attention"]) for r in rows] == [(b, *p) for b in ("1", "2") for p in per_batch]
    for r in rows:
        assert (r["model"], r["implementation"], r["prompt_len"]) == ("tiny", "torch", "4")
        assert r["new_tokens"] == ("2" if r["mode"] == "none" else "3")
        assert float(r["first_token_ms"]) > 0 and float(r["decode_tok_s"]) > 0
        assert float(r["step_ms"]) == pytest.approx(1e3 * int(r["batch"]) / float(r["decode_tok_s"]), rel=1e-4)
        assert r["captured"] == "False"  # nothing to capture on a CPU: a captured point says so
        assert r["note"] == ("capture needs a CUDA device; decoding eagerly on cpu" if r["mode"] == "captured" else "")
        assert not any(r[c] for c in generate.EARLIER_COLUMNS)
    assert list(rows[0]) == list(generate.HEADER)


@pytest.mark.parametrize(("argv", "message"), [
    (["--modes", "captured,graph"], "--modes takes"),
    (["--attentions", "flash"], "--attentions takes"),
    (["--prompts", "0"], "--prompts takes"),
    (["--impls", "nope"], "unknown RoPE implementation"),
    (["--vocab", "0"], "--vocab at least 2"),  # not replaced by the default
    *[([option, ","], f"{option} takes a comma-separated list of one item or more")
      for option in ("--impls", "--model", "--batches", "--prompts", "--modes", "--attentions")],
    # mode none attends with sdpa only: its rows were all none sdpa, asked for fused_rope
    (["--modes", "none", "--attentions", "fused_rope"], "--modes none decodes without a cache"),
    (["--modes", "eager,none", "--attentions", "fused_rope"], "--modes none decodes without a cache"),
    (["--modes", "none", "--attentions", "sdpa,fused_rope"], "--attentions fused_rope: mode none"),
])
def test_generate_refuses_bad_options_in_one_line(argv, message, tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        generate.main(["--smoke", *argv, "--out", str(tmp_path / "generate.csv")])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and message in err.splitlines()[-1]
    assert not (tmp_path / "generate.csv").exists()


@pytest.mark.parametrize(("argv", "message"), [(["--rounds", "0"], "--rounds and --steps must be at least 1"),
                                               (["--steps", "0"], "--rounds and --steps must be at least 1"),
                                               (["--batch", "-1"], "--batch must be at least 1"),
                                               (["--vocab", "1"], "--vocab at least 2")])
def test_step_refuses_sizes_it_cannot_time_before_any_work(argv, message, capsys):
    """A size given is checked, never silently replaced by the default nor left to fail every model later."""
    with pytest.raises(SystemExit) as exc:
        step.parse_args(["--smoke", *argv])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and message in err and err.count("\n") == 1, err


def test_generate_takes_mode_none_with_the_default_attentions():
    """The default attentions (both) stand for every mode, none's sdpa only, as --help says: not refused."""
    args = generate.parse_args(["--smoke", "--modes", "none"])
    generate.check_none_mode(args)
    assert args.attentions == ["sdpa", "fused_rope"]


def test_generate_smoke_shrinks_whichever_preset_is_asked_for():
    args = generate.parse_args(["--smoke", "--model", "small,seed004"])
    assert [(c.n_layer, c.n_embd, c.n_head) for c in args.model_cfgs.values()] == [(1, 32, 2), (1, 32, 2)]


def test_profile_smoke_keeps_the_counts_given():
    """--smoke makes the defaults tiny; a count given on the command line still stands, as --help says."""
    args = profile.parse_args(["--smoke", "--rounds", "3", "--profiled", "2"])
    assert (args.rounds, args.profiled, args.warmup, args.steps) == (3, 2, 1, 1)
    assert profile.parse_args([]).rounds == 10
