"""How much the comparison can see, on synthetic sweeps with planted answers: the pairing check, Holm's
correction over a sweep's implementations, the tightest margin, the paired std's upper bound, the SE of Δ
over val windows, and the refusal to pair runs trained on different data."""

from __future__ import annotations

import csv
import math
import re
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from llm.report import DataMismatchError, build_report, compare_runs
from llm.report.stats import EQUIVALENT, INCONCLUSIVE, WORSE, minimum_detectable_effect

from .synthetic import DATA, JITTER, SEED_ACC, SEED_LOSS, planted, reference, write_run, write_sweep

REF = ("torch", "float32")
V4 = ("triton_v4", "float32")
V4_LABEL = "triton_v4 (partial, float32)"


def _csv(path: Path) -> dict[str, dict[str, str]]:
    with path.open() as f:
        return {row["implementation"]: row for row in csv.DictReader(f)}


def _by_rope(report) -> dict[tuple, object]:
    return {gc.group.key[::2]: gc for gc in report.comparisons}


def _section(text: str, title: str) -> str:
    start = text.index(title)
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else len(text)]


# --------------------------------------------------------------------------------------------- pairing check


def test_pairing_that_helps_is_reported_as_helping(tmp_path: Path):
    """impl = reference + 0.002 + tiny jitter: the seed moves both alike, corr ~ 1, the ratio far below 1."""
    impl = planted(0.002)
    sweep = write_sweep(tmp_path / "s", {REF: reference(), V4: impl})
    pc = build_report([sweep]).comparisons[0].loss.pairing
    a = np.array([impl[s][0] for s in range(5)])
    b = np.array([SEED_LOSS[s] for s in range(5)])
    assert pc.corr == pytest.approx(stats.pearsonr(a, b).statistic) and pc.corr > 0.99
    assert pc.var_ratio == pytest.approx(np.var(a - b, ddof=1) / (np.var(a, ddof=1) + np.var(b, ddof=1)))
    assert pc.var_ratio < 0.01 and pc.helps
    text = compare_runs([sweep], sweep).read_text()
    assert "did not help" not in text
    row = [line for line in _section(text, "## Pairing check").splitlines() if line.startswith(f"| {V4_LABEL}")]
    assert row and "| yes |" in row[0]
    assert float(_csv(sweep / "comparison.csv")[V4_LABEL]["val_loss_pairing_var_ratio"]) == pytest.approx(pc.var_ratio)


def test_pairing_that_hurts_says_so_and_shows_the_welch_interval(tmp_path: Path):
    """impl's seeds mirror the reference's (corr = −1): var(paired)/var(unpaired) = 2, so the report says
    pairing did not help and gives the Welch interval of the same runs beside the paired one."""
    mean = float(np.mean(list(SEED_LOSS.values())))
    impl = {s: (2 * mean - SEED_LOSS[s] + 0.01, SEED_ACC[s]) for s in SEED_LOSS}
    sweep = write_sweep(tmp_path / "s", {REF: reference(), V4: impl})
    c = build_report([sweep]).comparisons[0].loss
    a = np.array([impl[s][0] for s in range(5)])
    b = np.array([SEED_LOSS[s] for s in range(5)])
    welch = stats.ttest_ind(a, b, equal_var=False).confidence_interval(0.95)
    assert c.pairing.corr == pytest.approx(-1.0)
    assert c.pairing.var_ratio == pytest.approx(2.0) and c.pairing.helps is False
    assert c.pairing.welch_ci == pytest.approx((welch.low, welch.high))
    assert c.ci[1] - c.ci[0] > welch.high - welch.low  # here the unpaired interval is the narrower one
    text = compare_runs([sweep], sweep).read_text()
    lo, hi = (f"{v:+.4f}".replace("-", "\u2212") for v in (welch.low, welch.high))
    assert f"pairing by seed did not help (var(paired)/var(unpaired) = 2.00): Welch 95% CI [{lo}, {hi}]" in text
    assert "| **no** |" in _section(text, "## Pairing check")
    row = _csv(sweep / "comparison.csv")[V4_LABEL]
    assert float(row["val_loss_pairing_corr"]) == pytest.approx(-1.0)
    assert float(row["val_loss_welch_ci_low"]) == pytest.approx(welch.low)


