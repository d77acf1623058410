"""The length-generalization report's writers: ``length_report.md``, ``length_report.csv``, ``length_curves.png``
and ``position_loss.png`` from a :class:`~llm.report.length.LengthReport`.

:mod:`llm.report.length` reads the evaluations and computes every statistic; this module only formats and draws
them, and imports that one, so the numbers are built and tested without the writers. (That module names
:func:`write_length_report` too, importing it from here at its end, for the callers that import it there.)
"""

from __future__ import annotations

import csv
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from llm.fileio import atomic_open, write_files_whole, write_text_atomic
from llm.report.length import (
    CSV_COLUMNS,
    CSV_FILE,
    CURVES_FILE,
    DOCUMENTS_SUFFIX,
    EVAL_DIR,
    MD_FILE,
    NO_SCALING,
    POSITION_FILE,
    REFERENCE_VARIANT,
    SUMMARIZED,
    VS_NONE,
    VS_VARIANT,
    Cell,
    LengthReport,
    LengthResult,
    Targets,
    _exp,
    random_counterpart,
    reference_for,
)
from llm.report.markdown import fmt, md_table, seed_list, signed
from llm.report.plots import _colors, _new_figure, _save
from llm.report.runs import PathLike, as_float
from llm.report.stats import WELCH, Comparison


def _ppl_text(c: Cell | None, n: int | None = None) -> str:
    """``66.57 [61.19, 72.42]``, with ``(n=k)`` where fewer than the row's ``n`` seeds are in the cell."""
    if c is None:
        return "-"
    mean, lo, hi = c.ppl
    digits = 2 if mean < 1000 else 0
    ci = "(n=1)" if lo is None else f"[{fmt(lo, digits)}, {fmt(hi, digits)}]"
    return f"{fmt(mean, digits)} {ci}" + _fewer(c.n, n)


def _fewer(k: int, n: int | None) -> str:
    """`` (n=k)`` where a cell holds fewer seeds than its row's n column says (a seed not evaluated at that length,
    or a nan/inf value left out), so that column is never read as the cell's n; "" otherwise."""
    return f" (n={k})" if n is not None and 1 < k < n else ""


#: Metrics that are differences (signed in tables); the others are losses.
DIFFERENCES = ("gain_beyond_train", "degradation")


def _summary_text(c: Cell | None, metric: str, n: int | None = None) -> str:
    """``+0.1234 ± 0.0200 [+0.1000, +0.1468]``: mean ± the seeds' sd [95% CI of the mean], with ``(n=k)`` where fewer
    than the row's ``n`` seeds have a value; ``-`` if none."""
    s = None if c is None else c.summary(metric)
    if s is None or s.mean is None:
        return "-"
    num = signed if metric in DIFFERENCES else (lambda v: fmt(v, 4))
    sd = "" if s.sd is None else f" ± {fmt(s.sd, 4)}"
    ci = " (n=1)" if s.ci is None else f" [{num(s.ci[0])}, {num(s.ci[1])}]"
    return f"{num(s.mean)}{sd}{ci}{_fewer(s.n, n)}"


def _delta_text(d: Comparison | None, n: int | None = None) -> str:
    """``+0.0123 [lo, hi]``; ``(Welch, 3 vs 5 runs)`` unpaired; ``(2 of 3 seeds paired)`` where the pairing used fewer
    than the ``n`` seeds of the cell and its counterpart together (one side lacks some), so a Δ is never read as over
    all of either side's seeds."""
    if d is None:
        return "-"
    ci = "n=1" if d.ci is None else f"[{signed(d.ci[0])}, {signed(d.ci[1])}]"
    fewer = d.method != WELCH and n is not None and d.n < n
    return (f"{signed(d.delta)} {ci}" + (f" (Welch, {d.n} vs {d.n_ref} runs)" if d.method == WELCH else "")
            + (f" ({d.n} of {n} seeds paired)" if fewer else ""))


def _seeds(values: dict) -> str:
    return " ".join(str(s) for s in sorted(values, key=lambda s: (s is None, s)))


