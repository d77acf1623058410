"""``docs/results/report13/collect.py``: the closing note's tables from the report's parts, read from session 37's
H200 outputs laid out as ``run.sh`` writes them (the next H100 session depends on it, and a renamed CSV column
would otherwise surface only then)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
S37 = ROOT / "docs/results/bench_h200_s37"


def _collect(folder: Path, timeout: int = 120) -> subprocess.CompletedProcess:
    """``collect.py FOLDER`` as a user runs it, in a child process."""
    return subprocess.run([sys.executable, str(ROOT / "docs/results/report13/collect.py"), str(folder)],
                          capture_output=True, text=True, timeout=timeout)


def test_collect_prints_each_table_and_says_what_is_missing(tmp_path):
    shutil.copytree(S37 / "call1/full", tmp_path / "a/full")
    shutil.copy(S37 / "call1/gpu.txt", tmp_path / "a/gpu.txt")
    shutil.copytree(S37 / "call5/full256", tmp_path / "b/full256")
    for name in ("modes", "step_seed004", "step_gpt2"):
        shutil.copytree(S37 / "call3/d" / name, tmp_path / "c" / name)
    res = _collect(tmp_path)
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert "GPU: NVIDIA H200, GPU-0b9c1bc1" in out
    row = next(line for line in out.splitlines() if line.startswith("| full: triton_v4 |"))
    assert [c.strip() for c in row.split("|")[2:-1]] == [""] * 8 + ["90.0/90.7", "90.4/90.9", "90.7/91.7"]  # D >= 156
    # the sweeps: ranges, how many head dims, Liger and compiled torch beside them
    assert "| full, odd halves (32M, 93) | 25 | 83.1-86.1 | 83.4-85.7 | 25 head dims; the lowest 230 (83.1/83.4)" in out
    assert "| none | 68.0-74.9 | 41.2-44.2 |" in out
    assert "| full, even halves (32M, 93) | 26 | 83.3-92.7 | 83.3-92.6 |" in out
    assert "| 160, 188, 192, 204, 220, 236, 252 |" in out  # under Liger in either direction
    assert "| partial (32M, 93) | 0 | n/a | n/a | none | none | n/a | n/a |" in out  # b/part was not laid out
    assert "| part256 (256M, 97) | 0 |" in out
    assert "| 48 | half | 24 | 87.2/85.9 | 73.1/72.3 |  | 77.5/77.5 |" in out  # layouts
    assert "| 262144 | 123 | triton_v4 | 94.2 | 93.9 | -0.3 | 238.0 |" in out  # packed
    assert "16 of 16 cases at or under 10 us" in out  # host time
    assert "| seed004 | compile | triton_v4 | 15.15 | +1.3% | +2.4% [+0.7, +4.1] |" in out
    assert "(missing: " in out and "step_seed004_eager" in out  # a part not there is said
    bad = _collect(tmp_path / "nope", timeout=60)
    assert bad.returncode == 1 and bad.stderr.strip().startswith("usage:")


def test_collect_reads_every_part_as_run_sh_wrote_them():
    """Session 38 ran ``REPORT13_SMOKE=1 run.sh a|b|c`` on an H200: the parts as the script lays them out, whole."""
    smoke = ROOT / "docs/results/bench_h200_s38/report13_smoke"
    res = _collect(smoke)
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert "(missing: " not in out
    assert "| full: triton_v4 |  |  | 91.9/92.6 |" in out
    assert "| partial (32M, 93) | 3 | 87.1-92.2 | 87.4-92.4 |" in out
    assert "| full256 (256M, 97) | 2 | 92.6-97.0 | 92.7-97.1 |" in out
    assert "| part256 (256M, 97) | 2 | 95.8-98.7 | 95.4-99.0 |" in out
    assert "| 128 | interleaved | 32 | 91.6/91.5 | 84.6/84.3 |  | 48.8/48.7 |" in out
    assert "16 of 16 cases at or under 10 us" in out
    for table in ("seed004", "seed004_eager", "gpt2"):
        assert f"### Training step: {table}\n" in out
    assert "| gpt2_small | compile | triton_v4 | 62.72 | +3.6% | -1.7% [-74.3, +70.8] |" in out