# --------------------------------------------------------------------------------------------- Holm


def test_holm_over_three_implementations(tmp_path: Path):
    """Three implementations, raw paired p ≈ 1e-5, 0.0064 and 0.52. The middle one is below 0.01 alone but
    not after Holm (2 × 0.0064 > 0.01): it must not be called worse; the first still is."""
    impls = {V4: planted(0.02), ("triton_v2", "float32"): planted(0.0037), ("torch", "bfloat16"): planted(0.0005)}
    sweep = write_sweep(tmp_path / "s", {REF: reference(), **impls})
    report = build_report([sweep])
    gcs = _by_rope(report)
    raw = {k: stats.ttest_1samp(np.array([impl[s][0] - SEED_LOSS[s] for s in range(5)]), 0.0).pvalue
           for k, impl in impls.items()}
    order = sorted(raw, key=raw.get)
    expected, running = {}, 0.0
    for i, k in enumerate(order):  # Holm's step-down, by hand
        running = max(running, min(1.0, (len(order) - i) * raw[k]))
        expected[k] = running
    for k in impls:
        c = gcs[k].loss
        assert c.p == pytest.approx(raw[k]) and c.p_holm == pytest.approx(expected[k]) and c.n_tests == 3
    assert raw[("triton_v2", "float32")] < 0.01 < expected[("triton_v2", "float32")]
    assert gcs[V4].loss.verdict == WORSE
    assert gcs[("triton_v2", "float32")].loss.verdict == EQUIVALENT  # not worse: Holm took it above 0.01
    text = compare_runs([sweep], sweep).read_text()
    assert "Holm p" in text and "(3 tests)" in text
    row = _csv(sweep / "comparison.csv")["triton_v2 (partial, float32)"]
    assert float(row["val_loss_delta_p_holm"]) == pytest.approx(expected[("triton_v2", "float32")])
    assert row["val_loss_holm_tests"] == "3" and row["val_loss_verdict"] == "equivalent"


def test_a_single_comparison_is_decided_at_its_own_p(tmp_path: Path):
    sweep = write_sweep(tmp_path / "s", {REF: reference(), V4: planted(0.0037)})
    c = build_report([sweep]).comparisons[0].loss
    assert c.p_holm == c.p < 0.01 and c.n_tests == 1 and c.verdict == WORSE


# --------------------------------------------------------------------------------------------- margin, σ bound


def test_tightest_margin_is_the_largest_end_of_the_90_percent_ci(tmp_path: Path):
    impl = planted(0.0003, jitter=3.0)
    sweep = write_sweep(tmp_path / "s", {REF: reference(), V4: impl})
    c = build_report([sweep]).comparisons[0].loss
    d = np.array([impl[s][0] - SEED_LOSS[s] for s in range(5)])
    lo, hi = stats.t.interval(0.90, 4, loc=d.mean(), scale=d.std(ddof=1) / math.sqrt(5))
    m = max(abs(lo), abs(hi))
    assert c.tightest_margin == pytest.approx(m)
    # the planted answer: TOST calls the pair equivalent at any margin above m and at none below it
    assert build_report([sweep], margin=m * 1.01).comparisons[0].loss.verdict == EQUIVALENT
    assert build_report([sweep], margin=m * 0.99).comparisons[0].loss.verdict == INCONCLUSIVE
    text = compare_runs([sweep], sweep).read_text()
    assert 0.0048 < m < 0.0049 and "the data support equivalence within ±0.0049 nats" in text  # rounded up
    assert float(_csv(sweep / "comparison.csv")[V4_LABEL]["val_loss_tightest_margin"]) == pytest.approx(m)