def _warnings(report: LengthReport) -> list[str]:
    """What makes numbers of the report not comparable: runs left out or averaged across configs, other budgets or
    reference lengths, one seed averaged."""
    out = list(report.notes)
    sets = report.target_sets
    if len(sets) > 1:
        out.append(f"**Note**: the evaluations were made on {len(sets)} different sets of targets "
                   f"({'; '.join(map(report.targets_text, sets))}): numbers on other windows (or another T or "
                   "baseline) differ by the windows, so each set is a row of its own (after the scaling) and a row of "
                   "plots of its own, and only evaluations on the same targets are averaged or compared (n/a where "
                   "a counterpart was evaluated only on others).")
    old = [r for r in report.results if r.lengths and "degradation" not in r.at(r.lengths[0])]
    if old:
        shown = ", ".join(f"`{r.path}`" for r in old[:3]) + (" ..." if len(old) > 3 else "")
        out.append(f"**Note**: {len(old)} evaluation(s) predate the sliding-window baseline (no degradation or gain; "
                   f"evaluate them again): {shown}")
    seen: dict[tuple, int] = {}
    for r in report.results:
        key = (r.variant, report.row_label(r.scaling, r.targets), r.seed)
        seen[key] = seen.get(key, 0) + 1
    dup = [f"{v} · {s} seed {seed}" for (v, s, seed), k in seen.items() if k > 1]
    if dup:
        out.append(f"**Note**: several evaluations of one seed were averaged: {'; '.join(dup)}.")
    return [line for w in out for line in (w, "")]


def _metric_table(report: LengthReport, metric: str, lengths: Sequence[int]) -> list[str]:
    rows = []
    for variant, scaling, targets in report.groups:
        cells = [report.cell(variant, scaling, L, targets) for L in lengths]
        n = max((c.n for c in cells if c is not None), default=0)
        rows.append([variant, report.row_label(scaling, targets), str(n),
                     *(_summary_text(c, metric, n) for c in cells)])
    return md_table(["Variant", "Scaling", "n", *map(str, lengths)], rows)


def _data_section(report: LengthReport) -> list[str]:
    """Per length: the targets every run was evaluated on (whole documents of the val split)."""
    rows = []
    several = len(report.target_sets) > 1
    for targets in report.target_sets:
        for L in report.lengths:
            r = next((r for r in report.results if r.targets == targets and r.at(L)), None)
            if r is None:
                continue
            m = r.at(L) or {}
            rows.append([*([report.targets_text(targets)] if several else []), str(L), fmt(m.get("val_tokens"), 0),
                         fmt(m.get("windows"), 0), fmt(m.get("documents"), 0), fmt(m.get("eligible_documents"), 0),
                         fmt(m.get("eligible_tokens"), 0)])
    skipped = sorted({(s.get("length"), s.get("reason")) for r in report.results for s in r.data.get("skipped") or []},
                     key=str)
    lines = ["## Evaluation data", "",
             "Windows of length L are whole val documents at least L tokens long (one window per document first, "
             "then further non-overlapping windows of long ones), the same targets for every run and scaling at a "
             "length and budget (`tokens`). Eligible: the val documents that long and the tokens their windows "
             "hold.", ""]
    lines += md_table([*(["Targets"] if several else []), "Length", "tokens", "windows", "documents",
                       "eligible documents", "eligible tokens"], rows)
    lines += [f"- skipped: {reason}" for _, reason in skipped]
    return [*lines, ""]


