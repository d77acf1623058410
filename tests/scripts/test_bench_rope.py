"""scripts/bench_rope.py modes (issue #13) on the CPU: shapes, argument parsing, tables, plots, and a dry
run of every mode (Triton entries under the interpreter, the compiled reference with the eager backend,
the CPU wall-clock timer standing in for the GPU timer)."""

from __future__ import annotations

import csv
import math

import pytest
import torch
from helpers import FakeGpus

import rope
from rope import triton_rope
from rope.triton_rope import LaunchConfig
from scripts import bench_rope, liger_adapter
from scripts import bench_rope_modes as bm
from scripts.benchlib import WallTimer, count_label, host_loop, launch_overrides, parse_count, rope_names

M = 2**20


def test_parse_count_and_label():
    assert parse_count("32M") == 32 * M and parse_count("256m") == 256 * M and parse_count("64K") == 65536
    assert parse_count("1000") == 1000 and parse_count(7) == 7 and parse_count("1.5K") == 1536
    for bad in ("", "M", "-3", "2.5", "x12"):
        with pytest.raises(ValueError):
            parse_count(bad)
    assert count_label(32 * M) == "32M" and count_label(256 * M) == "256M" and count_label(3 * 2**30) == "3G"
    assert count_label(1000) == "1000" and count_label(65536) == "64K"


@pytest.mark.parametrize("elements", [32 * M, 256 * M])
def test_batch_for_is_the_smallest_batch_reaching_the_elements(elements):
    for D in bm.DEFAULT_HEAD_DIMS:
        B = bm.batch_for(elements, 2048, 16, D)
        assert B * 2048 * 16 * D >= elements > (B - 1) * 2048 * 16 * D
    assert bm.batch_for(10, 2048, 16, 128) == 1


def test_head_dims_default_and_checks():
    dims = bm.parse_dims(None, "partial")
    assert dims[0] == 16 and dims[-1] == 256 and len(dims) == 31 + 3
    assert {20, 36, 52} <= set(dims) and all(d % 4 == 0 for d in dims) and dims == sorted(dims)
    assert set(range(16, 257, 8)) <= set(dims)
    assert bm.parse_dims("64, 18,64", "full") == [64, 18]
    assert bm.parse_dims("every", "partial") == list(range(16, 257, 4))  # the range, 61 dims
    assert len(bm.parse_dims("every", "full")) == 121 and bm.parse_dims("every", "full")[:2] == [16, 18]
    with pytest.raises(ValueError, match="head-dim-list"):
        bm.parse_dims("16,x", "full")
    with pytest.raises(ValueError, match="multiple of 4"):
        bm.parse_dims("16,18", "partial")
    with pytest.raises(ValueError, match="even"):
        bm.parse_dims("17", "full")
    order = bm.priority_order(dims)
    assert sorted(order) == dims and order[:4] == [16, 20, 32, 36] and order.index(256) < order.index(24)


def test_targets_and_packed_lengths():
    assert bm.target_pct(32 * M) == 93 and bm.target_pct(100 * M) == 93 and bm.target_pct(256 * M) == 97
    assert bm.target_pct(1000) == 93
    lengths = bm.packed_lengths(65536, 4096)
    assert sum(lengths) == 65536 and min(lengths) >= 1 and max(lengths) <= 4096 and len(lengths) > 10
    assert lengths == bm.packed_lengths(65536, 4096) != bm.packed_lengths(65536, 4096, seed=1)


def test_parse_args_modes():
    a = bench_rope.parse_args([])
    assert a.modes == [] and a.reps == 30 and a.budget_s is None  # the default run, unchanged
    a = bench_rope.parse_args(["--all", "--out", "x"])
    assert a.modes == list(bench_rope.MODES) and a.element_counts == [32 * M, 256 * M]
    assert a.budget_s == bench_rope.ALL_BUDGET_S and a.reps == 15 and a.dims == bm.DEFAULT_HEAD_DIMS
    assert a.packed_totals == [65536, 131072, 262144] and a.layout_dim_values == [48, 64, 128]
    assert a.overhead_shape_values == list(bm.OVERHEAD_SHAPES)
    a = bench_rope.parse_args(["--head-dims", "--elements", "256M", "--head-dim-list", "64,128", "--reps", "5",
                               "--overhead-shapes", "1x2x3x16"])
    assert a.modes == ["head_dims"] and a.element_counts == [256 * M] and a.dims == [64, 128] and a.reps == 5
    assert a.overhead_shape_values == [(1, 2, 3, 16)]
    for bad in (["--head-dims", "--elements", "lots"], ["--head-dims", "--head-dim-list", "18"],
                ["--overhead", "--overhead-shapes", "1x2x3"], ["--layouts", "--tune"]):
        with pytest.raises(SystemExit):
            bench_rope.parse_args(bad)


