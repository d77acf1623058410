"""Paired statistics against the reference, on synthetic sweeps with planted differences (known answers)."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats
from statsmodels.stats.power import TTestPower

from llm.report import DELTA_FILE, MD_FILE, build_report, compare_runs
from llm.report.analysis import paired_delta_curve
from llm.report.markdown import render_markdown
from llm.report.stats import (
    EQUIVALENT,
    INCONCLUSIVE,
    SINGLE,
    WELCH,
    WORSE,
    compare_paired,
    compare_unpaired,
    median_ratio_interval,
    minimum_detectable_effect,
    seeds_for_effect,
    seeds_for_equivalence,
    t_test_power,
    tost_power,
)

from .synthetic import SEED_LOSS, planted, reference, write_run, write_sweep

REF = ("torch", "float32")
V4 = ("triton_v4", "float32")
V2 = ("triton_v2", "float32")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _csv(path: Path) -> dict[str, dict[str, str]]:
    with path.open() as f:
        return {row["implementation"]: row for row in csv.DictReader(f)}


def _loss(report, rope: str = "triton_v4"):
    return next(c for c in report.comparisons if c.group.key[0] == rope).loss


def _paired_deltas(impl: dict, ref: dict) -> np.ndarray:
    return np.array([impl[s][0] - ref[s][0] for s in sorted(impl)])


# --------------------------------------------------------------------------------------------- stats


def test_seeds_for_equivalence_matches_the_textbook_formula():
    """TOST sample size (true Δ 0): n >= (t(1-α, n-1) + t(1-β/2, n-1))² σ²/ε², iterated (Chow, Shao & Wang)."""
    for sd, eps in ((0.01, 0.01), (0.005, 0.01), (0.02, 0.01)):
        n = 2
        while n < (stats.t.ppf(0.95, n - 1) + stats.t.ppf(0.9, n - 1)) ** 2 * sd**2 / eps**2:
            n += 1
        assert abs(seeds_for_equivalence(sd, eps) - n) <= 1, (sd, eps)
    assert seeds_for_equivalence(0.0, 0.01) == 2


def test_tost_power_against_simulation():
    """The power bound is close to (and not above) the simulated power of two one-sided t-tests."""
    rng = np.random.default_rng(0)
    n, sd, eps = 11, 0.01, 0.01
    d = rng.normal(0.0, sd, size=(4000, n))
    low = stats.ttest_1samp(d, -eps, axis=1, alternative="greater").pvalue < 0.05
    high = stats.ttest_1samp(d, eps, axis=1, alternative="less").pvalue < 0.05
    simulated = float(np.mean(low & high))
    assert tost_power(n, sd, eps) <= simulated + 0.02
    assert tost_power(n, sd, eps) == pytest.approx(simulated, abs=0.04)


def test_minimum_detectable_effect_matches_the_normal_approximation():
    """MDE ≈ (t(1-α/2, n-1) + t(power, n-1)) σ/√n, and power at the MDE is 80% by simulation."""
    sd, n = 0.01, 10
    mde = minimum_detectable_effect(sd, n)
    approx = (stats.t.ppf(0.975, n - 1) + stats.t.ppf(0.8, n - 1)) * sd / math.sqrt(n)
    assert mde == pytest.approx(approx, rel=0.02)
    d = np.random.default_rng(1).normal(mde, sd, size=(4000, n))
    assert float(np.mean(stats.ttest_1samp(d, 0.0, axis=1).pvalue < 0.05)) == pytest.approx(0.8, abs=0.03)
    assert minimum_detectable_effect(sd, 1) is None
    for n in (2, 3, 4):  # few seeds: the root lies where scipy's nct.cdf tail is NaN
        mde = minimum_detectable_effect(sd, n)
        approx = (stats.t.ppf(0.975, n - 1) + stats.t.ppf(0.8, n - 1)) * sd / math.sqrt(n)
        assert math.isfinite(mde) and mde == pytest.approx(approx, rel=0.25)


# --------------------------------------------------------------------------------------------- verdicts


@pytest.mark.parametrize(("delta", "acc_delta", "verdict", "acc_verdict"),
                         [(+0.02, -0.02, "worse", "worse"), (-0.02, +0.02, "better", "better")])
def test_planted_difference_detected(tmp_path: Path, delta: float, acc_delta: float, verdict: str,
                                     acc_verdict: str):
    """A 0.02-nat Δ under a 0.1-nat seed spread: only the paired test sees it; the numbers are the t-test's."""
    impl = planted(delta, acc_delta=acc_delta)
    sweep = write_sweep(tmp_path / "s", {REF: reference(), V4: impl})
    report = build_report([sweep])
    c = _loss(report)
    d = _paired_deltas(impl, reference())
    half = stats.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / math.sqrt(len(d))
    t_stat = d.mean() / (d.std(ddof=1) / math.sqrt(len(d)))
    assert c.verdict == verdict and c.n == 5
    assert c.delta == pytest.approx(d.mean()) and c.sd == pytest.approx(d.std(ddof=1))
    assert c.ci == pytest.approx((d.mean() - half, d.mean() + half))
    assert c.p == pytest.approx(2 * stats.t.sf(abs(t_stat), len(d) - 1))
    gc = report.comparisons[0]
    assert gc.metrics["val_acc"].verdict == acc_verdict  # higher accuracy is better: the sign flips
    line = f"- triton_v4 (partial, float32): {verdict} than torch (partial, float32) (n=5, Δ = "
    assert line in compare_runs([sweep], sweep).read_text()