def length_markdown(report: LengthReport) -> str:
    lengths, beyond = report.lengths, report.beyond_lengths
    n_runs = len({r.path.parent.parent for r in report.results})
    baselines = {(b.get("window"), b.get("stride")) for r in report.results
                 if isinstance(b := r.data.get("baseline"), dict)}
    t = ", ".join(map(str, report.reference_lens)) or "n/a"
    scalings = list(dict.fromkeys(s for _, s, _ in report.groups))
    lines = [
        "# Length generalization",
        "",
        f"{len(report.runs)} run(s), {n_runs} evaluated ({len(report.results)} evaluation(s)); inputs: "
        + ", ".join(f"`{p}`" for p in report.inputs),
        "",
        f"- T (positions >= T are beyond the training length): {t}; training lengths (model.seq_len): "
        f"{', '.join(map(str, report.distinct('train_seq_len'))) or 'n/a'}",
        f"- target tokens per length (budget): {', '.join(map(str, report.distinct('tokens'))) or 'n/a'}",
        "- sliding-window baseline: " + ("; ".join(f"windows of {w} tokens, stride {s}" for w, s in sorted(baselines))
                                         or "n/a"),
        f"- scalings: {', '.join(scalings)}"
        + (" (`factor L/N`: the factor L/N at each length L, at least 1)" * any("(factor L/" in s for s in scalings)),
        "",
        *_warnings(report),
        "Cells: mean over seeds `± sd` (the seeds' standard deviation: the spread of single runs) `[lo, hi]` (the "
        "95% Student-t confidence interval of the mean over seeds: how well the mean is known). n = seeds (the "
        "row's most; `(n=k)`: a cell over fewer); `(n=1)`: one seed, no spread or CI. Losses in nats.",
        "",
        *_data_section(report),
        "## Degradation beyond T, by evaluation length",
        "",
        "Loss at positions >= T at length L minus the run's own sliding-window baseline on the same targets (the run "
        "as trained, each target predicted from its last T tokens). 0: length L costs nothing; the baseline is the "
        "same for every scaling of a run, so it removes the seed's level from comparisons.",
        "",
    ]
    lines += _metric_table(report, "degradation", beyond) if beyond else ["(no length beyond T was evaluated)"]
    lines += ["", "## Loss beyond T", "", "Mean loss at positions >= T of the windows of length L.", ""]
    lines += _metric_table(report, "loss_beyond_train", beyond) if beyond else ["(none)"]
    lines += ["", "## Gain over the sliding window", "",
              "Loss beyond T minus the same model's loss on the same targets from only the last T tokens (its own "
              "scaling, windows of T). Negative: the model uses context longer than T; positive: the longer "
              "context hurts it.", ""]
    lines += _metric_table(report, "gain_beyond_train", beyond) if beyond else ["(none)"]
    lines += ["", "## Whole-window perplexity", "",
              "exp(mean loss over every position of the window, inside and beyond T), the geometric mean over seeds "
              "[exp of the 95% CI of the mean loss]. It mixes what a scaling costs inside T with how it extends: read "
              "it beside the tables above. Lengths draw on different documents (the long ones are fewer).", ""]
    rows = []
    for v, s, t in report.groups:
        n = max((c.n for L in lengths if (c := report.cell(v, s, L, t))), default=0)
        rows.append([v, report.row_label(s, t), str(n), *(_ppl_text(report.cell(v, s, L, t), n) for L in lengths)])
    lines += md_table(["Variant", "Scaling", "n", *map(str, lengths)], rows)
    lines += _comparison_sections(report)
    missing = report.unevaluated
    if missing or report.unreadable:
        lines += ["", "## Not evaluated", ""]
        # a run whose only evaluations do not read has files there: it is said so, not that it has none
        lines += [f"- `{r.name}` ({r.label}, seed {r.seed}): {r.status}, "
                  + (f"no {EVAL_DIR}/*.json that reads (below)" if any((r.path / EVAL_DIR).glob("*.json"))
                     else f"no {EVAL_DIR}/*.json") for r in missing]
        lines += [f"- unreadable: `{u}`" for u in report.unreadable]
    lines += ["", "## Plots", "", f"![degradation, loss beyond T and perplexity against length]({CURVES_FILE})", "",
              f"![loss against position at the longest length]({POSITION_FILE})", ""]
    return "\n".join(lines)