def _row(impl, D, fwd, bwd, **extra):
    return {"impl": impl, "D": D, "B": 4, "T": 2048, "H": 16, "elements": 4 * 2048 * 16 * D, "layout": "half",
            "rotary_dim": D, "variant": "partial", "fwd_ms": 0.1, "bwd_ms": 0.1, "fwd_pct_copy": fwd,
            "bwd_pct_copy": bwd, "max_diff_fwd": 0.01, "max_diff_bwd": 0.02, "bwd_method": "kernel", **extra}


INFO = {"device_name": "Test GPU", "variant": "partial", "copy_bw": 3000.0, "reps": 15}
NAMES = ["triton_v4", "triton_v2", bm.COMPILED, bm.LIGER]


def test_headdim_markdown_judges_the_targets(tmp_path):
    rows = [_row("triton_v4", 64, 95.0, 96.0), _row(bm.LIGER, 64, 60.0, 97.0), _row(bm.COMPILED, 64, 85.0, 85.0),
            _row("triton_v4", 16, 90.0, 94.0), _row(bm.LIGER, 16, 40.0, 45.0)]
    res = bm.Result("headdim_32M", rows, ["something skipped"])
    md = bm.headdim_markdown(res, NAMES, 32 * M, 2048, 16, INFO)
    fwd, bwd = md.split("### Forward")[1].split("### Backward")
    line64 = next(x for x in fwd.splitlines() if x.startswith("| 64 "))
    assert line64.endswith("| ok |") and "| 95.0 |" in line64 and "| 60.0 |" in line64
    assert next(x for x in fwd.splitlines() if x.startswith("| 16 ")).endswith("| MISS <93% |")
    assert next(x for x in bwd.splitlines() if x.startswith("| 64 ")).endswith("| MISS <liger |")
    assert "triton_v2" not in md.split("### Forward")[1]  # an implementation with no rows has no columns
    assert "- something skipped" in md and "3000 GB/s" in md and "WRONG" not in md
    assert "triton_v4: 90.0 (D=16) / 94.0 (D=16)" in md
    bad = [*rows, _row("triton_v2", 64, 99.0, 99.0, max_diff_fwd=2.0)]
    assert "**WRONG OUTPUTS**" in bm.headdim_markdown(bm.Result("x", bad, []), NAMES, 32 * M, 2048, 16, INFO)
    assert "97%" in bm.headdim_markdown(res, NAMES, 256 * M, 2048, 16, INFO)
    res.markdown = md
    bm.write_result(res, tmp_path)
    with open(tmp_path / "headdim_32M.csv") as f:
        got = list(csv.DictReader(f))
    assert len(got) == 5 and got[0]["impl"] == "triton_v4" and float(got[0]["fwd_pct_copy"]) == 95.0
    bm.headdim_plot(rows, NAMES, tmp_path / "p.png", 32 * M, 2048, 16, INFO)
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"