def test_equivalent_pair_called_equivalent(tmp_path: Path):
    impl = planted(0.0003)
    sweep = write_sweep(tmp_path / "s", {REF: reference(), V4: impl})
    text = compare_runs([sweep], sweep).read_text()
    c = _loss(build_report([sweep]))
    d = _paired_deltas(impl, reference())
    lo90, hi90 = stats.t.interval(0.90, len(d) - 1, loc=d.mean(), scale=d.std(ddof=1) / math.sqrt(len(d)))
    assert -0.01 < lo90 and hi90 < 0.01  # the textbook criterion: 90% CI inside ±ε
    assert c.verdict == EQUIVALENT and c.p_tost < 0.05
    lo, hi = (f"{v:+.4f}".replace("-", "\u2212") for v in c.ci)
    verdict = (f"triton_v4 (partial, float32): equivalent to torch (partial, float32) within ±0.01 nats "
               f"(n=5, Δ = +0.0003 [{lo}, {hi}])")
    head = text[: text.index("Common config")]
    assert f"- {verdict}" in head  # the verdict list is at the top
    assert "| equivalent within ±0.01 nats |" in text


def test_small_sample_inconclusive_with_seeds_needed(tmp_path: Path):
    impl = planted(0.0, seeds=(0, 1, 2), jitter=5.0)  # paired std 0.005·2 nats, 3 seeds
    sweep = write_sweep(tmp_path / "s", {REF: reference((0, 1, 2)), V4: impl})
    c = _loss(build_report([sweep]))
    d = _paired_deltas(impl, reference((0, 1, 2)))
    assert c.verdict == INCONCLUSIVE
    assert c.seeds_needed == seeds_for_equivalence(d.std(ddof=1), 0.01) and c.seeds_needed > 3
    text = compare_runs([sweep], sweep).read_text()
    assert f"inconclusive (3 seeds; about {c.seeds_needed} needed for equivalence if the true Δ were 0)" in text
    rows = _csv(sweep / "comparison.csv")
    assert rows["triton_v4 (partial, float32)"]["val_loss_tost_seeds_needed"] == str(c.seeds_needed)
    # a wider margin turns the same data into equivalence
    assert _loss(build_report([sweep], margin=0.05)).verdict == EQUIVALENT


