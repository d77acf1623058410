"""bench/attention.py at one tiny shape on the CPU: both paths timed, checked against each other, one row each."""

from __future__ import annotations

import pytest

from bench import attention, harness


@pytest.mark.interpreter
def test_attention_smoke_times_both_paths_of_one_shape(tmp_path):
    out = tmp_path / "attention.csv"
    assert attention.main(["--smoke", "--heads", "4/2", "--queries", "1", "--out", str(out)]) == 0
    rows = harness.read_rows(out)
    assert {(r["implementation"], r["mode"]) for r in rows} >= {("separate", "eager"), ("fused", "eager")}
    assert all(float(r["time_us"]) > 0 and r["gpu"] == "cpu (smoke)" for r in rows)
    assert all(float(r["max_err"]) < 0.05 for r in rows)  # the fused kernel against the separate path, bf16
    assert all(r["speedup"] for r in rows if r["implementation"] == "fused")


@pytest.mark.interpreter
def test_attention_candidates_add_a_row_per_launch_setting(tmp_path, capsys):
    """--candidates: beside the rule's row, one row per candidate setting, named by it, checked against the separate
    path, with the launch it made; a candidate that launches what another row launched is left out, saying so; the
    roof columns filled on every fused row."""
    out = tmp_path / "attention.csv"
    assert attention.main(["--smoke", "--heads", "4/2", "--queries", "1", "--candidates", "--out", str(out)]) == 0
    rows = harness.read_rows(out)
    fused = [r for r in rows if r["implementation"].startswith("fused")]
    launch = {r["implementation"]: r["launch"] for r in fused}
    # D 16, 161 keys in tiles of 64 (3 tiles): the rule does not split; 4 splits over 3 tiles make 3, and so do 8
    assert set(launch) == {"fused", "fused[splits=4]", "fused[bn=32]", "fused[w=8]", "fused[splits=8,bn=32]"}
    said = capsys.readouterr()
    assert "fused[splits=8] left out" in said.err + said.out
    assert len(set(launch.values())) == len(launch)
    launch = {name: "grid=" + line.split("grid=", 1)[1] for name, line in launch.items()}  # after the kernel's name
    assert launch["fused"].startswith("grid=1x2x1 bm=16 bn=64 w=4 s=3 ") and launch["fused"].endswith("combine=none")
    assert launch["fused[splits=4]"].startswith("grid=1x2x3 ") and launch["fused[splits=4]"].endswith("combine=kernel")
    assert " bn=32 " in launch["fused[bn=32]"] and " w=8 " in launch["fused[w=8]"]
    assert launch["fused[splits=8,bn=32]"].startswith("grid=1x2x6 bm=16 bn=32 ")
    assert all(float(r["max_err"]) < 0.05 for r in fused)
    assert all(r["bound"] in ("memory", "compute", "latency") and float(r["roof_speedup"]) > 0 for r in fused)


@pytest.mark.parametrize("bad, says", [("18", "--head-dims 18: head_dim must be a multiple of 4"),
                                       ("512", "--head-dims 512: attention_with_rope takes head dims up to 256")])
def test_a_head_dim_the_module_cannot_take_is_refused_before_any_work(tmp_path, capsys, bad, says):
    """D = 18 (not a multiple of 4: triton_v4's partial variant) or 512 (wider than the fused kernel takes: it ran
    the separate path alone and wrote an empty summary) is one line naming it, before D = 16 is measured."""
    out = tmp_path / "attention.csv"
    with pytest.raises(SystemExit) as exc:
        attention.main(["--smoke", "--head-dims", f"16,{bad}", "--heads", "4/2", "--queries", "1", "--out", str(out)])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and says in err, err
    assert not out.exists()


def test_heads_option_is_the_one_given():
    assert attention.parse_args(["--heads", "8/2,4/4"]).heads == [(8, 2), (4, 4)]
    assert attention.parse_args(["--smoke"]).heads == [(4, 2), (4, 4)]


def test_the_roof_counts_one_launch_of_the_mode():
    """No call beats the separate path by more than its time over (one launch + the cache read at the best
    bandwidth, or the FLOPs at the matmul rate): at batch 1 and a short cache the launch is most of the roof."""
    roofs = attention.Roofs.__new__(attention.Roofs)
    roofs.mma_tflops, roofs.read_gbps, roofs.copy_gbps = 800.0, 4000.0, 3000.0
    roofs.launch_us = {"eager": 9.0, "captured": 4.0}
    shape = attention.Shape(64, 32, 8, 1, 4096, 1)
    nbytes = shape.cache_bytes(2)  # 8 MiB: 2.10 us at 4000 GB/s
    for mode, floor in roofs.launch_us.items():
        row = roofs.columns(shape, mode, nbytes, us=20.0, separate_us=30.0)
        assert row["launch_floor_us"] == floor
        assert row["roof_speedup"] == pytest.approx(30.0 / (floor + nbytes / 4000e3))


def test_a_missed_share_of_copy_bandwidth_says_what_one_launch_allows():
    """A call pays its launch inside its time: 32 MB read at 4000 GB/s (8 us) after a 4 us launch is at most 67% of
    copy bandwidth, so the summary shows that roof beside a miss of the 80% target."""
    row = {"implementation": "fused", "shape": "D64 H32/8 B1 cached16384 +1", "mode": "captured", "queries": 1,
           "cached": 16384, "batch": 1, "time_us": 18.0, "pct_copy_bw": 100 * 32e6 / 18e3 / 4000.0,
           "copy_gbps": 4000.0, "read_gbps": 3000.0, "launch_floor_us": 4.0, "speedup": 1.1, "pct_mma_peak": 1.0,
           "bound": "latency", "roof_speedup": 1.7}
    assert attention.pct_copy_roof(row) == pytest.approx(100 * 8 / 12)
    separate = {**row, "implementation": "separate", "time_us": 20.0}
    text = attention.summary([separate, row])
    assert "- D64 H32/8 B1 cached16384 +1 captured: 44.4% (one launch and the read allow at most 67%)" in text
    assert attention.pct_copy_roof({**row, "launch_floor_us": None}) is None