def test_layouts_packed_overhead_markdown():
    rows = [_row("triton_v4", 64, 95.0, 94.0, layout="interleaved", rotary_dim=32),
            _row(bm.COMPILED, 64, 80.0, 81.0, layout="interleaved", rotary_dim=32)]
    md = bm.layouts_markdown(bm.Result("layouts", rows, []), NAMES, 32 * M, 2048, 16, INFO)
    assert "| 64 | interleaved | 32 | 4 | 95.0 | 94.0 | 80.0 | 81.0 | 0.1000 | 0.1000 | ok / ok |" in md
    packed = [{"impl": "triton_v4", "total_tokens": 65536, "n_seq": 30, "fwd_cu_ms": 0.2, "fwd_cu_pct_copy": 94.0,
               "fwd_pos_pct_copy": 96.0, "fwd_plain_pct_copy": 97.0, "cu_overhead_us": 5.0, "bwd_pos_ms": 0.2,
               "bwd_pos_pct_copy": 92.0, "bwd_plain_pct_copy": 97.0, "max_diff_cu_fwd": 0.0},
              {"impl": bm.COMPILED, "total_tokens": 65536, "n_seq": 30, "fwd_cu_ms": math.nan,
               "fwd_cu_pct_copy": math.nan, "fwd_pos_pct_copy": 80.0, "fwd_plain_pct_copy": 85.0,
               "cu_overhead_us": math.nan, "max_diff_cu_fwd": math.nan}]
    md = bm.packed_markdown(bm.Result("packed", packed, ["a failure"]), NAMES, 16, 128, 4096, INFO)
    assert "MISS bwd_pos_pct_copy" in md and "UNCHECKED OUTPUTS** (max |diff| > 0.25 or not computed): " \
        f"{bm.COMPILED}" in md and "- a failure" in md
    over = [{"shape": "1x1x32x128", "elements": 4096, "positions": "none", "grad": "no_grad", "impl": "triton_v4",
             "call_host_us": 20.0, "launch_host_us": 14.0, "call_minus_launch_us": 6.0},
            {"shape": "1x1x32x128", "elements": 4096, "positions": "none", "grad": "no_grad", "impl": "torch",
             "call_host_us": 90.0},
            {"shape": "1x1x32x128", "elements": 4096, "positions": "none", "grad": "requires_grad",
             "impl": "triton_v4", "call_host_us": 40.0, "launch_host_us": 14.0, "call_minus_launch_us": 26.0}]
    md = bm.overhead_markdown(bm.Result("overhead", over, []), NAMES, 200, 7, INFO)
    assert "| 1x1x32x128 | none | no_grad | 20.0 | 14.0 | 6.0 | 90.0 | ok |" in md
    assert md.rstrip().endswith("| 1x1x32x128 | none | requires_grad | 40.0 | 14.0 | 26.0 |  | MISS |")
    assert "torch launch us" not in md


def test_overhead_table_shows_the_paired_quartiles():
    over = [{"shape": "1x1x32x128", "elements": 4096, "positions": "none", "grad": "no_grad", "impl": "triton_v4",
             "call_host_us": 20.0, "launch_host_us": 14.0, "call_minus_launch_us": 6.0,
             "call_minus_launch_q1_us": 5.0, "call_minus_launch_q3_us": 7.25}]
    md = bm.overhead_markdown(bm.Result("overhead", over, []), NAMES, 200, 7, INFO)
    assert "| triton_v4 its quartiles |" in md and "| 6.0 | [5.0, 7.2] |" in md


def test_paired_host_loops_difference_survives_a_drifting_host(monkeypatch):
    """a costs 3 us more than b a call; the host slows down 10x over the run. Two medians timed apart
    would mix the drift into the difference; adjacent pairs keep it near 3 us times the local speed."""
    from scripts import benchlib

    clock = {"t": 0.0, "speed": 1.0}
    monkeypatch.setattr(benchlib.time, "perf_counter", lambda: clock["t"])

    def cost(us):
        def f():
            clock["t"] += us * 1e-6 * clock["speed"]
        return f

    a, b = cost(13.0), cost(10.0)

    def drifting(f):
        def g():
            f()
            clock["speed"] += 0.0005
        return g

    got = benchlib.paired_host_loops(drifting(a), drifting(b), calls=10, repeats=30, device="cpu")
    assert clock["speed"] > 1.3  # the host did drift, by more than the 30% a's extra cost is of b's
    assert got["diff_q1_us"] <= got["diff_us"] <= got["diff_q3_us"]
    assert 3.0 <= got["diff_us"] <= 3.0 * clock["speed"]  # the true 3 us at the local speed, never below


def test_host_loop_on_the_cpu():
    calls = []
    got = host_loop(lambda: calls.append(1), calls=5, repeats=3, device="cpu")
    assert len(calls) == 5 + 15 and got["host_us"] >= 0 and math.isnan(got["gpu_us"])
    assert got["host_us_min"] <= got["host_us"] <= got["wall_us"] + 1e-9 or got["wall_us"] >= got["host_us_min"]


def _bench(**kw):
    return bm.Bench(WallTimer(1), torch.device("cpu"), 10.0, lambda m: torch.compile(m, backend="eager",
                                                                                     dynamic=False), **kw)


@pytest.mark.interpreter
def test_bare_launcher_is_the_module_call_without_the_module():
    mod = rope.build("triton_v4", 16, 8, variant="partial", layout="interleaved", rotary_dim=8)
    q, k = torch.randn(2, 3, 2, 16, dtype=torch.bfloat16), torch.randn(2, 3, 2, 16, dtype=torch.bfloat16)
    pos = torch.tensor([[5, 1, 7], [0, 2, 3]])
    prepare = bm.bare_launcher(mod)
    for p in (None, pos):
        for a, b in zip(prepare(q, k, p)(), mod(q, k, positions=p), strict=True):
            assert torch.equal(a, b)
    assert bm.bare_launcher(rope.build("torch", 16, 8)) is None