def test_mismatched_seeds_fall_back_to_welch(tmp_path: Path):
    impl = planted(0.02, seeds=(0, 1, 2), jitter=0.0, offset=10)  # seeds 10, 11, 12: nothing to pair with
    sweep = write_sweep(tmp_path / "s", {REF: reference((0, 1, 2)), V4: impl})
    c = _loss(build_report([sweep]))
    a = np.array([v[0] for v in impl.values()])
    b = np.array([SEED_LOSS[s] for s in (0, 1, 2)])
    va, vb = a.var(ddof=1) / 3, b.var(ddof=1) / 3
    t_stat = (a.mean() - b.mean()) / math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va**2 / 2 + vb**2 / 2)  # Welch-Satterthwaite
    assert c.method == WELCH and (c.n, c.n_ref) == (3, 3)
    assert c.p == pytest.approx(2 * stats.t.sf(abs(t_stat), df))
    assert c.verdict == INCONCLUSIVE  # the seed spread hides the planted Δ without pairing
    text = compare_runs([sweep], sweep).read_text()
    assert "| unpaired (Welch) |" in text and "(unpaired (Welch), n=3 vs 3, Δ = +0.0200" in text
    # the section's Δ is not "per seed, then averaged" for a Welch row: it has no pairs
    assert "the difference of the two means over all their runs in an unpaired (Welch) row" in text
    assert _csv(sweep / "comparison.csv")["triton_v4 (partial, float32)"]["pairing"] == "unpaired (Welch)"


def test_partial_seed_overlap_pairs_on_common_seeds(tmp_path: Path):
    sweep = write_sweep(tmp_path / "s", {REF: reference((0, 1, 2)), V4: planted(0.02, seeds=(0, 1, 2, 3))})
    gc = build_report([sweep]).comparisons[0]
    assert gc.loss.method != WELCH and gc.seeds == [0, 1, 2] and gc.unmatched == [3]


def test_single_seed_says_so(tmp_path: Path):
    sweep = write_sweep(tmp_path / "s", {REF: reference((0,)), V4: planted(0.02, seeds=(0,))})
    c = _loss(build_report([sweep]))
    assert c.verdict == SINGLE and c.ci is None and c.p is None
    text = compare_runs([sweep], sweep).read_text()
    assert "triton_v4 (partial, float32): one seed only against torch (partial, float32)" in text
    assert "n=1: no CI" in text
    row = _csv(sweep / "comparison.csv")["triton_v4 (partial, float32)"]
    assert row["val_loss_delta_ci_low"] == "" and row["val_loss_verdict"] == "single seed"


def test_variance_budget_and_eval_noise(tmp_path: Path):
    impl = planted(0.0, jitter=5.0)
    sweep = tmp_path / "s"
    for i, (key, vals) in enumerate({REF: reference(), V4: impl}.items()):
        for s, (loss, acc) in vals.items():
            write_run(sweep / f"{i}_{s}", key[0], s, loss, acc, extra={"val_loss_se": 0.004, "val_tokens": 65536})
    old = tmp_path / "old"  # runs from before val_loss_se existed: no such columns
    write_sweep(old, {REF: reference(), V4: impl})
    text = compare_runs([sweep], sweep).read_text()
    d = _paired_deltas(impl, reference())
    budget = text[text.index("## Variance budget"):text.index("## Results (short format)")]
    # the MDE of the better/worse verdict: its t-test at α = 0.01 (a family of one), statsmodels' solver
    effect = TTestPower().solve_power(nobs=5, alpha=0.01, power=0.8)
    mde = effect * d.std(ddof=1)
    upper = d.std(ddof=1) * math.sqrt(4 / stats.chi2.ppf(0.05, 4))
    row = (f"| triton_v4 (partial, float32) | 5 | {np.std([v[0] for v in impl.values()], ddof=1):.4f} | "
           f"{d.std(ddof=1):.4f} | {upper:.4f} | {mde:.4f} | {effect * upper:.4f} |")
    assert row in budget
    assert "Final val loss SE" in budget and "| 0.0040 | 65536 |" in budget
    assert "| Val loss SE | Val tokens |" in text  # per-seed table
    old_text = compare_runs([old], old).read_text()
    assert "Final val loss SE" not in old_text and "Val tokens" not in old_text
    rows = _csv(sweep / "comparison.csv")
    assert float(rows["torch (partial, float32)"]["val_loss_se"]) == pytest.approx(0.004)
    assert rows["torch (partial, float32)"]["val_tokens"] == "65536"
    assert float(rows["triton_v4 (partial, float32)"]["val_loss_mde"]) == pytest.approx(mde)


