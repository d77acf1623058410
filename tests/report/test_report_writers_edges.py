"""The report writers on the edge cases a real sweep produces: a diverged seed, one seed, long implementation names,
many implementations, runs allowed to differ in another key. Run dirs are written, never trained."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest
import yaml
from matplotlib.container import ErrorbarContainer

from llm.report import build_report
from llm.report import plots as plots_mod
from llm.report.markdown import render_markdown
from llm.report.tables import write_csv

from .synthetic import SEED_LOSS, planted, reference, write_run, write_sweep

REF = ("torch", "float32")
V4 = ("triton_v4", "float32")
LONG = "torch_experimental_rotary_kernel_with_a_very_long_descriptive_name_v12345"


def _diverged_sweep(root: Path, diverged: str = "triton_v4") -> Path:
    """torch and triton_v4 on seeds 0-4, triton_v4 equal to torch but for seed 1 of ``diverged``, whose final eval
    (step 100) is nan: a run that diverged at its last eval and still completed."""
    root.mkdir(parents=True)
    job = 0
    for rope in ("torch", "triton_v4"):
        for seed, (loss, acc) in (reference() if rope == "torch" else planted(0.0)).items():
            if rope == diverged and seed == 1:
                loss, curve = math.nan, {50: SEED_LOSS[seed] + 0.5, 100: math.nan}
            else:
                curve = {50: loss + 0.5, 100: loss}
            write_run(root / f"{job}_{rope}_s{seed}", rope, seed, loss, acc, curve=curve)
            job += 1
    return root


def _figures(monkeypatch) -> list:
    """The figures the plot functions save, kept for inspection."""
    saved: list = []
    real = plots_mod._save

    def keep(fig, path, rect=None):
        saved.append(fig)
        real(fig, path, rect)

    monkeypatch.setattr(plots_mod, "_save", keep)
    return saved


def test_a_diverged_seed_does_not_erase_its_implementations_curve(tmp_path: Path, monkeypatch):
    report = build_report([_diverged_sweep(tmp_path / "s")])
    figs = _figures(monkeypatch)
    plots_mod.plot_loss_curves(tmp_path / "curves.png", report.groups)
    ax_step = figs[0].axes[0]
    v4 = next(line for line in ax_step.lines if line.get_label().startswith("triton_v4"))
    ys = list(v4.get_ydata())
    assert len(ys) == 2 and all(math.isfinite(y) for y in ys)  # the mean over the 4 finite seeds at step 100
    finite = [SEED_LOSS[s] for s in (0, 2, 3, 4)]
    assert ys[1] == pytest.approx(sum(finite) / 4, abs=0.01)
    assert "1 seed(s) nan/inf from step 100" in v4.get_label()
    for band in ax_step.collections:  # the min-max bands: over the finite seeds, whatever order they came in
        assert all(math.isfinite(v) for path in band.get_paths() for v in path.vertices.ravel())


def test_an_implementation_has_one_colour_in_every_figure(tmp_path: Path, monkeypatch):
    sweep = write_sweep(tmp_path / "s", {REF: reference(), V4: planted(0.02), ("none", None): planted(0.05)})
    report = build_report([sweep])
    figs = _figures(monkeypatch)
    plots_mod.plot_loss_curves(tmp_path / "c.png", report.groups)
    plots_mod.plot_paired_delta(tmp_path / "d.png", report)
    curves, delta = figs[0].axes[0], figs[1].axes[0]
    for gc in report.comparisons:
        label = gc.group.label
        a = next(line for line in curves.lines if line.get_label().startswith(label))
        b = next(line for line in delta.lines if line.get_label().startswith(label))
        assert a.get_color() == b.get_color(), label


def test_long_implementation_names_are_shortened_in_the_plots(tmp_path: Path, monkeypatch):
    root = tmp_path / "s"
    for seed in range(3):
        write_run(root / f"{seed}_torch_s{seed}", "torch", seed, SEED_LOSS[seed])
        write_run(root / f"{seed + 3}_long_s{seed}", LONG, seed, SEED_LOSS[seed] + 0.001)
    report = build_report([root])
    assert any(LONG in g.label for g in report.groups)
    figs = _figures(monkeypatch)
    plots_mod.plot_loss_curves(tmp_path / "c.png", report.groups)
    plots_mod.plot_speed(tmp_path / "sp.png", report.groups)
    legend = [t.get_text() for t in figs[0].axes[0].get_legend().get_texts()]
    ticks = [t.get_text() for t in figs[1].axes[0].get_xticklabels()]
    for text in [*legend, *ticks]:
        assert LONG not in text and len(text) <= 50, text
    assert any("…" in t for t in ticks) and all(t.endswith("(n=3)") for t in ticks)
    assert LONG in render_markdown(report)  # the Markdown keeps the full name


def _speed_figure(tmp_path: Path, monkeypatch, seeds: tuple) -> object:
    sweep = write_sweep(tmp_path / "s", {REF: reference(seeds=seeds), V4: planted(0.0, seeds=seeds)})
    figs = _figures(monkeypatch)
    plots_mod.plot_speed(tmp_path / "sp.png", build_report([sweep]).groups)
    return figs[0]


def test_speed_plot_labels_its_axes_and_error_bars(tmp_path: Path, monkeypatch):
    fig = _speed_figure(tmp_path, monkeypatch, (0, 1, 2))
    for ax in fig.axes:
        assert "mean over seeds" in ax.get_ylabel()
        assert [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
    assert "sample std" in fig._suptitle.get_text()


def test_speed_plot_draws_no_error_bar_for_one_seed(tmp_path: Path, monkeypatch):
    fig = _speed_figure(tmp_path, monkeypatch, (0,))
    for ax in fig.axes:  # a std of one seed is undefined: a bar of ±0 would read as no spread at all
        assert not [c for c in ax.containers if isinstance(c, ErrorbarContainer)]


def test_per_seed_table_says_nan_for_a_diverged_run(tmp_path: Path):
    md = render_markdown(build_report([_diverged_sweep(tmp_path / "s")]))
    per_seed = md[md.index("## Per-seed runs"):]
    row = next(line for line in per_seed.splitlines() if line.startswith("| triton_v4") and "| 1 |" in line)
    cells = [c.strip() for c in row.split("|")]
    assert cells[6] == "nan" and "n/a" not in cells[6:9], row  # Val Loss; n/a would read as never logged


def test_verdict_says_the_implementation_diverged_on_a_seed(tmp_path: Path):
    report = build_report([_diverged_sweep(tmp_path / "s")])
    gc = report.comparisons[0]
    assert gc.loss.verdict == "equivalent" and gc.loss.n == 4
    md = render_markdown(report)
    line = next(line for line in md.splitlines() if line.startswith("- triton_v4"))
    assert "**but seed(s) 1 of triton_v4 (partial, float32) ended with a nan/inf val loss" in line
    assert "1 of its 5 run(s)" in line and "covers only its finite runs" in line
    table = md[md.index("**Val loss** (ε"):md.index("**Val acc** (ε")]
    row = next(r for r in table.splitlines() if r.startswith("| triton_v4"))
    assert row.rstrip(" |").endswith("equivalent within ±0.01 nats (finite runs only: seed(s) 1 diverged)")


def test_a_diverged_reference_seed_does_not_blame_the_implementation(tmp_path: Path):
    md = render_markdown(build_report([_diverged_sweep(tmp_path / "s", diverged="torch")]))
    line = next(line for line in md.splitlines() if line.startswith("- triton_v4"))
    assert "seed(s) 1 of torch (partial, float32)" in line and "**but" not in line
    assert "finite runs only" not in md


def test_csv_gives_each_metrics_own_n(tmp_path: Path):
    report = build_report([_diverged_sweep(tmp_path / "s")])
    write_csv(tmp_path / "c.csv", report)
    with (tmp_path / "c.csv").open() as f:
        rows = {r["implementation"]: r for r in csv.DictReader(f)}
    v4 = rows["triton_v4 (partial, float32)"]
    assert v4["n"] == "5" and v4["val_loss_n"] == "4" and v4["val_acc_n"] == "5" and v4["val_ppl_n"] == "4"
    assert rows["torch (partial, float32)"]["val_loss_n"] == "5"


def test_mixed_runs_are_named_beside_the_verdicts(tmp_path: Path):
    sweep = write_sweep(tmp_path / "s", {REF: reference(seeds=(0, 1, 2)), V4: planted(0.0, seeds=(0, 1, 2))})
    for run in sweep.glob("*_triton_v4_*"):
        for path in (run / "config.yaml", run / ".hydra" / "config.yaml"):
            cfg = yaml.safe_load(path.read_text())
            cfg["train"]["max_steps"] = 200
            path.write_text(yaml.safe_dump(cfg))
    md = render_markdown(build_report([sweep], allow_mixed=True))
    verdicts = md[:md.index("Common config:")]
    assert "**These runs also differ in `train.max_steps`**" in verdicts
    same = write_sweep(tmp_path / "t", {REF: reference(seeds=(0, 1, 2)), V4: planted(0.0, seeds=(0, 1, 2))})
    assert "These runs also differ" not in render_markdown(build_report([same], allow_mixed=True))


def test_an_implementation_that_diverged_on_a_seed_is_not_ranked_best(tmp_path: Path):
    """triton_v4 lower than torch on its four finite seeds, nan on seed 1: its mean over those four headed the
    summary ("best first") though it diverged; it now comes after every implementation without a diverged seed."""
    root = tmp_path / "s"
    root.mkdir()
    job = 0
    for rope, values in (("torch", reference()), ("triton_v4", planted(-0.05))):
        for seed, (loss, acc) in values.items():
            if rope == "triton_v4" and seed == 1:
                loss = math.nan
            write_run(root / f"{job}_{rope}_s{seed}", rope, seed, loss, acc, curve={100: loss})
            job += 1
    report = build_report([root])
    assert [g.label for g in report.groups] == ["torch (partial, float32)", "triton_v4 (partial, float32)"]
    assert report.groups[1].mean("val_loss") < report.groups[0].mean("val_loss")  # what ranked it first


@pytest.mark.parametrize("delta", (0.0, 0.003))
def test_a_zero_width_interval_is_named_in_the_verdict(tmp_path: Path, delta: float):
    """Every seed with the same Δ (bit-equal training gives Δ = 0 on each): the verdict says the interval has zero
    width and that no seed-to-seed noise was measured; runs with ordinary spread read as before."""
    sweep = write_sweep(tmp_path / "s", {REF: reference(), V4: planted(delta, jitter=0.0)})
    md = render_markdown(build_report([sweep]))
    line = next(ln for ln in md.splitlines() if ln.startswith("- triton_v4"))
    assert "every seed gave the same Δ, so the interval has zero width and no seed-to-seed noise was measured" in line
    # and under the paired table (the val loss's here), where a row's p of 0 or 1 is read
    assert "Zero-width intervals (triton_v4 (partial, float32)): every seed gave the same Δ" in md
    noisy = write_sweep(tmp_path / "n", {REF: reference(), V4: planted(delta)})
    md = render_markdown(build_report([noisy]))
    line = next(ln for ln in md.splitlines() if ln.startswith("- triton_v4"))
    assert "zero width" not in line and "Zero-width" not in md


def test_a_seed_run_in_two_sweeps_is_one_sample_of_the_loss_curve(tmp_path: Path, monkeypatch):
    """More seeds later, with seed 1 run again as a check: the tables average its two runs into one sample, so the
    curve's last point is the Summary's mean val loss, not a mean over runs that weighs seed 1 twice."""
    first = write_sweep(tmp_path / "a", {REF: reference(seeds=(0, 1))})
    more = write_sweep(tmp_path / "b", {REF: {1: (SEED_LOSS[1] + 0.3, 0.4), 2: (SEED_LOSS[2], 0.4)}})
    report = build_report([first, more])
    group = report.groups[0]
    assert group.n == 3 and len(group.runs) == 4
    figs = _figures(monkeypatch)
    plots_mod.plot_loss_curves(tmp_path / "c.png", report.groups)
    line = next(line for line in figs[0].axes[0].lines if line.get_label().startswith("torch"))
    assert list(line.get_xdata()) == [50, 100]
    assert line.get_ydata()[-1] == pytest.approx(group.mean("val_loss"), abs=1e-12)
    assert line.get_ydata()[-1] == pytest.approx((SEED_LOSS[0] + SEED_LOSS[1] + 0.15 + SEED_LOSS[2]) / 3)


def test_the_csv_lists_a_seed_run_in_two_sweeps_once(tmp_path: Path):
    """``n`` counts a repeated seed once; the ``seeds`` column beside it must list it once too (``0 1 2``, not
    ``0 1 1 2`` beside n=3)."""
    first = write_sweep(tmp_path / "a", {REF: reference(seeds=(0, 1)), V4: planted(0.0, seeds=(0, 1))})
    more = write_sweep(tmp_path / "b", {REF: reference(seeds=(1, 2)), V4: planted(0.0, seeds=(1, 2))})
    report = build_report([first, more])
    write_csv(tmp_path / "c.csv", report)
    with (tmp_path / "c.csv").open() as f:
        rows = {r["implementation"]: r for r in csv.DictReader(f)}
    for row in rows.values():
        assert (row["n"], row["seeds"]) == ("3", "0 1 2"), row
