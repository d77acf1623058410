"""scripts/bench_step.py on the CPU: presets and their defaults, the overhead columns, a dry run."""

from __future__ import annotations

import csv
import json
import math

import pytest

from scripts import bench_step


def test_defaults_per_model():
    a = bench_step.parse_args([])
    assert a.models == ["gpt2_small"] and a.batches == [32] and a.vocabs == [50257] and a.optim == "adamw"
    a = bench_step.parse_args(["--model", "seed004,gpt2_small"])
    assert a.batches == [24, 32] and a.vocabs == [100277, 50257]
    a = bench_step.parse_args(["--model", "seed004,gpt2_small", "--batch", "8", "--vocab", "1000"])
    assert a.batches == [8, 8] and a.vocabs == [1000, 1000]
    assert bench_step.parse_args(["--model", "seed004,tiny", "--batch", "4,5"]).batches == [4, 5]
    for bad in (["--model", "nope"], ["--model", "seed004,tiny", "--batch", "1,2,3"], ["--optim", "sgd"]):
        with pytest.raises(SystemExit):
            bench_step.parse_args(bad)


def _row(model, mode, rope, ms, error=""):
    return {"model": model, "batch": 24, "seq_len": 512, "vocab": 100277, "mode": mode, "rope": rope,
            "step_ms": ms, "min_ms": ms, "params_M": 49.0, "error": error}


def test_relative_and_table_per_model():
    rows = [_row("seed004", "eager", "none", 100.0), _row("seed004", "eager", "torch", 110.0),
            _row("seed004", "eager", "triton_v4", 102.0), _row("seed004", "eager", "liger", math.nan, "Boom: x"),
            _row("gpt2_small", "eager", "none", 200.0), _row("gpt2_small", "eager", "triton_v4", 205.0)]
    bench_step.relative(rows)
    assert rows[2]["overhead_vs_none_pct"] == pytest.approx(2.0)
    assert rows[1]["overhead_vs_none_pct"] == pytest.approx(10.0)
    assert rows[2]["vs_torch_pct"] == pytest.approx(100 * (102 / 110 - 1))
    assert rows[3]["overhead_vs_none_pct"] is None and rows[5]["overhead_vs_none_pct"] == pytest.approx(2.5)
    assert rows[5]["vs_torch_pct"] is None  # no torch row for that model
    args = bench_step.parse_args(["--model", "seed004,gpt2_small"])
    text = bench_step.table(rows, args, device_name="Test GPU")
    assert text.count("GPT training step, model=") == 2 and "model=seed004 (49M), B=24, T=512" in text
    assert "| eager | triton_v4 | 102.00 | +2.0% | -7.3% |" in text and "| eager | liger | failed | n/a | n/a |" in text
    assert "- eager liger: Boom: x" in text and "| eager | triton_v4 | 205.00 | +2.5% | n/a |" in text


