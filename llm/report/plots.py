"""The report's figures: val loss curves, speed bars and the paired Δ val loss against the reference.

Figures are drawn on Agg canvases without pyplot (no global backend, no GUI, safe in a Hydra
callback) and saved through :func:`llm.fileio.atomic_open`, so a reader never sees half a PNG.
"""

from __future__ import annotations

import math
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

    cmap = colormaps["tab10"] if n <= 10 else colormaps["tab20"]  # more than 10: no two share a colour up to 20
    return [cmap(i % cmap.N) for i in range(n)]


def _group_colors(groups: Sequence[Group]) -> dict[str, Any]:
    """One colour per implementation, by its place in the report's groups, the same in every figure (the paired Δ
    plot, which leaves out the reference, would otherwise shift every colour by one against the loss curves)."""
    return dict(zip((g.label for g in groups), _colors(len(groups)), strict=True))


#: Longest label drawn in a legend or under a bar; longer ones keep their start and end around an ellipsis (a
#: label of 70 characters squeezed the axes of the speed plot to a sliver and covered the loss curves).
MAX_LABEL = 36


def short_label(label: str, width: int = MAX_LABEL) -> str:
    """``label`` cut to ``width`` characters in the middle (``torch_experimental_…_v12345``); shorter ones as they
    are. comparison.md names every implementation in full."""
    if len(label) <= width:
        return label
    head = (width - 1) // 2 + (width - 1) % 2
    return f"{label[:head]}…{label[len(label) - (width - 1 - head):]}"


def _per_step(g: Group) -> dict[int, list[tuple[float, float | None]]]:
    """Step -> one ``(val loss, training time)`` per seed (its runs averaged, as :meth:`Group.per_seed` averages their
    final losses) and one per run without a seed. Why per seed: a seed run in two sweeps compared together is one
    sample in every table, and a mean over runs would weigh it twice, so the curve's last point would not be the
    Summary's mean val loss (nor its n the legend's)."""
    by_seed: dict[object, dict[int, list[tuple[float, float | None]]]] = {}
    for i, r in enumerate(g.runs):
        key: object = ("run", i) if r.seed is None else r.seed
        for step, loss, t in r.val_curve():
            by_seed.setdefault(key, {}).setdefault(step, []).append((loss, t))
    per_step: dict[int, list[tuple[float, float | None]]] = {}
    for curve in by_seed.values():
        for step, values in curve.items():
            finite = [v for v, _ in values if math.isfinite(v)]  # a seed's nan/inf run is left out, as per_seed does
            times = [t for _, t in values if t is not None]
            per_step.setdefault(step, []).append((statistics.fmean(finite) if finite else values[0][0],
                                                  statistics.fmean(times) if times else None))
    return per_step


def _draw_group_curves(ax_step: Any, ax_time: Any, g: Group, color: Any) -> bool:
    """Mean val loss over seeds with a min-max band, against step and against training time.

    A nan/inf eval (a run that diverged) is left out of the mean and the band at its step, as the statistics leave
    it out, and marked with an ``x`` on the curve; the legend says how many seeds it hit and from which step. Taken
    into the mean, one such seed would erase the group's whole curve from the figure (and ``min``/``max`` over a nan
    depend on the order of the seeds)."""
    raw = _per_step(g)
    per_step = {s: [v for v in vals if math.isfinite(v[0])] for s, vals in raw.items()}
    bad = {s: len(raw[s]) - len(vals) for s, vals in per_step.items() if len(vals) < len(raw[s])}
    per_step = {s: vals for s, vals in per_step.items() if vals}
    if not per_step:
        return False
    steps = sorted(per_step)
    mean = [statistics.fmean(v[0] for v in per_step[s]) for s in steps]
    lo = [min(v[0] for v in per_step[s]) for s in steps]
    hi = [max(v[0] for v in per_step[s]) for s in steps]
    label = f"{short_label(g.label)} (n={g.n})"
    if bad:
        label += f"; {max(bad.values())} seed(s) nan/inf from step {min(bad)}: x, left out"
    ax_step.plot(steps, mean, color=color, label=label)
    ax_step.fill_between(steps, lo, hi, color=color, alpha=0.2, linewidth=0)
    marked = [(s, m) for s, m in zip(steps, mean, strict=True) if s in bad]
    if marked:
        ax_step.plot([s for s, _ in marked], [m for _, m in marked], linestyle="none", marker="x", markersize=9,
                     markeredgewidth=2, color=color)
    timed = [(i, statistics.fmean(t for _, t in per_step[s] if t is not None)) for i, s in enumerate(steps)
             if any(t is not None for _, t in per_step[s])]
    if timed:
        ts = [t for _, t in timed]
        ax_time.plot(ts, [mean[i] for i, _ in timed], color=color, label=short_label(g.label))
        ax_time.fill_between(ts, [lo[i] for i, _ in timed], [hi[i] for i, _ in timed],
                             color=color, alpha=0.2, linewidth=0)
    return True


