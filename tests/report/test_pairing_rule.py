"""When the report pairs by seed and when it compares all runs unpaired (Welch), and the MDE of the test it ran."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
from scipy import stats
from statsmodels.stats.power import TTestIndPower

import llm.report.stats as report_stats
from llm.report import build_report, compare_runs
from llm.report.markdown import render_markdown
from llm.report.stats import (
    PAIRED,
    WELCH,
    compare_unpaired,
    holm,
    minimum_detectable_effect,
    pairing_seeds,
    welch_minimum_detectable_effect,
    welch_power,
)
from llm.report.tables import stats_table

from .synthetic import planted, reference, write_sweep

REF, V4, V2, BF16 = ("torch", "float32"), ("triton_v4", "float32"), ("triton_v2", "float32"), ("torch", "bfloat16")
IMPL = "triton_v4 (partial, float32)"


@pytest.mark.parametrize(
    ("mine", "theirs", "runs", "paired"),
    [
        ([0, 1], [0, 1], None, [0, 1]),  # every run of both matched: paired, however few
        ([0, 1, 2, 3], [0, 1, 2], None, [0, 1, 2]),  # all of one side's runs
        (list(range(5)), list(range(20)), None, list(range(5))),  # a reference run with more seeds
        ([0, 1], [0, 1, 2, 3, 4], None, [0, 1]),  # all of one side, however few: Welch's df would be as few
        ([0, 1, 2, 4], [0, 1, 2, 3], None, [0, 1, 2]),  # most of each side's runs
        ([0, 1, 2, 10, 11], [0, 1, 2, 3, 4], None, [0, 1, 2]),
        ([0, 1, 2, 10, 11, 12], [0, 1, 2, 3, 4, 5], None, None),  # half of each: Welch on all twelve
        ([0, 1, 2, 10, 11, 12, 13], [0, 1, 2], None, [0, 1, 2]),  # all of the reference's
        ([0, 1, 10, 11, 12], [0, 1, 2, 3, 4], None, None),  # two pairs of ten runs: Welch
        ([0, 1, 3], [0, 1, 2], None, None),  # two pairs, a run left out on each side: Welch, 3 vs 3
        ([0, 1, 2], [0, 1, 2], (4, 3), [0, 1, 2]),  # a run without a seed on one side: all of the other's pair
        ([0, 1], [0, 1, 2], (3, 3), None),  # a run without a seed has no counterpart: two pairs are too few
        ([0], [0, 1], None, [0]),  # Welch cannot run on one run: the one pair gives a Δ
        ([5, 6], [0, 1], None, None),
    ],
)
def test_pairing_rule(mine, theirs, runs, paired):
    assert pairing_seeds(mine, theirs, runs) == paired


def _csv_row(path: Path) -> dict[str, str]:
    with path.open() as f:
        return next(r for r in csv.DictReader(f) if r["implementation"] == IMPL)


def test_two_shared_seeds_of_five_are_compared_unpaired_on_all_runs(tmp_path: Path):
    """Five runs each, seeds 0 and 1 in common: a paired t on those two (one degree of freedom) would leave six runs
    out, so every run is compared by Welch's test, and the report, the CSV and the MDE say that test and its n."""
    ref = reference()
    impl = {**planted(0.004, seeds=(0, 1)), **planted(0.004, seeds=(2, 3, 4), offset=10)}
    sweep = write_sweep(tmp_path / "s", {REF: ref, V4: impl})
    report = build_report([sweep])
    (gc,) = report.comparisons
    c = gc.loss
    a = np.array([v[0] for v in impl.values()])
    b = np.array([v[0] for v in ref.values()])
    res = stats.ttest_ind(a, b, equal_var=False)
    ci = res.confidence_interval(0.95)
    assert (c.method, c.n, c.n_ref, gc.seeds) == (WELCH, 5, 5, [])
    assert c.delta == pytest.approx(a.mean() - b.mean())
    assert c.p == pytest.approx(res.pvalue) and c.ci == pytest.approx((ci.low, ci.high)) and c.df == pytest.approx(
        res.df)
    p_tost = max(stats.ttest_ind(a, b - 0.01, equal_var=False, alternative="greater").pvalue,
                 stats.ttest_ind(a, b + 0.01, equal_var=False, alternative="less").pvalue)
    assert c.p_tost == pytest.approx(p_tost)
    se = (a.mean() - b.mean()) / res.statistic  # scipy's standard error of the difference
    assert c.se == pytest.approx(se)
    assert c.mde == pytest.approx(welch_minimum_detectable_effect(se, res.df, alpha=0.01))
    assert welch_power(se, res.df, c.mde, 0.01) == pytest.approx(0.8)
    assert c.mde_upper is None and (gc.matches["val_loss"].common, gc.unmatched, gc.reference_only) == (
        [0, 1], [12, 13, 14], [2, 3, 4])
    text = compare_runs([sweep], sweep).read_text()
    assert "(unpaired (Welch), n=5 vs 5 (seeds 0 1 in common: too few to pair), Δ = " in text
    assert f"| {IMPL} | unpaired (Welch); seeds in common: 0 1 (too few to pair) | 5 vs 5 |" in text
    budget = text[text.index("## Variance budget"):text.index("## Results (short format)")]
    assert f"| {IMPL} | 5 vs 5 runs (unpaired) | " in budget and f"| n/a (unpaired) | n/a | {c.mde:.4f} |" in budget
    row = _csv_row(sweep / "comparison.csv")
    assert (row["pairing"], row["paired_seeds"], row["val_loss_test"], row["val_loss_test_n"],
            row["val_loss_test_n_ref"]) == ("unpaired (Welch)", "", "unpaired (Welch)", "5", "5")
    assert float(row["val_loss_mde"]) == c.mde and float(row["val_loss_mde_alpha"]) == 0.01
    assert row["val_loss_delta_std"] == "" and row["val_loss_mde_upper95"] == ""  # paired only