def test_the_tightest_margin_shown_is_one_the_data_support(tmp_path: Path):
    """The margin the report prints (two digits) must itself be one TOST calls equivalent: rounded up, never down
    (m = 0.00482 printed as ±0.0048 claimed an equivalence that ``--margin 0.0048`` calls inconclusive)."""
    sweep = write_sweep(tmp_path / "s", {REF: reference(), V4: planted(0.0003, jitter=3.0)})
    text = compare_runs([sweep], sweep).read_text()
    shown = re.findall(r"the data support equivalence within ±([0-9.e-]+) nats", text)
    cell = re.findall(r"\| ±([0-9.e-]+) \| equivalent", _section(text, "## Paired statistics"))
    assert shown and cell[0] == shown[0]  # the verdict line and the val loss table's cell
    assert build_report([sweep], margin=float(shown[0])).comparisons[0].loss.verdict == EQUIVALENT


def test_mde_at_the_upper_confidence_bound_of_the_paired_std(tmp_path: Path):
    """With 3 seeds the one-sided 95% upper bound of a std is sqrt(2 / χ²(0.05, 2)) = 4.41 × the estimate."""
    impl = planted(0.0, seeds=(0, 1, 2), jitter=3.0)
    sweep = write_sweep(tmp_path / "s", {REF: reference((0, 1, 2)), V4: impl})
    c = build_report([sweep]).comparisons[0].loss
    assert c.sd_upper / c.sd == pytest.approx(math.sqrt(2 / stats.chi2.ppf(0.05, 2)))
    assert c.sd_upper / c.sd == pytest.approx(4.415, abs=1e-3)
    assert c.mde_upper == pytest.approx(minimum_detectable_effect(c.sd_upper, 3, alpha=0.01))  # the verdict's α
    assert c.mde_upper == pytest.approx(c.mde * c.sd_upper / c.sd)  # the MDE scales with σ at fixed n
    compare_runs([sweep], sweep)
    row = _csv(sweep / "comparison.csv")[V4_LABEL]
    assert float(row["val_loss_delta_std_upper95"]) == pytest.approx(c.sd_upper)
    assert float(row["val_loss_mde_upper95"]) == pytest.approx(c.mde_upper)


# --------------------------------------------------------------------------------------------- per-window SE


def test_per_window_se_of_the_paired_delta(tmp_path: Path):
    """Per-window losses of the final eval (8 windows): Δ_w averaged over the seeds, SE = std_w / √8. A run
    whose windows start elsewhere (another val set) is left out of it."""
    rng = np.random.default_rng(3)
    sweep = tmp_path / "s"
    pattern = np.array([0.03, -0.02, 0.01, 0.04, -0.01, 0.0, 0.02, -0.03])
    deltas = []
    for s in (0, 1, 2, 3):
        ref_w = 3.0 + rng.normal(0, 0.5, 8)
        d = pattern + rng.normal(0, 0.005, 8)
        starts = None if s < 3 else [7 + 128 * i for i in range(8)]  # seed 3's impl run: other windows
        write_run(sweep / f"ref{s}", "torch", s, float(ref_w.mean()), windows=list(ref_w))
        write_run(sweep / f"v4_{s}", "triton_v4", s, float((ref_w + d).mean()), windows=list(ref_w + d),
                  starts=starts)
        if s < 3:
            deltas.append(d)
    gc = build_report([sweep]).comparisons[0]
    mean_d = np.mean(deltas, axis=0)
    assert gc.window.seeds == 3 and gc.window.windows == 8
    assert gc.window.mean == pytest.approx(mean_d.mean())
    assert gc.window.se == pytest.approx(mean_d.std(ddof=1) / math.sqrt(8))
    assert gc.seed_se == pytest.approx(gc.loss.sd / 2)
    text = compare_runs([sweep], sweep).read_text()
    assert f"| {gc.window.se:.4f} | 8 |" in _section(text, "## Variance budget")
    assert f"; SE over 8 val windows {gc.window.se:.2g})" in text  # beside the seed CI in the verdict
    row = _csv(sweep / "comparison.csv")[V4_LABEL]
    assert float(row["val_loss_window_se"]) == pytest.approx(gc.window.se) and row["val_windows"] == "8"