def test_paired_delta_curve_and_plot(tmp_path: Path):
    """Δ per eval step over the seeds that have that eval in both runs; steps only one side has are left out."""
    sweep = tmp_path / "s"
    for s in (0, 1, 2):
        base = {50: 4.0 + s * 0.1, 100: 3.0 + s * 0.1}
        write_run(sweep / f"ref{s}", "torch", s, base[100], curve=base)
        mine = {50: base[50] + 0.02 + 0.001 * s, 75: 3.5, 100: base[100] - 0.01 + 0.001 * s}
        write_run(sweep / f"v4_{s}", "triton_v4", s, mine[100], curve=mine)
    report = build_report([sweep])
    curve = paired_delta_curve(report.comparisons[0])
    assert [c[0] for c in curve] == [50, 100] and [c[1] for c in curve] == [3, 3]
    assert curve[0][2] == pytest.approx(0.021) and curve[1][2] == pytest.approx(-0.009)
    lo, hi = stats.t.interval(0.95, 2, loc=0.021, scale=0.001 / math.sqrt(3))
    assert (curve[0][3], curve[0][4]) == pytest.approx((lo, hi))
    compare_runs([sweep], sweep)
    data = (sweep / DELTA_FILE).read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 5000
    assert f"![paired Δ val loss]({DELTA_FILE})" in (sweep / MD_FILE).read_text()


def test_csv_columns(tmp_path: Path):
    sweep = write_sweep(tmp_path / "s", {REF: reference(), V4: planted(0.02)})
    compare_runs([sweep], sweep)
    with (sweep / "comparison.csv").open() as f:
        columns = next(csv.reader(f))
    expected = ["reference", "pairing", "paired_seeds", "unmatched_seeds", "val_loss_se", "val_tokens",
                "val_loss_delta_std", "val_loss_mde", "val_loss_ttest_seeds_for_margin", "excluded"]
    for m in ("val_loss", "val_acc"):
        expected += [f"{m}_delta", f"{m}_delta_ci_low", f"{m}_delta_ci_high", f"{m}_delta_p", f"{m}_tost_p",
                     f"{m}_margin", f"{m}_verdict", f"{m}_tost_seeds_needed"]
    assert not set(expected) - set(columns)
    assert len(columns) == len(set(columns))
    rows = _csv(sweep / "comparison.csv")
    ref, v4 = rows["torch (partial, float32)"], rows["triton_v4 (partial, float32)"]
    assert ref["pairing"] == "reference" and ref["val_loss_delta"] == ""
    assert v4["reference"] == "torch (partial, float32)" and v4["pairing"] == "paired"
    assert v4["paired_seeds"] == "0 1 2 3 4" and v4["val_loss_verdict"] == "worse"
    assert float(v4["val_loss_delta"]) == pytest.approx(0.02) and float(v4["val_loss_margin"]) == 0.01
    assert float(v4["val_loss_delta_ci_low"]) < 0.02 < float(v4["val_loss_delta_ci_high"])


def test_reference_choice(tmp_path: Path):
    sweep = write_sweep(tmp_path / "s", {REF: reference(), V4: planted(0.02), ("torch", "bfloat16"): planted(0.0)})
    assert build_report([sweep]).reference.label == "torch (partial, float32)"  # the default
    report = build_report([sweep], reference="triton_v4")
    assert report.reference.label == "triton_v4 (partial, float32)"
    assert {c.group.label: c.loss.verdict for c in report.comparisons}["torch (partial, float32)"] == "better"
    assert build_report([sweep], reference="torch (partial, bfloat16)").reference.key == ("torch", "partial",
                                                                                          "bfloat16", "random")
    from llm.report import ReferenceNotFoundError

    # a rope= preset, as the sweep was given: torch names float32 and bfloat16 runs, its preset the float32 ones
    assert build_report([sweep], reference="torch").reference.label == "torch (partial, float32)"
    assert build_report([sweep], reference="torch_bf16").reference.label == "torch (partial, bfloat16)"
    with pytest.raises(ReferenceNotFoundError, match="matches no implementation"):
        build_report([sweep], reference="triton_v9")
    with pytest.raises(ReferenceNotFoundError, match="matches no implementation"):
        build_report([sweep], reference="torch_full")  # a preset none of the runs trained


