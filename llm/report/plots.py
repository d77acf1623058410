"""The report's figures: val loss curves, speed bars and the paired Δ val loss against the reference.

Figures are drawn on Agg canvases without pyplot (no global backend, no GUI, safe in a Hydra
callback) and saved through :func:`llm.fileio.atomic_open`, so a reader never sees half a PNG.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from llm.fileio import atomic_open
from llm.report.analysis import Group, paired_delta_curve
from llm.report.compare import Report


def _new_figure(figsize: tuple[float, float] = (10, 4)) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize, dpi=100)
    FigureCanvasAgg(fig)  # Agg, without touching pyplot's global backend
    return fig


def _save(fig: Any, path: Path, rect: tuple[float, float, float, float] | None = None) -> None:
    """Lay out (within ``rect``, figure fractions: room left for a suptitle that tight_layout misplaces over tall
    grids) and write the PNG."""
    fig.tight_layout(rect=rect)
    with atomic_open(path, "wb") as f:
        fig.savefig(f, format="png")


def _colors(n: int) -> list:
    from matplotlib import colormaps

    cmap = colormaps["tab10"]
    return [cmap(i % 10) for i in range(n)]


def _per_step(g: Group) -> dict[int, list[tuple[float, float | None]]]:
    per_step: dict[int, list[tuple[float, float | None]]] = {}
    for r in g.runs:
        for step, loss, t in r.val_curve():
            per_step.setdefault(step, []).append((loss, t))
    return per_step


def _draw_group_curves(ax_step: Any, ax_time: Any, g: Group, color: Any) -> bool:
    """Mean val loss over seeds with a min-max band, against step and against training time."""
    per_step = _per_step(g)
    if not per_step:
        return False
    steps = sorted(per_step)
    mean = [statistics.fmean(v[0] for v in per_step[s]) for s in steps]
    lo = [min(v[0] for v in per_step[s]) for s in steps]
    hi = [max(v[0] for v in per_step[s]) for s in steps]
    ax_step.plot(steps, mean, color=color, label=f"{g.label} (n={g.n})")
    ax_step.fill_between(steps, lo, hi, color=color, alpha=0.2, linewidth=0)
    timed = [(i, statistics.fmean(t for _, t in per_step[s] if t is not None)) for i, s in enumerate(steps)
             if any(t is not None for _, t in per_step[s])]
    if timed:
        ts = [t for _, t in timed]
        ax_time.plot(ts, [mean[i] for i, _ in timed], color=color, label=g.label)
        ax_time.fill_between(ts, [lo[i] for i, _ in timed], [hi[i] for i, _ in timed],
                             color=color, alpha=0.2, linewidth=0)
    return True


def plot_loss_curves(path: Path, groups: Sequence[Group]) -> None:
    """Val loss vs step and vs training time: mean over seeds, min-max band."""
    fig = _new_figure()
    ax_step, ax_time = fig.subplots(1, 2)
    drawn = [_draw_group_curves(ax_step, ax_time, g, c) for g, c in zip(groups, _colors(len(groups)), strict=True)]
    ax_step.set(xlabel="step", ylabel="val loss", title="val loss vs step")
    ax_time.set(xlabel="training time (s, mean over seeds)", ylabel="val loss", title="val loss vs training time")
    for ax in (ax_step, ax_time):
        ax.grid(alpha=0.3)
        if not any(drawn):
            ax.text(0.5, 0.5, "no val lines in metrics.jsonl", ha="center", va="center", transform=ax.transAxes)
    if any(drawn):
        ax_step.legend(fontsize=8)
    _save(fig, path)


def plot_speed(path: Path, groups: Sequence[Group]) -> None:
    """Bars of tokens/s and training time per implementation, error bars = sample std over seeds."""
    fig = _new_figure()
    axes = fig.subplots(1, 2)
    shown = [g for g in groups if g.n]
    colors = _colors(len(groups))[: len(shown)]
    x = list(range(len(shown)))
    for ax, metric, title in ((axes[0], "tokens_per_s", "tokens/s (higher is better)"),
                              (axes[1], "train_time_s", "training time (s, lower is better)")):
        ax.bar(x, [g.mean(metric) or 0.0 for g in shown], yerr=[g.std(metric) or 0.0 for g in shown],
               capsize=4, color=colors)
        ax.set_xticks(x, [g.label for g in shown], rotation=20, ha="right", fontsize=8)
        ax.set_title(title)
        ax.grid(axis="y", alpha=0.3)
    _save(fig, path)


def plot_paired_delta(path: Path, report: Report) -> None:
    """Δ val loss (impl − reference, paired by seed) against step: mean line, 95% CI band, 0 and ±ε lines.

    Only paired comparisons are drawn (an unpaired one has no per-seed Δ); the band is missing at
    steps where a single seed pair has an eval.
    """
    fig = _new_figure((8, 4.5))
    ax = fig.subplots()
    ax.axhline(0.0, color="black", linewidth=1)
    for y in (report.margin, -report.margin):
        ax.axhline(y, color="gray", linestyle="--", linewidth=1)
    drawn = 0
    paired = [gc for gc in report.comparisons if gc.seeds]
    for gc, color in zip(paired, _colors(len(paired)), strict=True):
        curve = paired_delta_curve(gc)
        if not curve:
            continue
        drawn += 1
        steps = [c[0] for c in curve]
        ax.plot(steps, [c[2] for c in curve], color=color, marker=".", label=f"{gc.group.label} (n={gc.loss.n})")
        band = [c for c in curve if c[3] is not None]
        if band:
            ax.fill_between([c[0] for c in band], [c[3] for c in band], [c[4] for c in band],
                            color=color, alpha=0.2, linewidth=0)
    ref = report.reference.label if report.reference is not None else "no reference"
    ax.set(xlabel="step", ylabel="Δ val loss (nats)", title=f"val loss − {ref} (same seed), 95% CI; ±ε dashed")
    ax.grid(alpha=0.3)
    if drawn:
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "no paired comparison (no reference or no matching seeds)", ha="center", va="center",
                transform=ax.transAxes)
    _save(fig, path)