def _comparison_table(report: LengthReport, rows: Sequence[tuple[str, str, Targets]], attr: str, metric: str,
                      lengths: Sequence[int]) -> list[str]:
    def text(v: str, s: str, t: Targets, L: int) -> str:
        c = report.cell(v, s, L, t)
        if c is not None and attr in c.other_targets and c.values.get(metric):
            return "n/a"
        if c is None:
            return _delta_text(None)
        return _delta_text(getattr(c, attr).get(metric), c.seeds_of.get(attr))

    return md_table(["Variant", "Scaling", *map(str, lengths)],
                    [[v, report.row_label(s, t), *(text(v, s, t, L) for L in lengths)] for v, s, t in rows])


def _has(report: LengthReport, v: str, s: str, t: Targets, attr: str) -> bool:
    """Whether the row has a comparison under ``attr`` at some length, or one that is n/a for its targets."""
    return any((c := report.cell(v, s, L, t)) is not None and (getattr(c, attr) or attr in c.other_targets)
               for L in report.lengths)


def _other_targets_note(report: LengthReport, rows: Sequence[tuple[str, str, Targets]], attr: str,
                        counterpart: str) -> list[str]:
    """The note under a comparison's tables: which rows are n/a, and on which targets their counterpart was."""
    parts = []
    for v, s, t in rows:
        others = {o for L in report.lengths if (c := report.cell(v, s, L, t)) for o in c.other_targets.get(attr, [])}
        if others:
            shown = "; ".join(report.targets_text(o) for o in sorted(others, key=Targets.sort_key))
            parts.append(f"{v} · {report.row_label(s, t)} (evaluated there only at {shown})")
    if not parts:
        return []
    return ["", f"n/a: no evaluation {counterpart} on the same targets at that length, so no Δ (one on other windows "
            f"would measure the windows): {'; '.join(parts)}. Evaluate both with the same `tokens=`, "
            "`reference_len=` and baseline to compare them."]


def _comparison_tables(report: LengthReport, rows: Sequence[tuple[str, str, Targets]], attr: str,
                       tables: Sequence[tuple[str, str, Sequence[int]]], counterpart: str) -> list[str]:
    """One comparison's tables: each (caption, metric, lengths) of ``tables`` a caption over its table of the Δ
    under ``attr``, then the note on rows whose ``counterpart`` was evaluated on other targets only."""
    lines: list[str] = []
    for i, (caption, metric, at) in enumerate(tables):
        lines += [*([""] if i else []), caption, "", *_comparison_table(report, rows, attr, metric, at)]
    return lines + _other_targets_note(report, rows, attr, counterpart)


def _comparison_sections(report: LengthReport) -> list[str]:
    lengths, beyond = report.lengths, report.beyond_lengths
    pair = ("paired by seed (nats; negative: lower loss); 95% CI of the mean Δ; `(Welch, n vs n_ref runs)`: all runs "
            "unpaired, where too few seeds pair; `n=1`: one seed, no CI (one run's Δ cannot tell the change from "
            "seed-to-seed noise).")
    lines: list[str] = []
    scaled = [(v, s, t) for v, s, t in report.groups if s != NO_SCALING and _has(report, v, s, t, "vs_none")]
    lines += ["", "## Scaling − none, same variant and length", ""]
    if scaled:
        lines += _comparison_tables(report, scaled, "vs_none", [
            (f"Beyond T (Δ loss at positions >= T, equal to Δ degradation: the baseline is the run's): {pair}",
             "loss_beyond_train", beyond),
            (f"Inside T (Δ loss at positions < T: what the scaling costs the short context): {pair}",
             "loss_within_train", lengths),
            (f"Whole window (Δ mean loss over every position): {pair}", "val_loss", lengths),
        ], "without scaling of the same variant")
    elif any(s != NO_SCALING for _, s, _ in report.groups):  # evaluated, but never beside none at the same length
        lines.append("(no scaling shares a length with an evaluation without scaling of the same variant: evaluate "
                     "`scaling=none` at those lengths to compare them)")
    else:
        lines.append("(no scaling other than none was evaluated)")
    against = [(v, s, t) for v, s, t in report.groups
               if v != reference_for(v) and _has(report, v, s, t, "vs_reference")]
    if against:
        lines += ["", f"## Variant − {REFERENCE_VARIANT}, same packing, scaling and length", ""]
        lines += _comparison_tables(report, against, "vs_reference", [
            ("Each variant against the reference rotation trained with the same packing (a variant named "
             f"`…{DOCUMENTS_SUFFIX}` against `{reference_for(DOCUMENTS_SUFFIX)}`, the others against "
             f"`{REFERENCE_VARIANT}`). Degradation (the headline: each run against its own level): {pair} A "
             "variant evaluated without some scaling (none rotates nothing to scale) has no row for it.",
             "degradation", beyond),
            (f"Loss beyond T: {pair}", "loss_beyond_train", beyond),
            (f"Whole window: {pair}", "val_loss", lengths),
        ], "of the reference variant with the same scaling")
    packed = [(v, s, t) for v, s, t in report.groups if _has(report, v, s, t, "vs_random")]
    if packed:
        lines += ["", "## Document-aligned − random training windows, same rotation and scaling", ""]
        lines += _comparison_tables(report, packed, "vs_random", [
            ("Each run trained on windows laid out by document (positions restarting at each document, attention "
             "inside it) against the run of the same rotation and seed trained on random windows of the stream (the "
             "same windows at every step: the layout is the only difference). Degradation (each run against its own "
             f"sliding-window level): {pair}", "degradation", beyond),
            (f"Loss beyond T (the runs' levels included): {pair}", "loss_beyond_train", beyond),
            (f"Whole window: {pair}", "val_loss", lengths),
        ], "of the same rotation on random windows")
    return lines


