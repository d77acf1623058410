"""The length-generalization report on planted numbers: the degradation, the loss beyond T and the gain over the
sliding window as mean ± the seeds' sd [95% CI of the mean], the whole-window perplexity beside them, the paired
comparisons (scaling against none inside and beyond T, variant against the reference of the same packing,
document-aligned against random training paired by seed), the table rows, the plots, and
``python -m scripts.length_report``."""

from __future__ import annotations

import csv
import importlib.util
import json
import math
import statistics
from pathlib import Path

import pytest

from llm.report.length import (
    CSV_FILE,
    CURVES_FILE,
    MD_FILE,
    POSITION_FILE,
    build_length_report,
)
from llm.report.length_writers import length_markdown, write_length_report

from .synthetic import write_run

REPO = Path(__file__).resolve().parents[2]
T975_2DF = 4.302652729911275  # Student t, 97.5% quantile, 2 degrees of freedom (tables)
T = 32
PARTIAL, FULL = "torch (partial, float32)", "torch (full, float32)"
PARTIAL_DOCS, FULL_DOCS = PARTIAL + " · documents", FULL + " · documents"
YARN = "yarn (factor L/32)"
MINUS = "\u2212"

# (variant, scaling) -> seed -> {length: whole-window val loss}
PLANTED = {
    (PARTIAL, "none"): {0: {32: 1.5, 64: 2.0}, 1: {32: 1.6, 64: 2.1}, 2: {32: 1.7, 64: 2.3}},
    (PARTIAL, YARN): {0: {32: 1.5, 64: 1.9}, 1: {32: 1.6, 64: 2.0}, 2: {32: 1.7, 64: 2.1}},
    (FULL, "none"): {0: {32: 1.4, 64: 2.5}, 1: {32: 1.5, 64: 2.6}, 2: {32: 1.6, 64: 2.4}},
    (FULL, YARN): {5: {32: 1.5, 64: 2.0}, 6: {32: 1.4, 64: 2.2}},  # other seeds: no pairs
    (PARTIAL_DOCS, "none"): {0: {32: 1.45, 64: 1.8}, 1: {32: 1.5, 64: 1.85}, 2: {32: 1.6, 64: 2.1}},
    (FULL_DOCS, "none"): {0: {32: 1.4, 64: 2.2}, 1: {32: 1.45, 64: 2.4}, 2: {32: 1.5, 64: 2.25}},
}
#: Each run's own level: the loss of its sliding-window baseline beyond T (the same for every scaling of a run).
LEVEL = {PARTIAL: {0: 1.6, 1: 1.75, 2: 1.8}, FULL: {0: 1.5, 1: 1.6, 2: 1.7, 5: 1.65, 6: 1.55},
         PARTIAL_DOCS: {0: 1.5, 1: 1.6, 2: 1.65}, FULL_DOCS: {0: 1.45, 1: 1.5, 2: 1.6}}
#: What a scaling costs the short context: its sliding-window loss above the run's level.
COST = {"none": 0.0, YARN: 0.05}


def beyond(v: float) -> float:
    return v + 0.1


def within(v: float) -> float:
    return v - 0.1


def degradation(variant: str, scaling: str, seed: int, L: int) -> float:
    return beyond(PLANTED[(variant, scaling)][seed][L]) - LEVEL[variant][seed]


def eval_json(variant: str, scaling: str, seed: int, losses: dict[int, float]) -> dict:
    level = LEVEL[variant][seed]
    rotation = variant.removesuffix(" · documents")
    lengths = []
    for L, v in losses.items():
        m = {"length": L, "val_loss": v, "val_acc": 0.5, "val_tokens": 256, "windows": 256 // L, "documents": 3,
             "eligible_documents": 5, "eligible_tokens": 640, "loss_within_train": within(v),
             "buckets": [{"start": a, "end": a + 16, "loss": v + (a - L / 2) / 100, "baseline": level + a / 1000}
                         for a in range(0, L, 16)]}
        if L > T:
            sliding = level + COST.get(scaling, 0.0)
            m.update(loss_beyond_train=beyond(v), baseline_beyond_train=level, sliding_beyond_train=sliding,
                     degradation=beyond(v) - level, gain_beyond_train=beyond(v) - sliding)
        else:
            m.update(loss_beyond_train=None, degradation=None, gain_beyond_train=None)
        lengths.append(m)
    return {"label": f"x-{scaling.split()[0]}", "seed": seed, "rope_label": rotation, "scaling_label": scaling,
            "train_seq_len": T, "reference_len": T, "tokens": 256, "baseline": {"window": T, "stride": T // 2},
            "packing": "documents" if variant.endswith("documents") else "random", "init_from": None,
            "lengths": lengths}


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    return planted_sweep(tmp_path)


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> Path:
    """A planted sweep and its length report, built and written once for the tests that only read them."""
    sweep = planted_sweep(tmp_path_factory.mktemp("length_report"))
    write_length_report(build_length_report([sweep]), sweep)
    return sweep


def planted_sweep(root: Path) -> Path:
    """PLANTED's runs, one job dir each (with their eval_lengths results), and a run nobody evaluated."""
    job = 0
    runs: dict[tuple[str, int], Path] = {}
    for (variant, scaling), per_seed in PLANTED.items():
        for seed, losses in per_seed.items():
            run = runs.get((variant, seed))
            if run is None:
                run = runs[(variant, seed)] = write_run(root / f"{job}_s{seed}", "torch", seed, 3.0,
                                                        variant="full" if variant.startswith(FULL) else "partial")
                job += 1
            (run / "eval_lengths").mkdir(exist_ok=True)
            (run / "eval_lengths" / f"{scaling.split()[0]}.json").write_text(
                json.dumps(eval_json(variant, scaling, seed, losses)))
    write_run(root / "9_none_s0", "none", 0, 3.5)  # a run nobody evaluated
    return root


def t_ci(values: list[float]) -> tuple[float, float, float]:
    """Mean and 95% CI of three values, by hand: mean ± t(0.975, 2) · s / √3."""
    mean = sum(values) / 3
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / 2)
    half = T975_2DF * sd / math.sqrt(3)
    return mean, mean - half, mean + half


