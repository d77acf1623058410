"""The length-generalization report on planted numbers: the mean over seeds and its Student-t CI, perplexity as
exp of them, the paired Δ against no scaling (Welch when the seeds do not pair), the table rows, the plots, and
``python -m scripts.length_report``."""

from __future__ import annotations

import csv
import importlib.util
import json
import math
from pathlib import Path

import pytest

from llm.report.length import CSV_FILE, CURVES_FILE, MD_FILE, POSITION_FILE, build_length_report, write_length_report

from .synthetic import write_run

REPO = Path(__file__).resolve().parents[2]
T975_2DF = 4.302652729911275  # Student t, 97.5% quantile, 2 degrees of freedom (tables)
PARTIAL, FULL = "torch (partial, float32)", "torch (full, float32)"
YARN = "yarn (factor L/32)"
MINUS = "\u2212"

# (variant, scaling) -> seed -> {length: val loss}
PLANTED = {
    (PARTIAL, "none"): {0: {32: 1.5, 64: 2.0}, 1: {32: 1.6, 64: 2.1}, 2: {32: 1.7, 64: 2.3}},
    (PARTIAL, YARN): {0: {32: 1.5, 64: 1.9}, 1: {32: 1.6, 64: 2.0}, 2: {32: 1.7, 64: 2.1}},
    (FULL, "none"): {0: {32: 1.4, 64: 2.5}, 1: {32: 1.5, 64: 2.6}, 2: {32: 1.6, 64: 2.4}},
    (FULL, YARN): {5: {32: 1.5, 64: 2.0}, 6: {32: 1.4, 64: 2.2}},  # other seeds: no pairs
}


def eval_json(variant: str, scaling: str, seed: int, losses: dict[int, float]) -> dict:
    return {
        "label": f"x-{scaling.split()[0]}", "seed": seed, "rope_label": variant, "scaling_label": scaling,
        "train_seq_len": 32, "tokens": 256,
        "lengths": [{"length": L, "val_loss": v, "val_acc": 0.5, "loss_beyond_train": v + 0.1 if L > 32 else None,
                     "buckets": [{"start": a, "end": a + 16, "loss": v + (a - L / 2) / 100} for a in range(0, L, 16)]}
                    for L, v in losses.items()],
    }


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    job = 0
    runs: dict[tuple[str, int], Path] = {}
    for (variant, scaling), per_seed in PLANTED.items():
        for seed, losses in per_seed.items():
            run = runs.get((variant, seed))
            if run is None:
                run = runs[(variant, seed)] = write_run(tmp_path / f"{job}_s{seed}", "torch", seed, 3.0,
                                                        variant="partial" if variant == PARTIAL else "full")
                job += 1
            (run / "eval_lengths").mkdir(exist_ok=True)
            (run / "eval_lengths" / f"{scaling.split()[0]}.json").write_text(
                json.dumps(eval_json(variant, scaling, seed, losses)))
    write_run(tmp_path / "9_none_s0", "none", 0, 3.5)  # a run nobody evaluated
    return tmp_path


def t_ci(values: list[float]) -> tuple[float, float, float]:
    """Mean and 95% CI of three values, by hand: mean ± t(0.975, 2) · s / √3."""
    mean = sum(values) / 3
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / 2)
    half = T975_2DF * sd / math.sqrt(3)
    return mean, mean - half, mean + half


def rows(path: Path) -> dict[tuple[str, str, int], dict]:
    with open(path) as f:
        return {(r["variant"], r["scaling"], int(r["length"])): r for r in csv.DictReader(f)}