def test_welch_mde_is_statsmodels_with_equal_runs_and_stds_at_the_verdicts_level():
    """With equal n and sample std on both sides Welch's degrees of freedom are the pooled test's, so the Welch MDE
    is statsmodels' two-sample power solution; in a Holm family of three it is at 0.01 / 3, like the paired MDE."""
    a = [3.00, 3.12, 2.95, 3.20, 3.05, 3.09]
    b = [v + 0.02 for v in reversed(a)]  # other runs, the same spread
    c = compare_unpaired(a, b, 0.01, lower_is_better=True)
    s = float(np.std(a, ddof=1))
    for alpha, decided in ((0.01, c), (0.01 / 3, holm([c, c, c])[0])):
        assert decided.detect_alpha == pytest.approx(alpha)
        effect = TTestIndPower().solve_power(nobs1=6, ratio=1.0, alpha=alpha, power=0.8)
        assert decided.mde == pytest.approx(effect * s, rel=1e-6)


def test_the_mde_is_solved_once_at_the_reported_level(tmp_path: Path, monkeypatch):
    """Three implementations: each val loss MDE and its upper-bound MDE are solved once, at the Holm family's level
    0.01 / 3 that the report gives them at, not first at 0.01 for a family of one; the numbers are unchanged."""
    calls: list[float] = []

    def counted(sd, n, power=0.8, alpha=0.05):
        calls.append(alpha)
        return minimum_detectable_effect(sd, n, power, alpha)

    monkeypatch.setattr(report_stats, "minimum_detectable_effect", counted)
    impl = planted(0.0, jitter=5.0)
    sweep = write_sweep(tmp_path / "s", {REF: reference(), V4: impl, V2: impl, BF16: planted(0.001, jitter=3.0)})
    report = build_report([sweep])
    render_markdown(report)
    stats_table(report)
    assert calls == pytest.approx([0.01 / 3] * 6)  # mde and mde_upper of val loss, three implementations
    for gc in report.comparisons:
        c = gc.loss
        assert c.method == PAIRED and c.mde == minimum_detectable_effect(c.sd, c.n, alpha=0.01 / 3)
        assert c.mde_upper == minimum_detectable_effect(c.sd_upper, c.n, alpha=0.01 / 3)
    assert len(calls) == 6  # read again: not solved again