def test_dry_run_keeps_going_past_a_failing_entry(tmp_path, monkeypatch):
    real = bench_step.time_step

    def time_step(model_cfg, name, *args):
        if name == "torch":
            raise RuntimeError("does not compile\nsecond line")
        return real(model_cfg, name, *args)

    monkeypatch.setattr(bench_step, "time_step", time_step)
    bench_step.main(["--model", "tiny", "--device", "cpu", "--modes", "eager", "--ropes", "none,torch,none",
                     "--batch", "1", "--vocab", "256", "--warmup", "0", "--iters", "1", "--out", str(tmp_path)])
    text = (tmp_path / "step_bench.md").read_text()
    assert "| eager | torch | failed |" in text and "- eager torch: RuntimeError: does not compile" in text
    assert "second line" not in text
    with open(tmp_path / "step_bench.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["rope"] for r in rows] == ["none", "torch", "none"] and float(rows[0]["step_ms"]) > 0
    assert json.loads((tmp_path / "step_bench.json").read_text())[0]["model"] == "tiny"


@pytest.mark.interpreter
def test_rounds_interleave_the_ropes_and_pair_them_by_round(tmp_path, monkeypatch, capsys):
    """--rounds R: every rope compiled and warmed up first, then R rounds of iters/R timed steps with the
    ropes' order rotating; each round's medians pair the ropes, and the table gains the paired column."""
    calls = []
    fake_ms = {"none": 10.0, "torch": 20.0, "triton_v4": 19.0}

    def make_step(model_cfg, name, mode, args, batch_size, vocab):
        def step():
            return name
        step.rope = name
        return step, 1.0

    def event_times(step, warmup, iters, device):
        calls.append((step.rope, iters))
        rnd = sum(1 for name, n in calls if n and name == step.rope)  # this rope's round, from 1
        return [fake_ms[step.rope] + rnd] * iters  # drift: every rope slower each round

    monkeypatch.setattr(bench_step, "make_step", make_step)
    monkeypatch.setattr(bench_step, "event_times", event_times)
    bench_step.main(["--model", "tiny", "--device", "cpu", "--modes", "eager", "--ropes", "none,torch,triton_v4",
                     "--iters", "6", "--rounds", "3", "--out", str(tmp_path)])
    assert [c for c in calls if c[1] == 0] == [("none", 0), ("torch", 0), ("triton_v4", 0)]  # warm-up first
    timed = [c[0] for c in calls if c[1]]
    assert timed == ["none", "torch", "triton_v4", "torch", "triton_v4", "none", "triton_v4", "none", "torch"]
    assert all(n == 2 for _, n in calls if n)
    rows = {r["rope"]: r for r in json.loads((tmp_path / "step_bench.json").read_text())}
    # each round: (19 + r) / (20 + r) - 1, the same drift on both: the pairing removes it
    want = [100 * ((19 + r) / (20 + r) - 1) for r in (1, 2, 3)]
    assert rows["triton_v4"]["vs_torch_round_pct"] == pytest.approx(sum(want) / 3)
    assert rows["triton_v4"]["vs_torch_round_lo"] < rows["triton_v4"]["vs_torch_round_pct"]
    assert "vs_torch_round_pct" not in rows["torch"]
    # the medians of all steps: triton_v4 20, 20, 21, 21, 22, 22 against torch 21, ..., 23
    assert rows["triton_v4"]["vs_torch_median_pct"] == pytest.approx(100 * (21 / 22 - 1))
    assert rows["triton_v4"]["vs_torch_median_lo"] <= rows["triton_v4"]["vs_torch_median_pct"]
    assert rows["triton_v4"]["vs_torch_median_hi"] >= rows["triton_v4"]["vs_torch_median_pct"]
    text = (tmp_path / "step_bench.md").read_text()
    assert "| medians [bootstrap CI] | paired by round |" in text and "timed interleaved in 3 rounds" in text
    assert f"| {100 * (21 / 22 - 1):+.1f}% [" in text
    assert rows["torch"]["round_medians_ms"] == [21.0, 22.0, 23.0]  # kept for a re-analysis
    assert rows["torch"]["round_times_ms"] == [[21.0, 21.0], [22.0, 22.0], [23.0, 23.0]]  # every step too
    with open(tmp_path / "step_bench.csv") as f:
        assert not {"round_medians_ms", "round_times_ms"} & set(next(csv.DictReader(f)))  # the lists: JSON only
    assert "times 2 step(s) a round" in capsys.readouterr().err  # too few a round for a tight interval: said


def test_rounds_must_fit_the_iterations():
    with pytest.raises(SystemExit):
        bench_step.parse_args(["--iters", "4", "--rounds", "5"])
    with pytest.raises(SystemExit):
        bench_step.parse_args(["--rounds", "0"])


def test_modes_are_checked_before_any_work(capsys):
    assert bench_step.parse_args(["--modes", "eager, cudagraphs"]).modes == "eager,cudagraphs"
    for bad in ("compiled", "eager,cuda", ""):
        with pytest.raises(SystemExit):
            bench_step.parse_args(["--modes", bad])
        err = capsys.readouterr().err
        assert "--modes: each of eager, compile, cudagraphs" in err


@pytest.mark.parametrize("mode,compiled_as,marks", [("eager", None, 0), ("compile", [None], 0),
                                                    ("cudagraphs", ["reduce-overhead"], 2)])
def test_each_mode_compiles_its_way(mode, compiled_as, marks, monkeypatch):
    """cudagraphs: torch.compile(mode="reduce-overhead"), and every step begins a new CUDA-graph iteration
    (whose outputs a later replay may overwrite)."""
    import torch

    import llm.model

    seen, begun = [], []

    def compile_model(model, mode=None):
        seen.append(mode)
        return model

    monkeypatch.setattr(llm.model, "compile_model", compile_model)
    monkeypatch.setattr(torch.compiler, "cudagraph_mark_step_begin", lambda: begun.append(1))
    args = bench_step.parse_args(["--model", "tiny", "--device", "cpu", "--modes", mode])
    step, _ = bench_step.make_step(bench_step.OmegaConf.load(bench_step.CONF / "model" / "tiny.yaml"), "torch", mode,
                                   args, 2, 64)
    step()
    step()
    assert (seen or None) == compiled_as and len(begun) == marks


def test_round_order_puts_each_name_first_once_per_cycle():
    from scripts.benchlib import round_order

    assert [round_order(["a", "b", "c"], r) for r in range(4)] == [
        ["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"], ["a", "b", "c"]]
    assert round_order([], 3) == []