def _comparison_values(comparisons: dict[str, Comparison], metrics: Sequence[str]) -> list[Any]:
    out: list[Any] = []
    for m in metrics:
        d = comparisons.get(m)
        out += [None] * 4 if d is None else [d.delta, *(d.ci if d.ci else (None, None)), d.p]
    return out


def _pairing_text(cell: Cell, attr: str) -> str | None:
    d = next(iter(getattr(cell, attr).values()), None)
    if d is None:
        return "n/a (evaluated only on other targets)" if attr in cell.other_targets else None
    return "unpaired (Welch)" if d.method == WELCH else "paired"


def _csv_rows(report: LengthReport) -> list[list[Any]]:
    rows = []
    for variant, scaling, targets in report.groups:
        for L in report.lengths:
            c = report.cell(variant, scaling, L, targets)
            if c is None:
                continue
            stats = []
            for m in SUMMARIZED:
                s = c.summary(m)
                stats += [s.mean, s.sd, *(s.ci if s.ci else (None, None))]
            ppl, plo, phi = c.ppl
            t = targets
            rows.append([variant, scaling, L, c.n, _seeds(c.losses), t.reference_len, t.tokens, t.baseline_window,
                         t.baseline_stride, t.val_stream_tokens, t.document_order_seed, c.tokens, c.documents,
                         *stats, ppl, plo, phi, *c.ppl_range,
                         _mean_acc(c),
                         _pairing_text(c, "vs_none"), seed_list(c.none_seeds),
                         *_comparison_values(c.vs_none, VS_NONE),
                         reference_for(variant) if c.vs_reference else None, _pairing_text(c, "vs_reference"),
                         seed_list(c.reference_seeds), *_comparison_values(c.vs_reference, VS_VARIANT),
                         random_counterpart(variant) if c.vs_random else None, _pairing_text(c, "vs_random"),
                         seed_list(c.random_seeds), *_comparison_values(c.vs_random, VS_VARIANT)])
    return rows


def _mean_acc(c: Cell) -> float | None:
    """The mean accuracy over the seeds of the cell's losses: a diverged model's accuracy (its loss nan/inf, left out)
    is no sample either."""
    acc = [v for s, v in c.values.get("val_acc", {}).items() if s in c.losses]
    return statistics.fmean(acc) if acc else None


def write_length_csv(report: LengthReport, path: Path) -> None:
    with atomic_open(path) as f:
        w = csv.writer(f)
        w.writerow(CSV_COLUMNS)
        for row in _csv_rows(report):
            w.writerow(["" if v is None else (repr(v) if isinstance(v, float) else v) for v in row])