def test_a_default_reference_that_failed_is_said_to_be_replaced(tmp_path: Path, caplog):
    """Every torch (partial) run failed: the report compares against torch (full), and says so in the log and the
    report, since every Δ then has another meaning; with torch (partial) completed, no such note."""
    root = tmp_path / "s"
    root.mkdir()
    for seed, (loss, acc) in planted(0.0, seeds=(0, 1)).items():
        write_run(root / f"p_s{seed}", "torch", seed, loss, acc, status="failed", message="boom")
        write_run(root / f"f_s{seed}", "torch", seed, loss, acc, variant="full")
        write_run(root / f"v_s{seed}", "triton_v4", seed, loss + 0.01, acc)
    with caplog.at_level("WARNING"):
        text = compare_runs([root], root).read_text()
    assert "torch (partial, float32) has no completed run (2 failed), so every Δ is against torch (full, float32)" \
        in text and "so every Δ is against" in caplog.text
    for seed, (loss, acc) in planted(0.0, seeds=(0, 1)).items():
        write_run(root / f"p2_s{seed}", "torch", seed, loss, acc)
    assert not build_report([root]).data_notes


def test_reference_by_preset_name_and_by_label(tmp_path: Path):
    """``--reference torch_full``: the preset's variant picks the full-rotation runs; where neither a registry name
    nor a preset singles out one implementation, the full label is asked for."""
    root = tmp_path / "s"
    root.mkdir()
    (root / "multirun.yaml").write_text("hydra: {}\n")
    for job, (variant, delta) in enumerate((("partial", 0.0), ("full", 0.02))):
        for seed, (loss, acc) in planted(delta).items():
            write_run(root / f"{job}_{variant}_s{seed}", "torch", seed, loss, acc, variant=variant)
            write_run(root / f"v4_{job}_{variant}_s{seed}", "triton_v4", seed, loss, acc,
                      dtype=("float32", "bfloat16")[job])
    report = build_report([root], reference="torch_full")
    assert report.reference.label == "torch (full, float32)"
    verdicts = {c.group.label: c.loss.verdict for c in report.comparisons}
    assert verdicts["torch (partial, float32)"] == "better"
    assert build_report([root], reference="torch").reference.label == "torch (partial, float32)"
    from llm.report import ReferenceNotFoundError

    with pytest.raises(ReferenceNotFoundError, match="several"):
        build_report([root], reference="triton_v4")  # two compute dtypes; its preset names neither


def test_a_reference_on_several_packings_is_its_random_windows_one(tmp_path: Path):
    """torch_full trained on random and on document windows: the preset picks random windows, as the default
    reference does, not an error."""
    import yaml

    root = tmp_path / "s"
    root.mkdir()
    (root / "multirun.yaml").write_text("hydra: {}\n")
    for packing in ("random", "documents"):
        for seed, (loss, acc) in planted(0.0).items():
            run = write_run(root / f"{packing}_s{seed}", "torch", seed, loss, acc, variant="full")
            for name in ("config.yaml", ".hydra/config.yaml"):
                cfg = yaml.safe_load((run / name).read_text())
                cfg.setdefault("data", {})["packing"] = packing
                (run / name).write_text(yaml.safe_dump(cfg))
    report = build_report([root], reference="torch_full", allow_mixed=True)
    assert report.reference.key == ("torch", "full", "float32", "random")


def test_no_reference_in_the_runs(tmp_path: Path):
    sweep = write_sweep(tmp_path / "s", {V4: planted(0.02), ("none", None): planted(0.5)})
    text = compare_runs([sweep], sweep).read_text()
    assert "No reference implementation" in text and "--reference" in text
    assert (sweep / DELTA_FILE).is_file()