def test_runs_without_window_files_have_no_window_se(tmp_path: Path):
    sweep = write_sweep(tmp_path / "s", {REF: reference(), V4: planted(0.0)})
    gc = build_report([sweep]).comparisons[0]
    assert gc.window is None
    compare_runs([sweep], sweep)
    assert _csv(sweep / "comparison.csv")[V4_LABEL]["val_loss_window_se"] == ""


# --------------------------------------------------------------------------------------------- data fingerprints


def test_runs_on_different_data_are_not_paired(tmp_path: Path):
    other = {**DATA, "corpus": "f" * 64, "id": "d" * 64}
    sweep = tmp_path / "s"
    for s in (0, 1, 2):
        write_run(sweep / f"ref{s}", "torch", s, SEED_LOSS[s])
        write_run(sweep / f"v4_{s}", "triton_v4", s, SEED_LOSS[s] + 0.001, data=other if s == 2 else DATA)
    with pytest.raises(DataMismatchError) as err:
        build_report([sweep])
    message = str(err.value)
    assert "2 different data sets" in message and "v4_2" in message and "corpus ffffffffffff" in message
    assert "\n" not in message  # one line, as every refusal
    assert err.value.groups["d" * 64] == ["v4_2"]
    report = build_report([sweep], allow_mixed=True)
    # allowed, the seeds are paired all the same: the note says so (it said they could not be)
    assert any("Different data" in note and "v4_2" in note and "paired all the same" in note
               for note in report.data_notes)


def test_runs_without_a_fingerprint_pair_with_a_warning(tmp_path: Path, caplog):
    sweep = tmp_path / "s"
    for s in (0, 1, 2):
        write_run(sweep / f"ref{s}", "torch", s, SEED_LOSS[s], data=None)
        write_run(sweep / f"v4_{s}", "triton_v4", s, SEED_LOSS[s] + JITTER[s])
    text = compare_runs([sweep], sweep).read_text()
    assert "3 run(s) recorded no data fingerprint" in text and "ref0, ref1, ref2" in text
    assert "recorded no data fingerprint" in caplog.text
    assert build_report([sweep]).comparisons[0].seeds == [0, 1, 2]  # still paired


def test_same_data_shows_its_fingerprint_without_a_note(tmp_path: Path):
    sweep = write_sweep(tmp_path / "s", {REF: reference((0, 1)), V4: planted(0.0, seeds=(0, 1))})
    text = compare_runs([sweep], sweep).read_text()
    assert "- data fingerprint: tinystories, tokenizer gpt2, tokens cccccccccccc" in text
    assert "no data fingerprint" not in text and "Different data" not in text


# --------------------------------------------------------------------------------------------- devices


def test_a_failed_job_recording_device_auto_is_not_a_second_device(tmp_path: Path):
    """A job refused before training records no device; its config says device=auto. Only completed runs'
    own devices count, so one-device runs are not reported as runs from two devices."""
    import json

    sweep = write_sweep(tmp_path / "s", {REF: reference((0, 1)), V4: planted(0.0, seeds=(0, 1))})
    failed = write_run(sweep / "9_failed", "triton_v4", 2, 3.0, status="config_error", message="bad")
    summary = json.loads((failed / "summary.json").read_text())
    del summary["device"]
    (failed / "summary.json").write_text(json.dumps(summary))
    cfg = (failed / "config.yaml").read_text().replace("device: cpu", "device: auto")
    (failed / "config.yaml").write_text(cfg)
    text = compare_runs([sweep], sweep).read_text()
    assert "Runs from" not in text and "- device: cpu\n" in text