@pytest.mark.interpreter
def test_compiled_backward_is_the_autograd_gradient():
    bench = _bench()
    impl = bm.build_impl(bench, bm.COMPILED, 16, 8, "interleaved", 8)
    q, g = torch.randn(2, 8, 2, 16), torch.randn(2, 8, 2, 16)
    ref = rope.build("torch", 16, 8, layout="interleaved", rotary_dim=8)
    qg = q.clone().requires_grad_()
    want = torch.autograd.grad(ref(qg), qg, g)[0]
    got, _ = impl.bwd(g, g)
    torch.testing.assert_close(got, want)
    assert "half layout" in bm.build_impl(bench, bm.LIGER, 16, 8, "interleaved", None) or \
        liger_adapter.unavailable_reason()
    assert "rotary_dim" in bm.build_impl(bench, "triton_v4", 16, 8, "half", 6)


@pytest.mark.interpreter
def test_a_tiling_suffix_times_the_entry_with_that_tiling():
    """``triton_v4@chunks`` / ``@rows``: the same entry, its LaunchConfig.chunks forced, same results."""
    bench = _bench()
    q, k = torch.randn(2, 3, 2, 40, dtype=torch.bfloat16), torch.randn(2, 3, 1, 40, dtype=torch.bfloat16)
    outs = {}
    for name, chunks in (("triton_v4@chunks", 1), ("triton_v4@rows", 0)):
        impl = bm.build_impl(bench, name, 40, 8)
        assert impl.name == name and impl.module.launch_config.chunks == chunks
        outs[name] = impl.fwd(q, k)
    assert all(torch.equal(a, b) for a, b in zip(*outs.values(), strict=True))
    assert "no launch configuration" in bm.build_impl(bench, "torch@chunks", 40, 8)
    assert rope_names("triton_v4,triton_v4@chunks") == ["triton_v4", "triton_v4@chunks"]
    with pytest.raises(SystemExit, match="'cols' in triton_v4@cols: NAME@SPEC takes"):
        rope_names("triton_v4@cols")
    with pytest.raises(SystemExit, match="unknown RoPE implementation"):
        rope_names("nope@rows")


@pytest.mark.interpreter
def test_a_launch_spec_sets_tile_warps_and_streaming():
    """``NAME@rows+tile=2048+warps=4+stream`` reaches the module's LaunchConfig field by field; a bad item is
    refused with the item named."""
    impl = bm.build_impl(_bench(), "triton_v4@rows+tile=2048+warps=4+stream", 40, 8)
    assert impl.module.launch_config == LaunchConfig(tile=2048, num_warps=4, chunks=0, streaming=True)
    assert launch_overrides("triton_v4") == ("triton_v4", {})
    assert launch_overrides("triton_v4@flat+paired") == ("triton_v4", {"chunks": 2, "tables": 1})
    assert launch_overrides("triton_v4@split") == ("triton_v4", {"tables": 0})
    assert launch_overrides("triton_v4@words+regs=32") == ("triton_v4", {"words": 1, "maxnreg": 32})
    assert launch_overrides("triton_v4@elements") == ("triton_v4", {"words": 0})
    assert launch_overrides("triton_v4@block=2") == ("triton_v4", {"block": 2})
    with pytest.raises(ValueError, match="triton_v4@block=3: LaunchConfig.block must be"):
        launch_overrides("triton_v4@block=3")
    for bad in ("triton_v4@tile=0", "triton_v4@warps=x", "triton_v4@tile"):
        with pytest.raises(ValueError, match=bad.partition("@")[2]):
            launch_overrides(bad)
    with pytest.raises(ValueError, match="triton_v4@regs=8: LaunchConfig.maxnreg must be"):
        launch_overrides("triton_v4@regs=8")


def test_a_spec_reaches_the_module_through_one_builder():
    """``build_entry`` is where every mode turns NAME@SPEC into a module: the settings land in its
    LaunchConfig, and a spec for an entry without one is refused with the entry named (the overhead mode
    used to drop it silently)."""
    mod = bm.build_entry("triton_v4@flat+paired+regs=40", 18, 32, "cpu", variant="full")
    assert mod.launch_config == LaunchConfig(chunks=2, tables=1, maxnreg=40)
    with pytest.raises(bm.EntrySpecError, match="torch@rows: torch has no launch configuration"):
        bm.build_entry("torch@rows", 16, 32, "cpu")