def test_one_sided_rejection_is_not_equivalence(tmp_path: Path):
    """Δ ≈ +0.006 ± 0.008: the lower test rejects, the upper does not, so TOST (the larger p) does not."""
    impl = planted(0.006, jitter=5.0)
    sweep = write_sweep(tmp_path / "s", {REF: reference(), V4: impl})
    c = _loss(build_report([sweep]))
    d = _paired_deltas(impl, reference())
    se, df = d.std(ddof=1) / math.sqrt(len(d)), len(d) - 1
    p_low = stats.t.sf((d.mean() + 0.01) / se, df)  # H0: Δ <= -ε
    p_high = stats.t.cdf((d.mean() - 0.01) / se, df)  # H0: Δ >= +ε
    assert p_low < 0.05 < p_high
    assert c.p_tost == pytest.approx(max(p_low, p_high))
    assert c.verdict == INCONCLUSIVE


def test_median_ratio_interval_holds_a_planted_difference_through_outliers_and_drift():
    """Benchmark rounds (bench_step): a's steps are 1/0.99 of b's (a 1.01% slower), every round drifts both alike
    and 3% of the steps are 4x outliers. The medians' ratio finds the 1.01% with a tight interval around it, which
    the means would not give (pulled by the outliers: checked, the interval then spans 9 points); whole rounds are
    resampled, so drift shared within a round stays paired."""
    rng = np.random.default_rng(7)
    a, b = [], []
    for r in range(400):
        drift = 1 + 0.05 * math.sin(r / 20)
        for out, scale in ((a, 1.0), (b, 0.99)):
            steps = 10 * scale * drift * (1 + 0.01 * rng.standard_normal(2))
            steps[rng.random(2) < 0.03] *= 4
            out.append(list(steps))
    est, lo, hi = median_ratio_interval(a, b)
    assert lo < est < hi
    assert lo < 100 * (1 / 0.99 - 1) < hi and hi - lo < 1.0
    assert median_ratio_interval(b, b) == (0.0, 0.0, 0.0)
    assert median_ratio_interval(a[:1], b[:1])[1:] == (None, None)  # one round: no interval
    with pytest.raises(ValueError, match="groups"):
        median_ratio_interval(a, b[:3])


def test_inconclusive_with_seeds_enough_at_zero_says_the_observed_delta_is_the_doubt():
    """TOST at a true Δ of 0 would need no more seeds than were run, yet the 90% CI crosses +ε: the verdict says
    the observed Δ, not the seed count, keeps it inconclusive (not "about 5 needed" after 5 seeds)."""
    from llm.report.markdown import verdict_text

    z = np.array([-1.2, -0.5, 0.1, 0.4, 1.2])
    d = 0.0073 + 0.0052 * (z - z.mean()) / z.std(ddof=1)
    ref = [3.0, 3.1, 2.9, 3.2, 3.05]
    c = compare_paired([r + x for r, x in zip(ref, d, strict=True)], ref, 0.01, True)
    assert c.verdict == INCONCLUSIVE and c.seeds_needed is not None and c.seeds_needed <= c.n
    assert verdict_text(c) == ("inconclusive (5 seeds; enough for equivalence if the true Δ were 0: the observed Δ "
                               "keeps it outside ±0.01)")


def test_equal_values_unpaired_are_no_difference():
    """Three runs at 0.4 against five at 0.4 (no seed in common): the means differ in the last bit (5.6e-17), which
    is rounding, not a Δ: p = 1 and equivalent, not "better" at p = 0."""
    c = compare_unpaired([0.4] * 3, [0.4] * 5, 0.005, lower_is_better=False)
    assert float(np.mean([0.4] * 3)) != float(np.mean([0.4] * 5))  # the planted rounding
    assert c.p == 1.0 and c.ci == (0.0, 0.0) and c.verdict == EQUIVALENT
    assert compare_unpaired([0.4] * 3, [0.41] * 5, 0.005, lower_is_better=False).verdict == WORSE  # a real Δ still is