_STYLES = ("-", "--", "-.", ":", (0, (5, 1, 1, 1, 1, 1)), (0, (1, 3)))


def _styles(report: LengthReport) -> dict[tuple[str, str, Targets], tuple[Any, Any]]:
    """A color per variant and a line style per scaling, so each family reads at a glance."""
    variants = list(dict.fromkeys(v for v, _, _ in report.groups))
    scalings = list(dict.fromkeys(s for _, s, _ in sorted(report.groups, key=lambda g: (g[1] != NO_SCALING, g[1]))))
    colors = dict(zip(variants, _colors(len(variants)), strict=True))
    return {(v, s, t): (colors[v], _STYLES[scalings.index(s) % len(_STYLES)]) for v, s, t in report.groups}


def _set_title(report: LengthReport, targets: Targets) -> str:
    """What a row of panels adds to its titles: its targets, where the report holds several sets."""
    shown = report.targets_text(targets)
    return f" [{shown}]" if shown else ""


def _draw_metric(ax: Any, report: LengthReport, targets: Targets, metric: str, lengths: Sequence[int],
                 exp: bool = False) -> None:
    """One line per variant × scaling on ``targets``: the mean over seeds, its 95% CI as a band (two seeds or
    more)."""
    for (variant, scaling, t), (color, style) in _styles(report).items():
        if t != targets:
            continue
        points = [(L, s) for L in lengths if (c := report.cell(variant, scaling, L, t)) is not None
                  and (s := c.summary(metric)).mean is not None]
        if not points:
            continue
        f = _exp if exp else (lambda v: v)
        xs = [L for L, _ in points]
        ax.plot(xs, [f(s.mean) for _, s in points], color=color, linestyle=style, marker="o", markersize=3,
                label=f"{variant} · {scaling} (n={max(s.n for _, s in points)})")
        band = [(L, s.ci) for L, s in points if s.ci is not None]
        if band:
            ax.fill_between([L for L, _ in band], [f(ci[0]) for _, ci in band], [f(ci[1]) for _, ci in band],
                            color=color, alpha=0.12, linewidth=0)
    ax.set_xscale("log", base=2)
    if lengths:
        ax.set_xticks(list(lengths), [str(L) for L in lengths])
    else:
        ax.text(0.5, 0.5, "no length evaluated here", transform=ax.transAxes, ha="center", color="gray")
    ax.grid(alpha=0.3, which="both")


def plot_length_curves(report: LengthReport, path: Path) -> None:
    """Degradation, loss beyond T and whole-window perplexity against length; bands: 95% CI of the mean. One row of
    panels per set of targets: lines on other windows never share axes, where their gap would be the windows'."""
    from matplotlib.ticker import FuncFormatter

    sets = report.target_sets
    height = 5 * len(sets)
    fig = _new_figure((17, height))
    axes = fig.subplots(len(sets), 3, squeeze=False)
    plain = FuncFormatter(lambda v, _: f"{v:,.4g}")  # 812 rather than 8.12x10^2
    for targets, (ax_deg, ax_beyond, ax_ppl) in zip(sets, axes, strict=True):
        on = _set_title(report, targets)
        t = targets.reference_len
        lengths = sorted({c.length for c in report.cells if c.targets == targets})
        beyond = [L for L in lengths if t is None or L > t]
        _draw_metric(ax_deg, report, targets, "degradation", beyond)
        ax_deg.axhline(0, color="gray", linewidth=1)
        ax_deg.set(xlabel="evaluation length L (tokens)", ylabel="degradation beyond T (nats)",
                   title="loss beyond T − the run's own sliding-window baseline" + on)
        _draw_metric(ax_beyond, report, targets, "loss_beyond_train", beyond)
        ax_beyond.set(xlabel="evaluation length L (tokens)", ylabel="loss at positions >= T (nats)",
                      title="loss beyond the training length" + on)
        _draw_metric(ax_ppl, report, targets, "val_loss", lengths, exp=True)
        if t is not None:
            ax_ppl.axvline(t, color="gray", linestyle=":", linewidth=1)
        ax_ppl.set_yscale("log")
        ax_ppl.yaxis.set_major_formatter(plain)
        low, high = ax_ppl.get_ylim()
        if 0 < low and high / low < 10:  # within a decade the minor ticks are the only ones: label them
            ax_ppl.yaxis.set_minor_formatter(plain)
        ax_ppl.set(xlabel="evaluation length L (tokens; dotted: T)", ylabel="whole-window perplexity",
                   title="whole window (inside and beyond T)" + on)
        ax_ppl.legend(fontsize=7)
    fig.suptitle("mean over seeds; bands: 95% CI of the mean (not the seeds' spread)"
                 + ("; one row per set of targets" if len(sets) > 1 else ""))
    _save(fig, path, rect=(0, 0, 1, 1 - 0.4 / height))


