"""scripts/bench_generate.py at a tiny size on the CPU: every measurement comes out, in every file."""

from __future__ import annotations

import json

import pytest

from scripts.bench_generate import main


def test_bench_generate_runs_on_the_cpu_at_a_tiny_size(tmp_path, capsys):
    rows = main(["--model", "tiny", "--vocab", "256", "--prompt-len", "4", "--new-tokens", "3", "--batches", "1,2",
                 "--ropes", "none,torch", "--iters", "1", "--warmup", "0", "--device", "cpu", "--out", str(tmp_path)])
    assert [(r["rope"], r["batch"]) for r in rows] == [("none", 1), ("none", 2), ("torch", 1), ("torch", 2)]
    for r in rows:
        assert r["tok_s_cache"] > 0 and r["tok_s_no_cache"] > 0 and r["step_ms"] > 0 and r["rope_ms"] > 0
        assert r["rope_share_pct"] == pytest.approx(100 * r["rope_ms"] / r["step_ms"])
        assert r["step_vs_none_pct"] == pytest.approx(100 * (r["step_ms"] / rows[r["batch"] - 1]["step_ms"] - 1))
    assert json.loads((tmp_path / "generate_bench.json").read_text()) == rows
    table = (tmp_path / "generate_bench.md").read_text()
    assert "| torch | 2 |" in table and "tok/s no cache" in table and "rope share" in table
    assert (tmp_path / "generate_bench.csv").read_text().startswith("rope,batch,tok_s_cache")
    assert "CPU, float32" in capsys.readouterr().out


def test_bench_generate_refuses_a_prompt_longer_than_the_model(tmp_path):
    with pytest.raises(SystemExit, match="--prompt-len 100 \\+ --new-tokens 100 .* model.seq_len=128"):
        main(["--model", "tiny", "--prompt-len", "100", "--new-tokens", "100", "--out", str(tmp_path)])
