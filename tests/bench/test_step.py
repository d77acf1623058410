"""bench/step.py, bench/profile.py and bench/generate.py at tiny sizes on the CPU: a row per measurement."""

from __future__ import annotations

import pytest
import torch

import rope
from bench import generate, harness, profile, step
from rope import fused_attention


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
                          (["--packings", "random,shuffled"], "--packings takes random, documents"),
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


@pytest.mark.parametrize(("argv", "message"), [(["--modes", "captured,graph"], "--modes takes"),
                                               (["--attentions", "flash"], "--attentions takes"),
                                               (["--prompts", "0"], "--prompts takes"),
                                               (["--impls", "nope"], "unknown RoPE implementation")])
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


def test_generate_smoke_shrinks_whichever_preset_is_asked_for():
    args = generate.parse_args(["--smoke", "--model", "small,seed004"])
    assert [(c.n_layer, c.n_embd, c.n_head) for c in args.model_cfgs.values()] == [(1, 32, 2), (1, 32, 2)]


def test_profile_smoke_keeps_the_counts_given():
    """--smoke makes the defaults tiny; a count given on the command line still stands, as --help says."""
    args = profile.parse_args(["--smoke", "--rounds", "3", "--profiled", "2"])
    assert (args.rounds, args.profiled, args.warmup, args.steps) == (3, 2, 1, 1)
    assert profile.parse_args([]).rounds == 10