@pytest.mark.interpreter
def test_every_mode_takes_a_tiling_suffix(tmp_path):
    """The modes build ``NAME@TILING`` entries too (the overhead mode once looked the suffixed name up in
    the registry and failed)."""
    out = tmp_path / "out"
    rc = bench_rope.main(["--layouts", "--packed", "--overhead", "--device", "cpu", "--compile-backend", "eager",
                          "--ropes", "triton_v4@chunks", "--no-liger", "--no-compiled", "--elements", "64",
                          "--seq-len", "4", "--heads", "1", "--layout-dims", "40", "--packed-tokens", "24",
                          "--packed-max-len", "8", "--overhead-shapes", "1x2x1x40", "--overhead-calls", "1",
                          "--overhead-repeats", "1", "--reps", "1", "--out", str(out)])
    assert rc == 0
    for name in ("layouts", "packed", "overhead"):
        with open(out / f"{name}.csv") as f:
            assert "triton_v4@chunks" in {r["impl"] for r in csv.DictReader(f)}, name
    with open(out / "overhead.csv") as f:  # the autograd floor beside each call with grad, and only there
        rows = [r for r in csv.DictReader(f) if r["impl"] == "triton_v4@chunks"]
    assert {r["grad"] for r in rows if r["autograd_floor_us"]} == {"requires_grad"}
    assert "autograd floor us" in (out / "overhead.md").read_text()


@pytest.mark.interpreter
def test_impl_names_order_and_notes():
    names, notes = bm.impl_names(None, torch.device("cpu"))
    assert names[0] == "triton_v4" and bm.COMPILED in names and "torch" not in names and "none" not in names
    assert (bm.LIGER in names) == (liger_adapter.unavailable_reason() is None)
    names, _ = bm.impl_names("triton_v2", torch.device("cpu"), liger=False, compiled=False)
    assert names == ["triton_v2"] and bm.primary(names) == "triton_v2" and bm.primary([bm.COMPILED]) is None


