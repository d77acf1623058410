"""The statistics as one row per implementation: ``comparison.csv`` and the wandb table share :func:`stats_table`.

Columns (one row per implementation, ordered as the Markdown summary):

* ``implementation, rope, variant, compute_dtype, n, seeds``, then ``<metric>_mean`` / ``<metric>_std`` /
  ``<metric>_n`` for train_time_s, val_loss, val_acc, val_ppl, tokens_per_s (sample std, ddof=1; empty with one
  seed; ``_n``: the runs they are over, fewer than ``n`` where a run's value is nan/inf or missing),
  ``n_excluded`` (runs of this implementation that did not complete) and ``excluded`` (their
  statuses);
* ``val_loss_se``, ``val_tokens``: eval noise and size, from summary.json (empty for old runs);
* ``reference``, ``pairing`` (``paired``/``unpaired (Welch)``/``reference``: val loss's test), ``paired_seeds``
  (empty when unpaired), ``unmatched_seeds`` (the implementation's seeds without a reference run),
  ``reference_only_seeds`` (the reference's seeds without a run of the implementation), ``nonfinite_seeds`` and
  ``reference_nonfinite_seeds`` (seeds whose final val loss is nan/inf: left out of the statistics);
* per compared metric ``m`` in (val_loss, val_acc): ``m_test`` (``paired``/``unpaired (Welch)``, each metric its
  own), ``m_test_n``/``m_test_n_ref`` (what it ran on: the paired seeds twice, or each side's runs for Welch),
  ``m_delta`` (mean Δ = impl − reference),
  ``m_delta_ci_low``/``m_delta_ci_high`` (95%, t-test), ``m_delta_p`` (t-test, two-sided),
  ``m_delta_p_holm`` (that p, Holm-adjusted over the sweep's implementations; ``m_holm_tests`` of them),
  ``m_tost_p``, ``m_margin``, ``m_tightest_margin`` (largest |end| of the 90% CI), ``m_verdict``
  (better/worse at Holm p < 0.01, equivalent at TOST p < 0.05, inconclusive, single seed),
  ``m_tost_seeds_needed`` (inconclusive only: paired seeds for TOST at 80% power);
* val loss: ``val_loss_mde`` (the smallest Δ the better/worse verdict's own test, paired or Welch's, detects at 80%
  power) at ``val_loss_mde_alpha`` (that verdict's level: 0.01 over the Holm family's size); paired only:
  ``val_loss_delta_std`` (paired std of Δ), ``val_loss_delta_std_upper95`` (its one-sided 95% upper bound),
  ``val_loss_mde_upper95`` (the MDE at that bound),
  ``val_loss_ttest_seeds_for_margin`` (paired seeds for that t-test to detect ε),
  ``val_loss_tost_seeds_for_margin`` (paired seeds for TOST at ±ε, 80% power, true Δ 0),
  ``val_loss_pairing_corr``, ``val_loss_pairing_var_ratio`` (var(paired)/var(unpaired)),
  ``val_loss_welch_ci_low``/``_high`` (the same runs unpaired), ``val_loss_seed_se`` (paired std / √n),
  ``val_loss_window_se`` and ``val_windows`` (SE of Δ over the final eval's val windows).

Numbers are written with full precision (``repr``); missing values are empty cells.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from llm.fileio import atomic_open
from llm.report.analysis import COMPARED, METRICS, Group, GroupComparison
from llm.report.compare import Report
from llm.report.markdown import seed_list
from llm.report.stats import WELCH, seeds_for_equivalence

Row = list[Any]


def _columns() -> list[str]:
    cols = ["implementation", "rope", "variant", "compute_dtype", "n", "seeds"]
    for m, _, _ in METRICS:
        cols += [f"{m}_mean", f"{m}_std", f"{m}_n"]
    cols += ["n_excluded", "excluded", "val_loss_se", "val_tokens", "reference", "pairing", "paired_seeds",
             "unmatched_seeds", "reference_only_seeds", "nonfinite_seeds", "reference_nonfinite_seeds"]
    for m, _ in COMPARED:
        cols += [f"{m}_test", f"{m}_test_n", f"{m}_test_n_ref", f"{m}_delta", f"{m}_delta_ci_low",
                 f"{m}_delta_ci_high", f"{m}_delta_p", f"{m}_delta_p_holm", f"{m}_holm_tests", f"{m}_tost_p",
                 f"{m}_margin", f"{m}_tightest_margin", f"{m}_verdict", f"{m}_tost_seeds_needed"]
    return [*cols, *_PAIRED_LOSS_COLUMNS]


_PAIRED_LOSS_COLUMNS = ("val_loss_delta_std", "val_loss_delta_std_upper95", "val_loss_mde", "val_loss_mde_upper95",
                        "val_loss_mde_alpha",
                        "val_loss_ttest_seeds_for_margin", "val_loss_tost_seeds_for_margin", "val_loss_pairing_corr",
                        "val_loss_pairing_var_ratio", "val_loss_welch_ci_low", "val_loss_welch_ci_high",
                        "val_loss_seed_se", "val_loss_window_se", "val_windows")


def _pairing_cells(report: Report, g: Group, gc: GroupComparison | None) -> Row:
    ref = report.reference
    if ref is None or not g.n:
        return ["", "", "", "", "", "", ""]
    if g is ref:
        return [ref.label, "reference", "", "", "", "", ""]
    if gc is None or "val_loss" not in gc.metrics:
        return [ref.label, "", "", "", "", "", ""]
    pairing = WELCH if gc.loss.method == WELCH else "paired"
    m = gc.matches["val_loss"]
    return [ref.label, pairing, seed_list(gc.seeds), seed_list(gc.unmatched), seed_list(gc.reference_only),
            seed_list(m.nonfinite), seed_list(m.reference_nonfinite)]


def _paired_loss_cells(gc: GroupComparison | None) -> Row:
    c = None if gc is None else gc.metrics.get("val_loss")
    if gc is None or c is None or c.sd is None:
        return [None] * len(_PAIRED_LOSS_COLUMNS)
    if c.method == WELCH:  # the MDE of the Welch test the verdict ran; the paired columns stay empty
        cells: Row = [None] * len(_PAIRED_LOSS_COLUMNS)
        cells[_PAIRED_LOSS_COLUMNS.index("val_loss_mde")] = c.mde
        cells[_PAIRED_LOSS_COLUMNS.index("val_loss_mde_alpha")] = c.detect_alpha
        return cells
    pc, window = c.pairing, gc.window
    welch = pc.welch_ci if pc is not None and pc.welch_ci is not None else (None, None)
    return [c.sd, c.sd_upper, c.mde, c.mde_upper, c.detect_alpha, gc.seeds_for_margin,
            seeds_for_equivalence(c.sd, c.margin),
            None if pc is None else pc.corr, None if pc is None else pc.var_ratio, *welch, gc.seed_se,
            None if window is None else window.se, None if window is None else window.windows]


def _comparison_cells(gc: GroupComparison | None) -> Row:
    cells: Row = []
    for m, _ in COMPARED:
        c = None if gc is None else gc.metrics.get(m)
        if c is None:
            cells += [None] * 14
            continue
        lo, hi = c.ci if c.ci is not None else (None, None)
        cells += [WELCH if c.method == WELCH else "paired", c.n, c.n_ref, c.delta, lo, hi, c.p, c.p_holm,
                  c.n_tests if c.p_holm is not None else None, c.p_tost, c.margin, c.tightest_margin, c.verdict,
                  c.seeds_needed]
    return cells + _paired_loss_cells(gc)


def _row(report: Report, g: Group) -> Row:
    gc = report.comparison(g)
    # each seed once, as n counts it: a seed run in two sweeps compared together is one sample
    row: Row = [g.label, g.key[0], g.key[1] or "", g.key[2] or "", g.n, seed_list(dict.fromkeys(g.seeds))]
    for m, _, _ in METRICS:
        row += list(g.stats[m][:3])  # mean, std and the runs they are over: n less a nan/inf or missing value
    tokens = sorted({int(v) for r in g.runs if (v := r.value("val_tokens")) is not None})
    row += [len(g.excluded), "; ".join(r.status for r in g.excluded), g.summary_mean("val_loss_se"),
            " ".join(map(str, tokens))]
    return row + _pairing_cells(report, g, gc) + _comparison_cells(gc)


def stats_table(report: Report) -> tuple[list[str], list[Row]]:
    """(columns, rows) with raw values (None for missing): every implementation, failed-only ones too."""
    return _columns(), [_row(report, g) for g in report.groups]


def _cell(v: Any) -> Any:
    if v is None:
        return ""
    return repr(float(v)) if isinstance(v, float) else v


def write_csv(path: Path, report: Report) -> None:
    """``comparison.csv`` (see the module doc for the columns), written atomically."""
    columns, rows = stats_table(report)
    with atomic_open(path, "w") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(columns)
        for row in rows:
            w.writerow([_cell(v) for v in row])