def _mean_buckets(results: Sequence[LengthResult], length: int, key: str) -> list[tuple[float, float]]:
    """(bucket mid-position, ``key`` averaged over seeds) at ``length``, over the buckets the results have."""
    per_start: dict[int, tuple[int, list[float]]] = {}
    for r in results:
        m = r.at(length)
        for b in (m or {}).get("buckets", []):
            value = as_float(b.get(key))
            if value is not None:
                per_start.setdefault(int(b["start"]), (int(b["end"]), []))[1].append(value)
    return [((s + e) / 2, statistics.fmean(v)) for s, (e, v) in sorted(per_start.items())]


def plot_position_loss(report: LengthReport, path: Path) -> None:
    """Mean loss against position at the longest length, each variant × scaling, and each variant's own
    sliding-window baseline (thin dotted): where a scaling stops generalizing, and whether it beats the baseline.
    One panel per set of targets, as in :func:`plot_length_curves`."""
    sets = report.target_sets
    fig = _new_figure((9, 5 * len(sets)))
    axes = fig.subplots(len(sets), 1, squeeze=False)[:, 0]
    styles = _styles(report)
    for targets, ax in zip(sets, axes, strict=True):
        longest = max(c.length for c in report.cells if c.targets == targets)
        drawn, baselines = 0, set()
        for (variant, scaling, t), (color, style) in styles.items():
            if t != targets:
                continue
            group = [r for r in report.results if (r.variant, r.scaling, r.targets) == (variant, scaling, t)]
            points = _mean_buckets(group, longest, "loss")
            if not points:
                continue
            drawn += 1
            n = len({r.seed for r in group if r.at(longest)})
            ax.plot([p[0] for p in points], [p[1] for p in points], color=color, linestyle=style,
                    label=f"{variant} · {scaling} (n={n})")
            base = _mean_buckets(group, longest, "baseline")
            if base and variant not in baselines:
                baselines.add(variant)
                ax.plot([p[0] for p in base], [p[1] for p in base], color=color, linestyle=":", linewidth=0.8,
                        label=f"{variant}: own sliding-window baseline")
        if targets.reference_len is not None:
            ax.axvline(targets.reference_len, color="gray", linestyle=":", linewidth=1)
        ax.set(xlabel="position (dotted: T)", ylabel="mean loss (nats)",
               title=f"loss against position at length {longest} (mean over seeds){_set_title(report, targets)}")
        ax.grid(alpha=0.3)
        if drawn:
            ax.legend(fontsize=7)
    _save(fig, path)


def write_length_report(report: LengthReport, out_dir: PathLike) -> Path:
    """Write the Markdown, CSV and both plots into ``out_dir``, whole (:func:`llm.fileio.write_files_whole`: an
    interrupt or a failure while plotting leaves ``out_dir`` as it was, never a new Markdown beside an earlier
    report's plots); returns the Markdown's path."""
    return write_files_whole(lambda tmp: _write_length_files(report, tmp), Path(out_dir))


def _write_length_files(report: LengthReport, out: Path) -> Path:
    md = out / MD_FILE
    write_text_atomic(md, length_markdown(report))
    write_length_csv(report, out / CSV_FILE)
    plot_length_curves(report, out / CURVES_FILE)
    plot_position_loss(report, out / POSITION_FILE)
    return md