def test_a_spread_of_rounding_is_no_spread_in_the_seed_counts_too():
    """Δ = 0.005 on every seed up to the last bits (3.105 - 3.10 and 3.205 - 3.20 differ at 1e-16): the tests took it
    as no spread (a zero-width interval), but the paired std (2.6e-16) went on to the seed counts, whose power
    functions then gave nan or 0, and the budget read "more than 100,000" seeds beside an MDE of 0."""
    ref = [3.10, 3.20, 3.05]
    impl = [3.105, 3.205, 3.055]
    assert float(np.std([a - b for a, b in zip(impl, ref, strict=True)], ddof=1)) > 0.0  # the planted rounding
    c = compare_paired(impl, ref, 0.01, True)
    assert c.ci[0] == c.ci[1] and c.sd == 0.0 and c.mde == 0.0
    assert seeds_for_equivalence(c.sd, c.margin) == 2 and seeds_for_effect(c.sd, c.margin) == 2
    u = compare_unpaired([0.4 + 1e-17, 0.4, 0.4], [0.41, 0.41 + 1e-17, 0.41], 0.005, lower_is_better=False)
    assert u.sd == 0.0


def test_mde_is_at_the_level_of_the_better_worse_verdict(tmp_path: Path):
    """The verdict calls a Δ better/worse at Holm p < 0.01, so the MDE (the effect it detects with 80% power) is
    at α = 0.01 for one implementation and 0.01 / 3 for three (Holm's first step), not at 0.05: an effect at the
    α = 0.05 MDE would be called worse by this report only about 40% of the time with 5 seeds."""
    impl = planted(0.0, jitter=5.0)
    d = _paired_deltas(impl, reference())
    sd = d.std(ddof=1)
    one = _loss(build_report([write_sweep(tmp_path / "one", {REF: reference(), V4: impl})]))
    assert one.detect_alpha == 0.01
    assert one.mde == pytest.approx(TTestPower().solve_power(nobs=5, alpha=0.01, power=0.8) * sd, rel=1e-6)
    three = build_report([write_sweep(tmp_path / "three", {REF: reference(), V4: impl, V2: impl,
                                                            ("torch", "bfloat16"): impl})])
    c = _loss(three)
    assert c.n_tests == 3 and c.detect_alpha == pytest.approx(0.01 / 3)
    sims = np.random.default_rng(0).normal(c.mde, sd, size=(8000, 5))  # power at the MDE, by simulation
    assert float(np.mean(stats.ttest_1samp(sims, 0.0, axis=1).pvalue < 0.01 / 3)) == pytest.approx(0.8, abs=0.02)
    gc = next(g for g in three.comparisons if g.group.key[0] == "triton_v4")
    assert t_test_power(gc.seeds_for_margin, sd, 0.01, 0.01 / 3) >= 0.8 > t_test_power(gc.seeds_for_margin - 1, sd,
                                                                                          0.01, 0.01 / 3)
    text = render_markdown(three)
    assert "| MDE (t-test, 80%, α=0.01/3) |" in text and "at α = 0.01 / 3 implementations = 0.00333" in text


def test_seeds_needed_is_stated_for_a_true_delta_of_zero(tmp_path: Path):
    """Two seeds, observed Δ +0.0105 outside ±0.01: the TOST seed count assumes a true Δ of 0, and the verdict must
    say so (and that the observed Δ is outside the margin) rather than read as "3 seeds settle it"."""
    impl = {0: (SEED_LOSS[0] + 0.012, 0.4), 1: (SEED_LOSS[1] + 0.009, 0.4)}
    sweep = write_sweep(tmp_path / "s", {REF: reference((0, 1)), V4: impl})
    c = _loss(build_report([sweep]))
    assert c.verdict == INCONCLUSIVE and c.delta > 0.01 and c.seeds_needed > 2
    text = compare_runs([sweep], sweep).read_text()
    assert (f"inconclusive (2 seeds; about {c.seeds_needed} needed for equivalence if the true Δ were 0; the observed "
            "Δ is outside ±0.01) against") in text