def rows(path: Path) -> dict[tuple[str, str, int], dict]:
    with open(path) as f:
        return {(r["variant"], r["scaling"], int(r["length"])): r for r in csv.DictReader(f)}


def section(md: str, title: str) -> str:
    return md.split(f"## {title}")[1].split("\n## ")[0]


def test_degradation_is_mean_sd_and_ci_over_seeds_with_the_whole_window_beside_it(written):
    sweep = written
    table = rows(sweep / CSV_FILE)
    assert len(table) == 12, "variant x scaling x length: 6 x 2"

    degr = [degradation(PARTIAL, "none", s, 64) for s in (0, 1, 2)]
    mean, lo, hi = t_ci(degr)
    r = table[(PARTIAL, "none", 64)]
    assert (int(r["n"]), r["seeds"], r["reference_len"], r["tokens"], r["documents"]) == (3, "0 1 2", "32", "256", "3")
    assert float(r["degradation_mean"]) == pytest.approx(mean, abs=1e-12)
    assert float(r["degradation_sd"]) == pytest.approx(statistics.stdev(degr), abs=1e-12)
    assert (float(r["degradation_ci_low"]), float(r["degradation_ci_high"])) == pytest.approx((lo, hi), abs=1e-9)
    b_mean, b_lo, b_hi = t_ci([2.1, 2.2, 2.4])
    assert float(r["loss_beyond_train_mean"]) == pytest.approx(b_mean)
    assert (float(r["loss_beyond_train_ci_low"]), float(r["loss_beyond_train_ci_high"])) == pytest.approx((b_lo, b_hi))
    assert float(r["gain_beyond_train_mean"]) == pytest.approx(mean), "no scaling: the model's baseline is the run's"
    v_mean, v_lo, v_hi = t_ci([2.0, 2.1, 2.3])
    assert float(r["val_ppl"]) == pytest.approx(math.exp(v_mean), rel=1e-12)
    assert (float(r["val_ppl_ci_low"]), float(r["val_ppl_ci_high"])) == pytest.approx((math.exp(v_lo), math.exp(v_hi)))
    assert (float(r["val_ppl_min"]), float(r["val_ppl_max"])) == pytest.approx((math.exp(2.0), math.exp(2.3)))
    assert r["vs_none_loss_beyond_train_delta"] == "" and r["vs_none_pairing"] == "", "none is the reference itself"
    at_t = table[(PARTIAL, "none", 32)]
    assert at_t["degradation_mean"] == "" and at_t["loss_beyond_train_mean"] == "", "nothing lies beyond T at T"

    md = (sweep / MD_FILE).read_text()
    assert "`± sd` (the seeds' standard deviation" in md and "95% Student-t confidence interval of the mean" in md
    cell = f"{signed(mean)} ± {statistics.stdev(degr):.4f} [{signed(lo)}, {signed(hi)}]"
    degr_table = section(md, "Degradation beyond T")
    assert f"| {PARTIAL} | none | 3 | {cell} |" in degr_table and "| 32 |" not in degr_table.split("\n|")[0]
    ppl = f"{math.exp(v_mean):,.2f} [{math.exp(v_lo):,.2f}, {math.exp(v_hi):,.2f}]"
    assert ppl in section(md, "Whole-window perplexity")
    data = section(md, "Evaluation data")
    assert "| 64 | 256 | 4 | 3 | 5 | 640 |" in data
    assert "9_none_s0" in section(md, "Not evaluated"), "unevaluated runs are listed"
    for name in (CURVES_FILE, POSITION_FILE):
        assert (sweep / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and (sweep / name).stat().st_size > 10_000


def signed(v: float) -> str:
    return f"{v:+.4f}".replace("-", MINUS)


def test_a_scaling_is_compared_with_none_beyond_and_inside_the_training_length(written):
    sweep = written
    table = rows(sweep / CSV_FILE)
    r = table[(PARTIAL, YARN, 64)]
    d_mean, d_lo, d_hi = t_ci([-0.1, -0.1, -0.2])  # yarn − none beyond T, paired by seed
    assert (r["vs_none_pairing"], r["vs_none_seeds"]) == ("paired", "0 1 2")
    assert float(r["vs_none_loss_beyond_train_delta"]) == pytest.approx(d_mean, abs=1e-12)
    assert (float(r["vs_none_loss_beyond_train_ci_low"]), float(r["vs_none_loss_beyond_train_ci_high"])) == \
        pytest.approx((d_lo, d_hi), abs=1e-9)
    assert float(r["gain_beyond_train_mean"]) == pytest.approx(float(r["degradation_mean"]) - COST[YARN])
    r = table[(PARTIAL, YARN, 32)]  # equal losses inside T: no spread, the CI collapses to the mean (0)
    assert (float(r["vs_none_loss_within_train_delta"]), float(r["vs_none_loss_within_train_ci_low"])) == (0.0, 0.0)
    assert r["vs_none_loss_beyond_train_delta"] == ""
    assert table[(FULL, YARN, 64)]["vs_none_pairing"] == "unpaired (Welch)" and table[(FULL, YARN, 64)]["n"] == "2"
    md = (sweep / MD_FILE).read_text()
    scaling = section(md, "Scaling − none, same variant and length")
    beyond_part, inside_part = scaling.split("Inside T")[0], scaling.split("Inside T")[1].split("Whole window")[0]
    delta = f"{MINUS}0.1333 [{MINUS}0.2768, +0.0101]"
    assert f"| {PARTIAL} | {YARN} | {delta} |" in beyond_part
    assert f"| {PARTIAL} | {YARN} | +0.0000 [+0.0000, +0.0000] | {delta} |" in inside_part
    assert "(Welch, 2 vs 3 runs)" in beyond_part  # an unpaired Δ says on how many runs of each side


def test_each_variant_is_compared_with_the_partial_reference_on_its_degradation(written):
    """full − partial, paired by seed where the seeds match (no scaling), Welch where they do not (yarn)."""
    sweep = written
    table = rows(sweep / CSV_FILE)
    diffs = [degradation(FULL, "none", s, 64) - degradation(PARTIAL, "none", s, 64) for s in (0, 1, 2)]
    d_mean, d_lo, d_hi = t_ci(diffs)
    r = table[(FULL, "none", 64)]
    assert (r["reference_variant"], r["vs_reference_pairing"]) == (PARTIAL, "paired")
    assert float(r["vs_reference_degradation_delta"]) == pytest.approx(d_mean, abs=1e-12)
    assert (float(r["vs_reference_degradation_ci_low"]), float(r["vs_reference_degradation_ci_high"])) == \
        pytest.approx((d_lo, d_hi), abs=1e-9)
    assert float(r["vs_reference_val_loss_delta"]) == pytest.approx(statistics.fmean([0.5, 0.5, 0.1]))
    assert table[(FULL, YARN, 64)]["vs_reference_pairing"] == "unpaired (Welch)"
    assert table[(PARTIAL, "none", 64)]["vs_reference_degradation_delta"] == "", "the reference itself"
    md = (sweep / MD_FILE).read_text()
    against = section(md, f"Variant − {PARTIAL}").split("Loss beyond T")[0]
    assert f"| {FULL} | none | {signed(d_mean)} [{signed(d_lo)}, {signed(d_hi)}] |" in against
    assert f"| {FULL} | {YARN} | " in against and "(Welch, 2 vs 3 runs)" in against and f"| {PARTIAL} |" not in against


def test_document_aligned_training_is_compared_with_random_windows_of_the_same_rotation(written):
    """documents − random, paired by seed, per rotation: on the degradation and on the loss beyond T."""
    sweep = written
    table = rows(sweep / CSV_FILE)
    md = section((sweep / MD_FILE).read_text(), "Document-aligned − random training windows")
    degr_part, beyond_part = md.split("Loss beyond T")[0], md.split("Loss beyond T")[1].split("Whole window")[0]
    for docs, rand in ((PARTIAL_DOCS, PARTIAL), (FULL_DOCS, FULL)):
        r = table[(docs, "none", 64)]
        diffs = [degradation(docs, "none", s, 64) - degradation(rand, "none", s, 64) for s in (0, 1, 2)]
        d_mean, d_lo, d_hi = t_ci(diffs)
        assert (r["random_packing_variant"], r["vs_random_pairing"]) == (rand, "paired")
        assert float(r["vs_random_degradation_delta"]) == pytest.approx(d_mean, abs=1e-12)
        assert (float(r["vs_random_degradation_ci_low"]), float(r["vs_random_degradation_ci_high"])) == \
            pytest.approx((d_lo, d_hi), abs=1e-9)
        b_mean, b_lo, b_hi = t_ci([PLANTED[(docs, "none")][s][64] - PLANTED[(rand, "none")][s][64] for s in (0, 1, 2)])
        assert float(r["vs_random_loss_beyond_train_delta"]) == pytest.approx(b_mean, abs=1e-12)
        assert f"| {docs} | none | {signed(d_mean)} [{signed(d_lo)}, {signed(d_hi)}] |" in degr_part
        assert f"| {docs} | none | {signed(b_mean)} [{signed(b_lo)}, {signed(b_hi)}] |" in beyond_part
    assert table[(PARTIAL, "none", 64)]["vs_random_degradation_delta"] == "", "a random-windows run is the reference"
    assert f"| {PARTIAL} |" not in md and f"| {FULL} |" not in md


def test_variants_are_compared_within_their_own_packing(written):
    """full − partial among document-aligned runs pairs with the document-aligned partial runs, never with the
    random-window ones (that would add the packing's effect to the variant's); the documents reference has no Δ."""
    sweep = written
    table = rows(sweep / CSV_FILE)
    r = table[(FULL_DOCS, "none", 64)]
    diffs = [degradation(FULL_DOCS, "none", s, 64) - degradation(PARTIAL_DOCS, "none", s, 64) for s in (0, 1, 2)]
    d_mean, d_lo, d_hi = t_ci(diffs)
    assert (r["reference_variant"], r["vs_reference_pairing"]) == (PARTIAL_DOCS, "paired")
    assert float(r["vs_reference_degradation_delta"]) == pytest.approx(d_mean, abs=1e-12)
    assert table[(PARTIAL_DOCS, "none", 64)]["vs_reference_degradation_delta"] == "", "its packing's reference"
    assert table[(FULL, "none", 64)]["reference_variant"] == PARTIAL
    md = section((sweep / MD_FILE).read_text(), f"Variant − {PARTIAL}, same packing").split("Loss beyond T")[0]
    assert f"| {FULL_DOCS} | none | {signed(d_mean)} [{signed(d_lo)}, {signed(d_hi)}] |" in md
    assert f"| {PARTIAL_DOCS} |" not in md


def test_the_per_length_factor_is_explained_only_where_a_scaling_has_one(sweep):
    """The scalings line explained ``factor L/N`` under every report, one of fixed factors (``yarn x4``) or none
    included; it does where a scaling's factor follows the length (``yarn (factor L/32)``)."""
    line = next(ln for ln in length_markdown(build_length_report([sweep])).splitlines() if ln.startswith("- scalings"))
    assert line == f"- scalings: none, {YARN} (`factor L/N`: the factor L/N at each length L, at least 1)"
    for path in sweep.rglob("eval_lengths/yarn.json"):
        path.unlink()
    line = next(ln for ln in length_markdown(build_length_report([sweep])).splitlines() if ln.startswith("- scalings"))
    assert line == "- scalings: none"


def test_a_fine_tuned_run_is_its_own_row_beside_the_zero_shot_ones(sweep):
    run = sweep / "0_s0"
    data = eval_json(PARTIAL, "yarn x2", 0, {32: 1.4, 64: 1.7})
    data.update(init_from="/runs/base", train_seq_len=64)
    (run / "eval_lengths" / "ft.json").write_text(json.dumps(data))
    report = build_length_report([sweep])
    assert (PARTIAL, "yarn x2 · fine-tuned at 64") in [(v, s) for v, s, _ in report.groups]
    cell = report.cell(PARTIAL, "yarn x2 · fine-tuned at 64", 64)
    assert cell.summary("degradation").mean == pytest.approx(1.8 - LEVEL[PARTIAL][0])


def test_rows_are_grouped_by_variant_then_no_scaling_first(sweep):
    report = build_length_report([sweep])
    assert [(v, s) for v, s, _ in report.groups] == [(FULL, "none"), (FULL, YARN), (PARTIAL, "none"), (PARTIAL, YARN),
                                                     (FULL_DOCS, "none"), (PARTIAL_DOCS, "none")], "packings apart"
    assert report.lengths == [32, 64] and report.beyond_lengths == [64]


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
    stopped = tmp_path / "stopped"
    _evaluated_run(stopped / "run", 0, status="interrupted")  # evaluated, but not finished: not "no eval_lengths"
    assert main([str(stopped)]) == 2
    assert capsys.readouterr().err.strip().startswith("error: no completed run under: ")
    (tmp_path / "file").write_text("")
    assert main([str(sweep), "--out", str(tmp_path / "file" / "sub")]) == 2
    file = tmp_path / "file"
    assert capsys.readouterr().err.strip() == (f"error: argument --out: cannot write the report to {file / 'sub'}: "
                                               f"{file} is a file, not a folder")



def test_ctrl_c_while_writing_leaves_the_earlier_report_whole(sweep, tmp_path, capsys, monkeypatch):
    """Ctrl-C while the plots were drawn left a new length_report.md beside the earlier report's .csv and plots (and
    a traceback); the report is now written beside OUTDIR and moved in whole, and an interrupt leaves OUTDIR as it
    was, in one line."""
    main, out = _load_cli(), tmp_path / "out"
    assert main([str(sweep), "--out", str(out)]) == 0
    before = {f.name: (f.read_bytes(), f.stat().st_mtime_ns) for f in out.iterdir()}  # untouched, not rewritten

    def interrupted(report, path):  # Ctrl-C while the last plot is drawn: the new Markdown and CSV are written
        raise KeyboardInterrupt

    monkeypatch.setattr("llm.report.length_writers.plot_position_loss", interrupted)
    capsys.readouterr()
    assert main([str(sweep), "--out", str(out)]) == 130
    assert capsys.readouterr().err.strip() == f"interrupted: {out} left as it was"
    assert {f.name: (f.read_bytes(), f.stat().st_mtime_ns) for f in out.iterdir()} == before
    assert not [p for p in tmp_path.iterdir() if ".partial" in p.name]  # no temporary left


def _evaluated_run(path: Path, seed: int, **kwargs) -> Path:
    run = write_run(path, "torch", seed, 3.0, **kwargs)
    (run / "eval_lengths").mkdir()
    (run / "eval_lengths" / "none.json").write_text(json.dumps(eval_json(PARTIAL, "none", 0, {32: 9.0, 64: 9.0})))
    return run


def test_runs_that_did_not_complete_are_left_out_and_named(sweep: Path):
    _evaluated_run(sweep / "10_s7", 7, status="nonfinite", message="loss is nan at step 9")
    report = build_length_report([sweep])
    assert report.cell(PARTIAL, "none", 64).n == 3  # the nonfinite run's evaluation is not a fourth seed
    text = write_length_report(report, sweep).read_text()
    assert "1 run(s) did not complete and are left out: 10_s7 (nonfinite)" in text


def test_a_row_whose_runs_differ_in_config_says_which_keys(sweep: Path):
    import yaml

    run = _evaluated_run(sweep / "10_s7", 7)
    for name in ("config.yaml", ".hydra/config.yaml"):
        cfg = yaml.safe_load((run / name).read_text())
        cfg["model"]["n_layer"] = 12
        (run / name).write_text(yaml.safe_dump(cfg))
    text = write_length_report(build_length_report([sweep]), sweep).read_text()
    assert f"**Warning**: the runs of {PARTIAL} · none differ in more than the seed" in text
    assert "model.n_layer" in text
    assert f"runs of {FULL} · none differ" not in text


def test_runs_on_other_data_are_refused_naming_them(sweep: Path):
    from llm.report.errors import DataMismatchError

    from .synthetic import DATA

    _evaluated_run(sweep / "10_s7", 7, data={**DATA, "id": "d" * 64})
    with pytest.raises(DataMismatchError, match="10_s7"):
        build_length_report([sweep])


def test_scalings_that_share_no_length_with_none_are_said_to_be_evaluated(tmp_path: Path):
    """A scaling evaluated only at lengths where none was not: the section says they share no length (it said no
    scaling was evaluated, beside tables listing the scaled rows)."""
    run = write_run(tmp_path / "0_s0", "torch", 0, 3.0)
    (run / "eval_lengths").mkdir()
    (run / "eval_lengths" / "none.json").write_text(json.dumps(eval_json(PARTIAL, "none", 0, {32: 9.0, 64: 9.0})))
    (run / "eval_lengths" / "yarn.json").write_text(json.dumps(eval_json(PARTIAL, "yarn", 0, {128: 9.5})))
    md = write_length_report(build_length_report([tmp_path]), tmp_path).read_text()
    scaling = section(md, "Scaling − none, same variant and length")
    assert "no scaling shares a length with an evaluation without scaling" in scaling, scaling
    assert "no scaling other than none was evaluated" not in scaling


def _evaluation(run: Path, name: str, scaling: str, losses: dict[int, float], tokens: int, taken: int | None = None,
                **extra) -> None:
    """An evaluation with a budget of ``tokens`` that took ``taken`` target tokens at each length (default: all)."""
    data = {**eval_json(PARTIAL, scaling, 0, losses), "tokens": tokens, **extra}
    for m in data["lengths"]:
        m["val_tokens"] = taken or tokens
    (run / "eval_lengths").mkdir(exist_ok=True)
    (run / "eval_lengths" / f"{name}.json").write_text(json.dumps(data))


def test_a_scaling_is_not_compared_with_none_evaluated_on_other_targets(tmp_path: Path):
    """none with tokens=4096 and yarn with tokens=256: other windows, so their Δ would be the targets' difference
    (here +0.4 inside T, where a scaling changes nothing); the Δ is n/a, with a note naming the budgets."""
    run = write_run(tmp_path / "0_s0", "torch", 0, 3.0)
    _evaluation(run, "none", "none", {32: 2.0, 64: 2.5}, 4096)
    _evaluation(run, "yarn", YARN, {32: 2.4, 64: 2.6}, 256)
    report = build_length_report([tmp_path])
    assert report.cell(PARTIAL, YARN, 32).vs_none == {}
    md = write_length_report(report, tmp_path).read_text()
    scaling = section(md, "Scaling − none, same variant and length")
    assert f"| {PARTIAL} | {YARN} · tokens=256 | n/a |" in scaling, scaling
    assert "+0.4000" not in scaling
    assert "n/a: no evaluation without scaling of the same variant on the same targets" in scaling
    assert "tokens=4096" in scaling
    r = rows(tmp_path / CSV_FILE)[(PARTIAL, YARN, 32)]
    assert (r["budget"], r["vs_none_loss_within_train_delta"]) == ("256", "")
    assert r["vs_none_pairing"].startswith("n/a")


def test_evaluations_of_one_seed_on_other_targets_are_neither_averaged_nor_crossed(tmp_path: Path):
    """none at two budgets and yarn at one of them: two none rows (not one averaged cell), and yarn's Δ pairs with
    the none of its own budget (0 inside T, where yarn equals none on the same windows)."""
    run = write_run(tmp_path / "0_s0", "torch", 0, 3.0)
    _evaluation(run, "none", "none", {32: 2.0, 64: 2.5}, 4096)
    _evaluation(run, "none_small", "none", {32: 2.4, 64: 2.9}, 256)
    _evaluation(run, "yarn", YARN, {32: 2.4, 64: 2.6}, 256)
    report = build_length_report([tmp_path])
    nones = sorted(c.summary("val_loss").mean for c in report.cells if c.scaling == "none" and c.length == 32)
    assert nones == [2.0, 2.4]
    assert report.cell(PARTIAL, YARN, 32).vs_none["val_loss"].delta == pytest.approx(0.0)
    assert report.cell(PARTIAL, YARN, 64).vs_none["loss_beyond_train"].delta == pytest.approx(-0.3)
    md = write_length_report(report, tmp_path).read_text()
    assert "several evaluations of one seed were averaged" not in md
    with open(tmp_path / CSV_FILE) as f:
        table = {(r["scaling"], r["budget"], int(r["length"])): r for r in csv.DictReader(f)}
    assert float(table[("none", "256", 32)]["val_loss_mean"]) == pytest.approx(2.4)
    assert float(table[("none", "4096", 32)]["val_loss_mean"]) == pytest.approx(2.0)
    assert table[(YARN, "256", 32)]["vs_none_val_loss_delta"] == "0.0"
    assert f"| {PARTIAL} | none · tokens=256 | 1 |" in section(md, "Whole-window perplexity")


def test_the_curves_draw_each_set_of_targets_on_axes_of_its_own(tmp_path: Path, monkeypatch):
    """Lines on other windows share no axes, so the plot shows no gap the targets made."""
    from llm.report import length_writers

    run = write_run(tmp_path / "0_s0", "torch", 0, 3.0)
    _evaluation(run, "none", "none", {32: 2.0, 64: 2.5}, 4096)
    _evaluation(run, "yarn", YARN, {32: 2.4, 64: 2.6}, 256)
    figures = []
    monkeypatch.setattr(length_writers, "_save", lambda fig, path, **_: figures.append(fig))
    report = build_length_report([tmp_path])
    length_writers.plot_length_curves(report, tmp_path / CURVES_FILE)
    length_writers.plot_position_loss(report, tmp_path / POSITION_FILE)
    curves, positions = figures
    assert len(curves.axes) == 6 and len(positions.axes) == 2
    for ax in [*curves.axes, *positions.axes]:
        assert len({line.get_label() for line in ax.get_lines() if not line.get_label().startswith("_")}) <= 2
        assert len({line.get_linestyle() for line in ax.get_lines() if line.get_label().startswith(PARTIAL)
                    and "baseline" not in line.get_label()}) <= 1


def test_budgets_that_took_the_same_windows_at_a_length_are_compared_there(tmp_path: Path):
    """At a length whose documents hold less than either budget, both take every window: the same targets, so the
    Δ is given; at a length where the budgets took other windows, it is n/a."""
    run = write_run(tmp_path / "0_s0", "torch", 0, 3.0)
    _evaluation(run, "none", "none", {64: 2.5}, 4096, taken=640)
    _evaluation(run, "yarn", YARN, {64: 2.4}, 8192, taken=640)
    _evaluation(run, "none_short", "none", {32: 2.0}, 4096)
    _evaluation(run, "yarn_short", YARN, {32: 2.1}, 8192)
    report = build_length_report([tmp_path])
    assert report.cell(PARTIAL, YARN, 64).vs_none["val_loss"].delta == pytest.approx(-0.1)
    assert report.cell(PARTIAL, YARN, 32).vs_none == {} and "vs_none" in report.cell(PARTIAL, YARN, 32).other_targets


def _set_seed_1_at_64(sweep: Path, **values: object) -> None:
    """Set ``values`` in the partial rotation's yarn evaluation of seed 1, at length 64."""
    path = next(p for p in sweep.rglob("eval_lengths/yarn.json")
                if json.loads(p.read_text())["seed"] == 1 and json.loads(p.read_text())["rope_label"] == PARTIAL)
    data = json.loads(path.read_text())
    for m in data["lengths"]:
        if m["length"] == 64:
            m.update(values)
    path.write_text(json.dumps(data))


def test_a_nonfinite_evaluation_is_left_out_and_named(tmp_path: Path):
    """One seed's loss at 64 is inf (an overflow): the report is written (inf broke ``statistics.stdev``), that cell
    is over the two finite seeds, and a note names the value left out."""
    sweep = planted_sweep(tmp_path)
    _set_seed_1_at_64(sweep, val_loss="inf", loss_beyond_train="inf", degradation="inf")
    report = build_length_report([sweep])
    cell = report.cell(PARTIAL, YARN, 64)
    assert cell.n == 2 and cell.summary("val_loss").mean == pytest.approx(statistics.fmean([1.9, 2.1]))
    text = length_markdown(report)
    assert (f"1 evaluation(s) have a nan/inf value, left out of the statistics: {PARTIAL} · {YARN} seed 1 at 64: "
            "val_loss, loss_beyond_train, degradation") in text


@pytest.mark.parametrize("lacking", [PARTIAL, FULL])
def test_a_comparison_paired_on_fewer_seeds_than_its_cell_says_how_many(tmp_path: Path, lacking: str):
    """The reference (or the full rotation) lacks seed 2's evaluation without scaling: the full rotation pairs with
    the reference on seeds 0 and 1, and its Δ says so (it read as a Δ over the row's three seeds; and with the
    seed missing on the full row's own side, over its two, as if none were left out); the CSV names the seeds
    paired."""
    sweep = planted_sweep(tmp_path)
    path = next(p for p in sweep.rglob("eval_lengths/none.json")
                if (d := json.loads(p.read_text()))["seed"] == 2 and d["rope_label"] == lacking
                and d["packing"] == "random")
    path.unlink()
    report = build_length_report([sweep])
    write_length_report(report, sweep)
    table = section(length_markdown(report), f"Variant {MINUS} {PARTIAL}, same packing, scaling and length")
    row = next(ln for ln in table.splitlines() if ln.startswith(f"| {FULL} | none |"))
    assert row.count("(2 of 3 seeds paired)") == 1, row  # at 64, the one length beyond T
    r = rows(sweep / CSV_FILE)[(FULL, "none", 64)]
    assert (r["n"], r["vs_reference_pairing"], r["vs_reference_seeds"]) == (
        "3" if lacking == PARTIAL else "2", "paired", "0 1")


def test_a_hand_edited_length_entry_names_the_file_unreadable(tmp_path: Path):
    """An entry of ``lengths`` that is not an object with an integer length crashed the report (a traceback), and
    ``"length": "64"`` silently dropped that seed at 64; the file is now named unreadable and the rest reported."""
    sweep = planted_sweep(tmp_path)
    paths = [p for p in sorted(sweep.rglob("eval_lengths/none.json"))
             if (d := json.loads(p.read_text()))["rope_label"] == PARTIAL and d["packing"] == "random"]
    for path, edit in zip(paths[:2], ("not an entry", "64"), strict=True):
        data = json.loads(path.read_text())
        if edit == "64":
            data["lengths"][1]["length"] = "64"
        else:
            data["lengths"].append(edit)
        path.write_text(json.dumps(data))
    report = build_length_report([sweep])
    assert report.cell(PARTIAL, "none", 64).n == 1
    assert sorted(u.split(" ")[0] for u in report.unreadable) == [str(p) for p in paths[:2]]
    assert all("is not an object with an integer length" in u for u in report.unreadable)
    # a run whose only evaluation does not read is not said to have none: its file is listed just below
    lone = paths[0].parent.parent
    for other in lone.glob("eval_lengths/*.json"):
        if other != paths[0]:
            other.unlink()
    report = build_length_report([sweep])
    line = next(ln for ln in length_markdown(report).splitlines() if ln.startswith(f"- `{lone.name}`"))
    assert line.endswith("no eval_lengths/*.json that reads (below)"), line


def test_a_cell_over_fewer_seeds_than_its_row_says_its_own_n(tmp_path: Path):
    """Seed 2 was not evaluated at 128: that cell is over seeds 0 and 1, and says ``(n=2)`` beside the row's n of 3
    (it read as a mean over the three seeds the n column names)."""
    for seed, losses in {0: {32: 1.5, 64: 2.0, 128: 2.4}, 1: {32: 1.6, 64: 2.1, 128: 2.6},
                         2: {32: 1.7, 64: 2.3}}.items():
        run = write_run(tmp_path / f"{seed}_s{seed}", "torch", seed, 3.0)
        (run / "eval_lengths").mkdir()
        (run / "eval_lengths" / "none.json").write_text(json.dumps(eval_json(PARTIAL, "none", seed, losses)))
    md = length_markdown(build_length_report([tmp_path]))
    row = next(ln for ln in section(md, "Degradation beyond T").splitlines() if ln.startswith(f"| {PARTIAL} |"))
    cells = row.split(" | ")
    assert cells[2] == "3" and not cells[3].endswith("(n=2)") and cells[4].endswith("(n=2) |"), row
    row = next(ln for ln in section(md, "Whole-window perplexity").splitlines() if ln.startswith(f"| {PARTIAL} |"))
    assert row.endswith("(n=2) |") and row.count("(n=2)") == 1, row


def test_a_loss_written_as_null_is_named_as_nonfinite(tmp_path: Path):
    """``llm.eval_lengths`` writes a nan/inf loss as null: seed 1 of the yarn row vanished from its cells with no
    note (and its accuracy of a diverged model stayed in the CSV's mean); the note now names it, while the null
    beyond-T metrics at a length <= T are not named."""
    sweep = planted_sweep(tmp_path)
    _set_seed_1_at_64(sweep, val_loss=None, loss_within_train=None, loss_beyond_train=None, degradation=None,
                      val_acc=0.0)
    report = build_length_report([sweep])
    assert report.cell(PARTIAL, YARN, 64).n == 2
    text = write_length_report(report, sweep).read_text()
    assert (f"1 evaluation(s) have a nan/inf value, left out of the statistics: {PARTIAL} · {YARN} seed 1 at 64: "
            "val_loss, loss_within_train, loss_beyond_train, degradation (") in text
    assert float(rows(sweep / CSV_FILE)[(PARTIAL, YARN, 64)]["val_acc_mean"]) == pytest.approx(0.5)


def test_a_delta_of_one_seed_says_it_has_no_ci(tmp_path: Path):
    """One run per variant: each Δ is one seed's (``n=1``, no CI); the comparison's text said nothing of it."""
    run = write_run(tmp_path / "0_s0", "torch", 0, 3.0)
    _evaluation(run, "none", "none", {32: 2.0, 64: 2.5}, 256)
    _evaluation(run, "yarn", YARN, {32: 2.1, 64: 2.4}, 256)
    md = length_markdown(build_length_report([tmp_path]))
    scaling = section(md, "Scaling − none, same variant and length")
    assert f"| {PARTIAL} | {YARN} | {MINUS}0.1000 n=1 |" in scaling, scaling
    assert "`n=1`: one seed, no CI" in scaling
    # the other tables' cells of one seed, perplexity's too, as their legend writes it
    assert f"{math.exp(2.5):.2f} (n=1) |" in section(md, "Whole-window perplexity")


def test_an_evaluation_of_a_checkpoint_before_the_run_s_end_is_left_out_and_named(tmp_path: Path):
    """An evaluation made while the run still trained (or before a resume took it further) measures a shorter
    training: it was averaged as the run's seed without a word; it is now left out, named with the command that
    evaluates the final checkpoint. One of the run's own final step counts as before."""
    sweep = planted_sweep(tmp_path)
    paths = [p for p in sorted(sweep.rglob("eval_lengths/none.json"))
             if (d := json.loads(p.read_text()))["rope_label"] == PARTIAL and d["packing"] == "random"]
    for path, step in zip(paths[:2], (40, 100), strict=True):  # the runs ended at step 100 (write_run)
        path.write_text(json.dumps({**json.loads(path.read_text()), "step": step}))
    report = build_length_report([sweep])
    assert report.cell(PARTIAL, "none", 64).n == 2
    note = next(n for n in report.notes if "before their run's end" in n)
    run = paths[0].parents[1]
    assert f"`{paths[0]}` (step 40; the run ended at step 100: python -m llm.eval_lengths run={run}" in note
    assert str(paths[1]) not in note and note in length_markdown(report)