def test_ci_over_seeds_and_the_paired_delta_match_hand_computed_values(sweep):
    report = build_length_report([sweep])
    write_length_report(report, sweep)
    table = rows(sweep / CSV_FILE)
    assert len(table) == 8, "variant x scaling x length: 2 x 2 x 2"

    mean, lo, hi = t_ci([2.0, 2.1, 2.3])
    r = table[(PARTIAL, "none", 64)]
    assert (int(r["n"]), r["seeds"]) == (3, "0 1 2")
    assert float(r["val_loss_mean"]) == pytest.approx(mean, abs=1e-12)
    assert (float(r["val_loss_ci_low"]), float(r["val_loss_ci_high"])) == pytest.approx((lo, hi), abs=1e-9)
    assert float(r["val_ppl"]) == pytest.approx(math.exp(mean), rel=1e-12)
    assert (float(r["val_ppl_ci_low"]), float(r["val_ppl_ci_high"])) == pytest.approx((math.exp(lo), math.exp(hi)),
                                                                                      rel=1e-9)
    assert (float(r["val_ppl_min"]), float(r["val_ppl_max"])) == pytest.approx((math.exp(2.0), math.exp(2.3)))
    assert float(r["loss_beyond_train_mean"]) == pytest.approx(mean + 0.1)
    assert r["delta_vs_none"] == "" and r["pairing"] == "", "no scaling is the reference itself"

    d_mean, d_lo, d_hi = t_ci([-0.1, -0.1, -0.2])  # yarn − none, paired by seed
    r = table[(PARTIAL, YARN, 64)]
    assert (r["pairing"], r["paired_seeds"]) == ("paired", "0 1 2")
    assert float(r["delta_vs_none"]) == pytest.approx(d_mean, abs=1e-12)
    assert (float(r["delta_ci_low"]), float(r["delta_ci_high"])) == pytest.approx((d_lo, d_hi), abs=1e-9)
    r = table[(PARTIAL, YARN, 32)]  # equal losses: no spread, CI collapses to the mean (0)
    assert (float(r["delta_vs_none"]), float(r["delta_ci_low"]), float(r["delta_ci_high"])) == (0.0, 0.0, 0.0)
    assert table[(FULL, YARN, 64)]["pairing"] == "unpaired (Welch)" and table[(FULL, YARN, 64)]["n"] == "2"

    md = (sweep / MD_FILE).read_text()
    ppl = f"{math.exp(mean):,.2f} [{math.exp(lo):,.2f}, {math.exp(hi):,.2f}]"
    assert f"| {PARTIAL} | none | 3 | " in md and ppl in md
    assert f"| {PARTIAL} | {YARN} | +0.0000 [+0.0000, +0.0000] | {MINUS}0.1333 [{MINUS}0.2768, +0.0101] |" in md
    assert "(Welch)" in md and "9_none_s0" in md.split("## Not evaluated")[1], "unevaluated runs are listed"
    for name in (CURVES_FILE, POSITION_FILE):
        assert (sweep / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and (sweep / name).stat().st_size > 10_000


def test_each_variant_is_compared_with_the_partial_reference_at_the_same_scaling_and_length(sweep):
    """full − partial, paired by seed where the seeds match (no scaling), Welch where they do not (yarn)."""
    report = build_length_report([sweep])
    write_length_report(report, sweep)
    table = rows(sweep / CSV_FILE)
    d_mean, d_lo, d_hi = t_ci([0.5, 0.5, 0.1])  # full − partial at 64, no scaling: 2.5-2.0, 2.6-2.1, 2.4-2.3
    r = table[(FULL, "none", 64)]
    assert (r["reference_variant"], r["ref_pairing"]) == (PARTIAL, "paired")
    assert float(r["delta_vs_reference_variant"]) == pytest.approx(d_mean, abs=1e-12)
    assert (float(r["ref_delta_ci_low"]), float(r["ref_delta_ci_high"])) == pytest.approx((d_lo, d_hi), abs=1e-9)
    assert table[(FULL, YARN, 64)]["ref_pairing"] == "unpaired (Welch)"
    assert table[(PARTIAL, "none", 64)]["delta_vs_reference_variant"] == "", "the reference itself"
    md = (sweep / MD_FILE).read_text()
    section = md.split(f"## Δ val loss against {PARTIAL}")[1].split("## ")[0]
    assert f"| {FULL} | none | " in section and f"+{d_mean:.4f} [{MINUS}{-d_lo:.4f}, +{d_hi:.4f}] |" in section
    assert f"| {FULL} | {YARN} | " in section and "(Welch)" in section
    assert f"| {PARTIAL} |" not in section


def test_rows_are_grouped_by_variant_then_no_scaling_first(sweep):
    report = build_length_report([sweep])
    assert report.groups == [(FULL, "none"), (FULL, YARN), (PARTIAL, "none"), (PARTIAL, YARN)]
    assert report.lengths == [32, 64]


def _load_cli():
    """scripts/length_report.py by path: under pytest, ``scripts`` is tests/scripts (the tests' own package)."""
    spec = importlib.util.spec_from_file_location("_length_report_cli", REPO / "scripts" / "length_report.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


def test_script_rebuilds_the_report_and_refuses_bad_input_in_one_line(sweep, tmp_path, capsys):
    main = _load_cli()
    out = tmp_path / "out"
    assert main([str(sweep), "--out", str(out)]) == 0
    assert all((out / f).is_file() for f in (MD_FILE, CSV_FILE, CURVES_FILE, POSITION_FILE))
    assert f"report: {out / MD_FILE}" in capsys.readouterr().out
    assert main([str(tmp_path / "nope")]) == 2
    assert capsys.readouterr().err.strip().startswith("error: argument DIR: no such file or directory")
    bare = tmp_path / "bare"
    write_run(bare / "run", "torch", 0, 3.0)
    assert main([str(bare)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: no eval_lengths/*.json under") and "\n" not in err