def plot_loss_curves(path: Path, groups: Sequence[Group]) -> None:
    """Val loss vs step and vs training time: mean over seeds, min-max band."""
    fig = _new_figure()
    ax_step, ax_time = fig.subplots(1, 2)
    colors = _group_colors(groups)
    drawn = [_draw_group_curves(ax_step, ax_time, g, colors[g.label]) for g in groups]
    ax_step.set(xlabel="step", ylabel="val loss (nats)", title="val loss vs step (mean over seeds, band min-max)")
    ax_time.set(xlabel="training time (s, mean over seeds)", ylabel="val loss (nats)",
                title="val loss vs training time")
    for ax in (ax_step, ax_time):
        ax.grid(alpha=0.3)
        if not any(drawn):
            ax.text(0.5, 0.5, "no val lines in metrics.jsonl", ha="center", va="center", transform=ax.transAxes)
    if any(drawn):
        ax_step.legend(fontsize=8)
        if ax_time.get_legend_handles_labels()[0]:
            ax_time.legend(fontsize=8)
    _save(fig, path)


def plot_speed(path: Path, groups: Sequence[Group]) -> None:
    """Bars of tokens/s and training time per implementation, error bars = sample std over seeds.

    An implementation without the metric gets no bar and ``n/a`` (a bar of 0 would read as 0 tokens/s); one seed
    gets no error bar (its std is undefined, not 0) and every label says its n."""
    fig = _new_figure()
    axes = fig.subplots(1, 2)
    shown = [g for g in groups if g.n]
    colors = _group_colors(groups)
    x = list(range(len(shown)))
    for ax, metric, title, unit in (
            (axes[0], "tokens_per_s", "tokens/s (higher is better)", "tokens/s"),
            (axes[1], "train_time_s", "training time (lower is better)", "training time (s)")):
        means = [g.mean(metric) for g in shown]
        stds = [g.std(metric) for g in shown]
        ax.bar(x, [0.0 if m is None else m for m in means], color=[colors[g.label] for g in shown])
        err = [(i, m, s) for i, (m, s) in enumerate(zip(means, stds, strict=True)) if m is not None and s is not None]
        if err:
            ax.errorbar([i for i, _, _ in err], [m for _, m, _ in err], yerr=[s for _, _, s in err], fmt="none",
                        ecolor="black", capsize=4)
        for i, m in enumerate(means):
            if m is None:
                ax.text(i, 0.0, "n/a", ha="center", va="bottom", fontsize=8)
        ax.set_xticks(x, [f"{short_label(g.label)} (n={g.n})" for g in shown], rotation=20, ha="right",
                      fontsize=8)
        ax.set_ylabel(f"{unit}, mean over seeds")
        ax.set_title(title)
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle("error bars: sample std over seeds (none with one seed)", fontsize=9)
    _save(fig, path, rect=(0, 0, 1, 0.95))


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
    colors = _group_colors(report.groups)
    for gc in paired:
        color = colors[gc.group.label]
        curve = paired_delta_curve(gc)
        if not curve:
            continue
        drawn += 1
        steps = [c[0] for c in curve]
        ax.plot(steps, [c[2] for c in curve], color=color, marker=".",
                label=f"{short_label(gc.group.label)} (n={gc.loss.n})")
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