@pytest.mark.interpreter
def test_dry_run_of_every_mode(tmp_path):
    """The whole --all path at toy sizes: every file written, every output checked correct."""
    out = tmp_path / "out"
    rc = bench_rope.main(["--all", "--device", "cpu", "--compile-backend", "eager", "--elements", "64,128",
                          "--head-dim-list", "16", "--seq-len", "4", "--heads", "1", "--layout-dims", "16",
                          "--packed-tokens", "24", "--packed-max-len", "8", "--overhead-shapes", "1x2x1x16",
                          "--overhead-calls", "1", "--overhead-repeats", "1", "--reps", "1", "--out", str(out)])
    assert rc == 0
    names = {p.name for p in out.iterdir()}
    assert {"summary.md", "overhead.md", "overhead.csv", "headdim_64.md", "headdim_64.csv", "headdim_64.png",
            "headdim_128.md", "headdim_128.png", "layouts.md", "layouts.csv", "packed.md", "packed.csv"} <= names
    summary = (out / "summary.md").read_text()
    assert summary.count("\n## ") == 5 and "WRONG" not in summary and "failed" not in summary
    for name in ("headdim_64", "layouts"):
        with open(out / f"{name}.csv") as f:
            rows = list(csv.DictReader(f))
        assert rows and all(float(r["max_diff_fwd"]) <= bm.MAX_DIFF and float(r["max_diff_bwd"]) <= bm.MAX_DIFF
                            for r in rows)
        assert {"triton_v4", "triton_v2", bm.COMPILED} <= {r["impl"] for r in rows}
    with open(out / "layouts.csv") as f:
        cases = {(r["layout"], r["rotary_dim"]) for r in csv.DictReader(f)}
    assert cases == {(lay, str(16 // f)) for lay in ("half", "interleaved") for f in (1, 2, 4)}
    with open(out / "packed.csv") as f:
        packed = list(csv.DictReader(f))
    assert all(float(r["max_diff_cu_fwd"]) <= bm.MAX_DIFF and float(r["fwd_cu_ms"]) > 0 for r in packed)
    with open(out / "overhead.csv") as f:
        over = list(csv.DictReader(f))
    assert len({(r["positions"], r["grad"]) for r in over}) == 4
    assert all(r["call_minus_launch_us"] for r in over if r["impl"].startswith("triton"))


def test_budget_cuts_the_last_sweep_only(tmp_path):
    out = tmp_path / "out"
    bench_rope.main(["--all", "--device", "cpu", "--compile-backend", "eager", "--elements", "64,128",
                     "--head-dim-list", "16", "--seq-len", "4", "--heads", "1", "--layout-dims", "16",
                     "--packed-tokens", "24", "--packed-max-len", "8", "--overhead-shapes", "1x2x1x16",
                     "--overhead-calls", "1", "--overhead-repeats", "1", "--reps", "1", "--budget-s", "0",
                     "--ropes", "triton_v4", "--no-liger", "--no-compiled", "--out", str(out)])
    assert "out of time" not in (out / "headdim_64.md").read_text()
    assert "out of time" not in (out / "layouts.md").read_text()
    assert "not measured, out of time (--budget-s): head_dim 16" in (out / "headdim_128.md").read_text()
    assert not (out / "headdim_128.csv").exists()


@pytest.mark.interpreter
def test_a_failing_implementation_is_reported_not_fatal(monkeypatch):
    real = bm.build_impl

    def build_impl(bench, name, *args):
        if name == "broken":
            def boom(*a, **k):
                raise RuntimeError("no kernel for this shape\nmore")
            return bm.Impl("broken", boom, None, "autograd fwd+bwd - fwd")
        return real(bench, name, *args)

    monkeypatch.setattr(bm, "build_impl", build_impl)
    rows, skipped, _ = bm.measure_config(_bench(), ["triton_v4", "broken", "triton_v2"], 1, 4, 1, 16)
    assert [r["impl"] for r in rows] == ["triton_v4", "triton_v2"]
    assert skipped == {"broken": "failed at D=16 (half, rotary_dim=16): RuntimeError: no kernel for this shape"}


def test_tune_configs_follow_the_entry():
    """--tune times the Triton entries over tiles x warps and cutedsl over CTA threads x rows per
    thread; an entry without a launch configuration is not tuned."""
    from rope.triton_rope import LaunchConfig

    assert bench_rope.tune_configs(rope.build("torch", 64, 16)) == []
    triton_cfgs = bench_rope.tune_configs(rope.build("triton_v4", 64, 16))
    assert len(triton_cfgs) == 9 and all(isinstance(c, LaunchConfig) for c in triton_cfgs)
    pytest.importorskip("cutlass", reason="nvidia-cutlass-dsl not installed (pip install -e '.[cutedsl]')")
    from rope.cutedsl import CuteLaunchConfig

    cute_cfgs = bench_rope.tune_configs(rope.build("cutedsl", 64, 16))
    assert len(cute_cfgs) == 12 and all(isinstance(c, CuteLaunchConfig) for c in cute_cfgs)
    assert {(c.threads, c.rows_per_thread) for c in cute_cfgs} >= {(256, 1), (128, 4), (1024, 2)}


@pytest.mark.interpreter
def test_placements_time_each_input_set_and_keep_the_median(monkeypatch):
    """--placements N: every implementation is timed on N distinct input sets (fresh allocations), the median time
    is reported and the slowest set's % of copy bandwidth kept beside it."""
    seen, times = [], iter([1.0, 4.0, 2.0, 8.0, 3.0, 2.0])  # fwd ms of the three sets: 1, 2, 3; bwd: 4, 8, 2

    def time_pair(bench, impl, q, k, gq, gk, positions=None):
        seen.append((q.data_ptr(), gq.data_ptr()))
        return {"fwd_ms": next(times), "bwd_ms": next(times), "fwd_host_ms": 0.1, "bwd_host_ms": 0.1}

    monkeypatch.setattr(bm, "time_pair", time_pair)
    rows, skipped, _ = bm.measure_config(_bench(placements=3), ["triton_v4"], 1, 4, 1, 16)
    assert not skipped and len(set(seen)) == 3  # three different input sets
    (r,) = rows
    nbytes = 2 * 2 * 4 * 16 * 2  # q and k, read and written, bf16
    assert r["fwd_ms"] == 2.0 and r["bwd_ms"] == 4.0
    assert r["fwd_pct_copy_lowest"] == pytest.approx(100 * nbytes / 3.0e-3 / 1e9 / 10.0)
    assert r["bwd_pct_copy_lowest"] == pytest.approx(100 * nbytes / 8.0e-3 / 1e9 / 10.0)
    assert "fwd_ms_highest" not in r


def test_placements_must_be_positive():
    with pytest.raises(SystemExit):
        bench_rope.parse_args(["--head-dims", "--placements", "0"])


def test_placements_are_named_only_in_the_modes_that_use_them():
    """The head-dim and layout tables say they are medians over input sets; the packed and overhead modes, timed on
    one set whatever --placements says, must not."""
    info = {"device_name": "GPU", "variant": "partial", "copy_bw": 3000.0, "reps": 15, "placements": 3}
    said = "timed on 3 input sets"
    assert said in bm.headdim_markdown(bm.Result("head_dims", [], []), ["triton_v4"], 32 * M, 2048, 16, info)
    assert said in bm.layouts_markdown(bm.Result("layouts", [], []), ["triton_v4"], 32 * M, 2048, 16, info)
    res = bm.Result("packed", [], [])
    assert said not in bm.packed_markdown(res, ["triton_v4"], 16, 128, 4096, info)
    res = bm.Result("overhead", [], [])
    assert said not in bm.overhead_markdown(res, ["triton_v4"], 200, 7, info)


class _FakeCuda:
    """Stands in for the CUDA calls of :class:`scripts.benchlib.Timer` and logs what the GPU would run, in order."""

    def __init__(self, log: list[str]) -> None:
        self.log = log

    def event(self, enable_timing: bool = False):
        log = self.log

        class Event:
            def record(self) -> None:
                log.append("event")

            def elapsed_time(self, end) -> float:
                return 1.0

        return Event()


class _FlushBuffer:
    """Logs what the timer does to its flush buffer."""

    def __init__(self, log: list[str]) -> None:
        self.log = log

    def zero_(self):
        self.log.append("zero")
        return self

    def view(self, dtype):
        return self

    def amax(self):
        self.log.append("read")


@pytest.mark.parametrize("flush, before", [("zero", ["zero"]), ("read", ["read"]), ("steady", ["call"])])
def test_timer_flush_runs_before_each_timed_call(monkeypatch, flush, before):
    """Each timed call is preceded by its flush and then the GPU sleep: zeroing or reading the buffer, or (steady) the
    same call untimed; nothing else runs between the start and end events but the call."""
    from scripts import benchlib

    log: list[str] = []
    fake = _FakeCuda(log)
    monkeypatch.setattr(torch.cuda, "Event", fake.event)
    monkeypatch.setattr(torch.cuda, "_sleep", lambda cycles: log.append("sleep"))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    timer = benchlib.Timer(3, flush, device="cpu")
    assert timer.flush.numel() == (0 if flush == "steady" else 256 * M)  # steady needs no buffer
    timer.flush = _FlushBuffer(log)
    gpu, _host = timer._pass(lambda: log.append("call"), 3)
    assert gpu == 1.0
    assert log == (before + ["sleep", "event", "call", "event"]) * 3


def test_timer_rejects_an_unknown_flush():
    from scripts import benchlib

    with pytest.raises(ValueError, match="flush must be one of zero, read, steady"):
        benchlib.Timer(3, "clear", device="cpu")


def test_steady_flush_needs_calls_several_times_the_l2():
    """--flush steady times a call after the same call: inputs small enough to stay in the L2 would be found there,
    so the arguments are refused (one line naming the option) unless every timed call moves 256 MB."""
    a = bench_rope.parse_args(["--head-dims", "--layouts", "--packed", "--flush", "steady"])  # 32M, 64K tokens: fine
    assert a.flush == "steady"
    assert bench_rope.parse_args(["--head-dims", "--flush", "read", "--elements", "4K"]).flush == "read"
    for bad, says in ((["--flush", "steady"], "default run"),
                      (["--head-dims", "--flush", "steady", "--elements", "16M"], "--elements of at least 32M"),
                      (["--layouts", "--flush", "steady", "--elements", "32M,8M"], "got 8M"),
                      (["--packed", "--flush", "steady", "--packed-tokens", "8K"], "--packed-tokens of at least 16K"),
                      (["--packed", "--flush", "steady", "--heads", "8", "--packed-tokens", "16K"], "at least 32K")):
        assert says in bench_rope.steady_flush_problem(_args(bad))
        with pytest.raises(SystemExit):
            bench_rope.parse_args(bad)


def _args(argv: list[str]):
    """parse_args's namespace without its checks of --flush steady."""
    import unittest.mock

    with unittest.mock.patch.object(bench_rope, "steady_flush_problem", lambda args: None):
        return bench_rope.parse_args(argv)


def test_headers_say_how_the_l2_was_flushed():
    info = {"device_name": "GPU", "variant": "partial", "copy_bw": 3000.0, "reps": 15, "flush": "steady"}
    text = bm.headdim_markdown(bm.Result("head_dims", [], []), ["triton_v4"], 32 * M, 2048, 16, info)
    assert "`--flush steady`: the same call run untimed just before each timed one" in text
    assert "`--flush zero`" in bm.headdim_markdown(bm.Result("head_dims", [], []), ["triton_v4"], 32 * M, 2048, 16,
                                                   {**info, "flush": "zero"})


def test_headers_name_the_launch_rules(monkeypatch):
    """The tables say which GPU's launch rules the Triton entries took (the same head dim launches another tiling on
    an H200), and the run reads them from the device."""
    info = {"device_name": "GPU", "variant": "full", "copy_bw": 4200.0, "reps": 15, "flush": "zero",
            "launch_rules": "h200"}
    text = bm.headdim_markdown(bm.Result("head_dims", [], []), ["triton_v4"], 32 * M, 2048, 16, info)
    assert "Triton launch rules: h200's" in text
    assert bench_rope.launch_rules(torch.device("cpu")) == "h100"
    monkeypatch.setattr(triton_rope, "device_profile", lambda index: f"rules of {index}")
    assert bench_rope.launch_rules(torch.device("cuda", 1)) == "rules of 1"


def test_steady_flush_asks_for_five_times_a_larger_l2():
    """On a GPU whose L2 is larger than an H100's 50 MB, --flush steady needs calls of five times that L2."""
    assert bench_rope.steady_min_bytes(50 * M) == bench_rope.STEADY_MIN_BYTES
    assert bench_rope.steady_min_bytes(128 * M) == 640 * M
    args = bench_rope.parse_args(["--head-dims", "--packed", "--flush", "steady", "--elements", "64M"])
    assert bench_rope.steady_flush_problem(args, bench_rope.steady_min_bytes(50 * M)) is None
    problem = bench_rope.steady_flush_problem(args, bench_rope.steady_min_bytes(128 * M))
    assert problem == "--flush steady needs --elements of at least 80M a tensor (calls of 640 MB), got 64M"
    args = bench_rope.parse_args(["--packed", "--flush", "steady"])  # 64K tokens x 16 heads x 128: 1 GiB calls
    assert bench_rope.steady_flush_problem(args, bench_rope.steady_min_bytes(256 * M)) == (
        "--flush steady needs --packed-tokens of at least 80K at --heads 16 (calls of 1280 MB), got 64K")


def test_use_device_makes_the_timed_gpu_current(monkeypatch):
    """CUDA events, the GPU sleep and synchronize act on the current device: --device cuda:1 must make it current
    (else the events time GPU 0's idle stream), and the timer's flush buffer must be on it."""
    from scripts import benchlib

    made = FakeGpus(monkeypatch).set_calls
    assert benchlib.use_device(torch.device("cuda:1"), "x") == torch.device("cuda", 1)
    assert made == [torch.device("cuda", 1)]
    assert benchlib.use_device(torch.device("cpu"), "x") == torch.device("cpu") and len(made) == 1
    assert benchlib.use_device(torch.device("cuda"), "x") == torch.device("cuda", 1) and len(made) == 1  # current
    timers = []
    monkeypatch.setattr(benchlib, "Timer", lambda reps, flush, device: timers.append(device))
    benchlib.make_timer(3, torch.device("cuda", 1), "zero")
    assert timers == [torch.device("cuda", 1)]


@pytest.mark.parametrize("script", ["bench_rope", "bench_step"])
def test_a_gpu_that_is_not_here_is_one_line_before_any_work(monkeypatch, script):
    """--device is parsed as cpu or cuda[:N] (one line from argparse), and a GPU index past the machine's count
    or a CUDA device on a machine without one stops the run with one line naming --device, before it measures."""
    from scripts import bench_step

    main = {"bench_rope": lambda a: bench_rope.main(["--head-dims", *a]), "bench_step": bench_step.main}[script]
    with pytest.raises(SystemExit) as e:
        main(["--device", "gpu0"])
    assert e.value.code == 2  # argparse's usage error
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit, match=r"--device cuda:1: no CUDA GPU here \(--device cpu is a dry run\)$"):
        main(["--device", "cuda:1"])
    made = FakeGpus(monkeypatch, count=1).set_calls
    with pytest.raises(SystemExit, match=r"--device cuda:1: this machine has 1 CUDA device\(s\), cuda:0 to cuda:0$"):
        main(["--device", "cuda:1"])
    assert made == []
