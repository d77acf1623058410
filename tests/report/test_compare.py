"""Run comparison (llm.report, scripts.compare, the Hydra callback) on synthetic run dirs."""

from __future__ import annotations

import copy
import csv
import json
import logging
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from llm.report import (
    CSV_FILE,
    CURVES_FILE,
    MD_FILE,
    SPEED_FILE,
    MixedRunsError,
    NoRunsError,
    build_report,
    compare_runs,
    find_run_dirs,
    mean_std,
)
from llm.report.callback import CompareOnMultirunEnd
from llm.report.markdown import render_markdown
from llm.report.runs import load_run
from llm.report.sharing import concurrent_runs
from llm.report.stats import WELCH

from .synthetic import CONFIG as SYNTHETIC_CONFIG
from .synthetic import SEED_LOSS, planted, reference, write_run, write_sweep
from .test_cli import main as compare_cli

REPO = Path(__file__).resolve().parents[2]
REF, V4 = ("torch", "float32"), ("triton_v4", "float32")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

# the synthetic runs' config (tests/report/synthetic.py), with the keys these older tests also vary
BASE_CONFIG = {
    **SYNTHETIC_CONFIG,
    "train": {**SYNTHETIC_CONFIG["train"], "lr": 1e-3, "eval_batches": 4, "compile": False, "ckpt_every": 0,
              "resume": False},
    "optim": {"name": "adamw", "weight_decay": 0.1},
    "logger": {"name": "jsonl"},
    "sweep": {"name": "test"},
    "out_dir": "outputs/x",
    "device": "cpu",
}

# known numbers: (rope, dtype) -> per-seed (train_time_s, val_loss, val_acc, val_ppl, tokens_per_s)
NUMBERS = {
    ("torch", "float32"): [(10.0, 3.0, 0.30, 20.0, 1000.0), (12.0, 3.1, 0.32, 22.0, 1100.0),
                           (14.0, 3.2, 0.34, 24.0, 1200.0)],
    ("triton_v4", "float32"): [(5.0, 2.9, 0.40, 18.0, 2000.0), (6.0, 3.0, 0.41, 19.0, 2200.0),
                               (7.0, 3.1, 0.42, 20.0, 2400.0)],
}


def _merge(dst: dict, overrides: dict) -> dict:
    for k, v in overrides.items():
        if isinstance(v, dict) and isinstance(dst.get(k), dict):
            _merge(dst[k], v)
        else:
            dst[k] = v
    return dst


def make_run(run_dir: Path, rope: str, seed: int, numbers: tuple, *, variant: str = "partial",
             dtype: str = "float32", status: str = "completed", overrides: dict | None = None,
             resolved: bool = True) -> Path:
    """A run dir as the training app writes it."""
    train_time, val_loss, val_acc, val_ppl, tps = numbers
    cfg = _merge(copy.deepcopy(BASE_CONFIG), {"seed": seed, "rope": {"name": rope, "variant": variant,
                                                                     "compute_dtype": dtype}})
    cfg = _merge(cfg, overrides or {})
    (run_dir / ".hydra").mkdir(parents=True)
    (run_dir / ".hydra" / "config.yaml").write_text(yaml.safe_dump(cfg))
    if resolved:
        (run_dir / "config.yaml").write_text(yaml.safe_dump(cfg))
    steps = cfg["train"]["max_steps"]
    lines = []
    for i, step in enumerate((steps // 2, steps)):
        frac = (i + 1) / 2
        lines.append({"kind": "train", "step": step, "loss": val_loss + 0.1, "lr": 1e-3,
                      "train_time_s": train_time * frac, "wall_time_s": train_time * frac + 1,
                      "tokens": step * 1024, "tokens_per_s": tps})
        lines.append({"kind": "val", "step": step, "val_loss": val_loss + (1.0 - frac), "val_acc": val_acc,
                      "val_ppl": val_ppl, "train_time_s": train_time * frac, "wall_time_s": train_time * frac + 1,
                      "tokens": step * 1024})
    lines.append(lines[-1])  # the final line may repeat the last step
    (run_dir / "metrics.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    summary = {"rope": rope, "variant": variant, "compute_dtype": dtype, "seed": seed, "params": 123456,
               "device": "cpu", "train_time_s": train_time, "wall_time_s": train_time + 2, "val_loss": val_loss,
               "val_acc": val_acc, "val_ppl": val_ppl, "tokens_per_s": tps, "mfu": None,
               "git_commit": "abc1234", "step": steps, "status": status}
    (run_dir / "summary.json").write_text(json.dumps(summary))
    return run_dir


def make_sweep(root: Path, numbers: dict = NUMBERS, overrides: dict | None = None) -> Path:
    """A Hydra multirun dir: multirun.yaml plus one numbered job dir per (rope, seed)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "multirun.yaml").write_text("hydra: {}\n")
    job = 0
    for (rope, dtype), per_seed in numbers.items():
        for seed, nums in enumerate(per_seed):
            make_run(root / f"{job}_rope={rope},seed={seed}", rope, seed, nums, dtype=dtype,
                     overrides=(overrides or {}).get((rope, seed)))
            job += 1
    return root


def read_csv(path: Path) -> dict[str, dict[str, str]]:
    with path.open() as f:
        return {row["implementation"]: row for row in csv.DictReader(f)}


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    return make_sweep(tmp_path / "multirun" / "2024-01-01" / "12-00-00")


@pytest.fixture(scope="module")
def compared(tmp_path_factory) -> Path:
    """The report of an unchanged ``sweep`` (its comparison.md), written once for the tests that only read it."""
    sweep = make_sweep(tmp_path_factory.mktemp("compared") / "multirun" / "2024-01-01" / "12-00-00")
    return compare_runs([sweep], sweep)


# ---------------------------------------------------------------------------------------------


def test_find_run_dirs(tmp_path: Path, sweep: Path):
    (sweep / "empty_job").mkdir()  # a failed job: no summary.json
    single = make_run(tmp_path / "single", "none", 0, (1, 4.0, 0.1, 50.0, 10), variant="none", dtype="none")
    dirs = find_run_dirs([sweep, single, sweep / "0_rope=torch,seed=0"])  # duplicates collapse
    assert len(dirs) == 7
    assert all((d / "summary.json").is_file() for d in dirs)
    assert find_run_dirs([tmp_path / "single" / "summary.json"]) == [single.resolve()]
    with pytest.raises(FileNotFoundError):
        find_run_dirs([tmp_path / "nope"])


def test_labels_and_mean_std():
    import rope  # here: the helpers below use ``rope`` as a variable name

    assert rope.label("torch", "partial", "float32") == "torch (partial, float32)"
    assert rope.label("torch", "partial", "bfloat16") == "torch (partial, bfloat16)"
    assert rope.label("none", "none", "none") == "none"
    assert rope.label("triton_v4", "full", None) == "triton_v4 (full)"
    assert mean_std([1.0, 2.0, 3.0]) == (2.0, 1.0, 3)  # sample std, ddof=1
    assert mean_std([5.0]) == (5.0, None, 1)
    assert mean_std([None]) == (None, None, 0)


def test_stats_csv(compared: Path):
    sweep = compared.parent
    assert compared == sweep / MD_FILE
    rows = read_csv(sweep / CSV_FILE)
    assert list(rows) == ["triton_v4 (partial, float32)", "torch (partial, float32)"]  # by mean val loss
    for (rope, dtype), per_seed in NUMBERS.items():
        row = rows[f"{rope} (partial, {dtype})"]
        assert row["rope"] == rope and row["variant"] == "partial" and row["compute_dtype"] == dtype
        assert row["n"] == "3" and row["seeds"] == "0 1 2" and row["n_excluded"] == "0"
        for i, metric in enumerate(("train_time_s", "val_loss", "val_acc", "val_ppl", "tokens_per_s")):
            vals = [s[i] for s in per_seed]
            assert float(row[f"{metric}_mean"]) == pytest.approx(statistics.mean(vals))
            assert float(row[f"{metric}_std"]) == pytest.approx(statistics.stdev(vals))
    torch_row = rows["torch (partial, float32)"]
    assert float(torch_row["val_loss_mean"]) == pytest.approx(3.1)
    assert float(torch_row["val_loss_std"]) == pytest.approx(0.1)
    assert float(torch_row["train_time_s_std"]) == pytest.approx(2.0)


def test_markdown_and_plots(compared: Path):
    sweep, text = compared.parent, compared.read_text()
    assert "ddof=1" in text
    assert "| Implementation | Training Time (s) | Val Loss | Val Accuracy | Val Perplexity | tokens/s | n |" in text
    assert "| Implementation | Training Time (s) | Val Loss | Val Accuracy | Val Perplexity |\n" in text
    assert "| triton_v4 (partial, float32) | 6.0 ± 1.0 | 3.0000 ± 0.1000 | 0.4100 ± 0.0100 | 19.00 ± 1.00 |" in text
    assert "| torch (partial, float32) | 12.0 ± 2.0 | 3.1000 ± 0.1000 |" in text
    assert text.index("triton_v4 (partial, float32) |") < text.index("torch (partial, float32) |")
    assert "n_layer=2" in text and "tinystories" in text and "100 (train.max_steps)" in text
    assert "- device: cpu" in text
    assert "## Per-seed runs" in text and text.count("| completed |") == 6
    for name in (CURVES_FILE, SPEED_FILE):
        data = (sweep / name).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 5000


def test_runs_from_two_devices_are_flagged(tmp_path: Path):
    """Merged sweeps from two GPUs: the report says so and names each run's device."""
    sweep = make_sweep(tmp_path / "sweep")
    summary = sweep / "0_rope=torch,seed=0" / "summary.json"
    data = json.loads(summary.read_text())
    summary.write_text(json.dumps({**data, "device": "NVIDIA H200"}))
    text = compare_runs([sweep], sweep).read_text()
    assert "- device: cpu, NVIDIA H200" in text or "- device: NVIDIA H200, cpu" in text
    assert "**Runs from 2 devices**" in text
    per_seed = text[text.index("## Per-seed runs"):]
    assert "| Device | Run |" in per_seed
    assert per_seed.count("| NVIDIA H200 |") == 1 and per_seed.count("| cpu |") == 5


def test_one_device_has_no_device_column(compared: Path):
    text = compared.read_text()
    assert "Runs from" not in text and "| Device |" not in text


def _set_summary(run_dir: Path, **kv) -> None:
    path = run_dir / "summary.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **kv}))


def test_runs_that_shared_a_gpu_are_flagged(tmp_path: Path):
    """Runs on one GPU (same host and UUID) whose run times overlap shared it: the report says their
    speed columns are not speeds; runs on other GPUs, or without the identity, are not flagged."""
    sweep = make_sweep(tmp_path / "sweep")
    jobs = sorted(p for p in sweep.iterdir() if p.is_dir())
    # three runs at once on GPU-A (0-100 s, 10-90 s, 50-150 s), one later on GPU-A, one at once on GPU-B
    spans = [("A", 0, 100), ("A", 10, 90), ("A", 50, 150), ("A", 200, 300), ("B", 0, 100)]
    for job, (gpu, start, end) in zip(jobs, spans, strict=False):
        _set_summary(job, host="h1", device_uuid=f"GPU-{gpu}", started_at=start, ended_at=end)
    assert concurrent_runs([load_run(j) for j in jobs]) == dict(zip(jobs, (3, 3, 3, 1, 1), strict=False))
    text = compare_runs([sweep], sweep).read_text()
    assert "**Shared GPU**: 3 run(s) trained while other runs used the same GPU (up to 3 at once" in text
    per_seed = text[text.index("## Per-seed runs"):]
    assert "| Runs on its GPU at once | Run |" in per_seed
    assert per_seed.count("| 3 | `") == 3 and per_seed.count("| 1 | `") == 2 and per_seed.count("| n/a | `") == 1


def test_runs_alone_on_their_gpu_are_not_flagged(tmp_path: Path):
    sweep = make_sweep(tmp_path / "sweep")
    for i, job in enumerate(sorted(p for p in sweep.iterdir() if p.is_dir())):
        _set_summary(job, host="h1", device_uuid="GPU-A", started_at=100 * i, ended_at=100 * i + 100)
    text = compare_runs([sweep], sweep).read_text()
    assert "Shared GPU" not in text and "Runs on its GPU at once" not in text


def test_fidelity_against_the_same_seed_reference(tmp_path: Path):
    """Each run is measured against the float32 torch run of its seed; a repeated reference too."""
    numbers = {**NUMBERS, ("torch", "bfloat16"): [(9.0, 3.25, 0.3, 21.0, 900.0)]}
    sweep = make_sweep(tmp_path / "sweep", numbers)
    make_run(sweep / "9_repeat", "torch", 1, NUMBERS[("torch", "float32")][1])
    text = compare_runs([sweep], sweep).read_text()
    section = text[text.index("## Fidelity"):text.index("## Per-seed runs")]
    rows = [ln for ln in section.splitlines() if ln.startswith("| ") and "Implementation" not in ln]
    # triton_v4 seed s sits 0.1 below torch seed s at both evals (steps 50 and 100)
    for seed in range(3):
        assert f"| triton_v4 (partial, float32) | {seed} | 2 | 0.10000 | 50 | 0.10000 |" in rows
    assert "| torch (partial, bfloat16) | 0 | 2 | 0.25000 | 50 | 0.25000 |" in rows
    assert "| torch (partial, float32) | 1 | 2 | 0.00000 | 50 | 0.00000 |" in rows
    assert len(rows) == 5


def test_single_seed_and_none_row(tmp_path: Path):
    make_run(tmp_path / "a", "torch", 0, (10.0, 3.0, 0.3, 20.0, 1000.0))
    make_run(tmp_path / "b", "none", 0, (8.0, 3.5, 0.2, 33.0, 1500.0), variant="none", dtype="none")
    md = compare_runs([tmp_path / "a", tmp_path / "b"], tmp_path / "out")
    text = md.read_text()
    assert "| torch (partial, float32) | 10.0 ± n/a | 3.0000 ± n/a |" in text
    assert "| none | 8.0 ± n/a |" in text
    rows = read_csv(tmp_path / "out" / CSV_FILE)
    assert rows["torch (partial, float32)"]["n"] == "1"
    assert rows["torch (partial, float32)"]["val_loss_std"] == ""
    assert list(rows) == ["torch (partial, float32)", "none"]


def test_non_completed_runs_are_excluded_and_listed(tmp_path: Path, sweep: Path, caplog):
    make_run(sweep / "9_rope=torch,seed=3", "torch", 3, (1.0, 9.9, 0.0, 999.0, 5.0), status="interrupted")
    with caplog.at_level(logging.WARNING, logger="llm.report"):
        text = compare_runs([sweep], sweep).read_text()
    assert "interrupted" in caplog.text
    rows = read_csv(sweep / CSV_FILE)
    assert rows["torch (partial, float32)"]["n"] == "3"
    assert rows["torch (partial, float32)"]["n_excluded"] == "1"
    assert float(rows["torch (partial, float32)"]["val_loss_mean"]) == pytest.approx(3.1)
    assert "Not included in the statistics" in text and "| interrupted |" in text


def test_nothing_to_compare(tmp_path: Path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(NoRunsError):
        compare_runs([tmp_path / "empty"], tmp_path)
    make_run(tmp_path / "r", "torch", 0, (1.0, float("nan"), 0.0, float("nan"), 5.0), status="nonfinite")
    with pytest.raises(NoRunsError, match="completed"):
        compare_runs([tmp_path / "r"], tmp_path)


@pytest.mark.parametrize(
    ("overrides", "key"),
    [({"model": {"n_layer": 4}}, "model.n_layer"), ({"train": {"max_steps": 200}}, "train.max_steps"),
     ({"rope": {"base": 500.0}}, "rope.base"), ({"rope": {"scaling": {"type": "yarn"}}}, "rope.scaling.type")],
)
def test_mixed_runs_refused_unless_allowed(tmp_path: Path, overrides: dict, key: str):
    sweep = make_sweep(tmp_path / "sweep", overrides={("triton_v4", 1): overrides})
    with pytest.raises(MixedRunsError) as exc:
        compare_runs([sweep], sweep)
    msg = str(exc.value)
    assert key in msg and "--allow-mixed" in msg and "\n" not in msg  # one line, as every refusal
    assert key in exc.value.differences
    assert not (sweep / MD_FILE).exists()
    text = compare_runs([sweep], sweep, allow_mixed=True).read_text()
    assert "Mixed runs" in text and key in text


def test_allowed_differences_are_not_mixed(tmp_path: Path):
    root = tmp_path / "runs"
    make_run(root / "a", "torch", 0, NUMBERS[("torch", "float32")][0], resolved=False)  # .hydra/config.yaml only
    make_run(root / "b", "torch", 1, NUMBERS[("torch", "float32")][1],
             overrides={"rope": {"threads": 128}, "logger": {"name": "wandb", "project": "p"}, "out_dir": "elsewhere",
                        "device": "cuda", "train": {"resume": True, "init_from": "source/torch_s1", "log_every": 7,
                                                    "ckpt_every": 9, "sample_every": 3},
                        "sweep": {"name": "other"},
                        "hydra": {"job": {"name": "x"}}})
    md = compare_runs([root / "a", root / "b"])  # default out: common parent
    assert md == root.resolve() / MD_FILE
    assert "Mixed runs" not in md.read_text()


def test_cli(tmp_path: Path, sweep: Path, capsys):
    """``python -m scripts.compare``: run as the command (one process: the module's entry, exit code and output)
    it writes the report; a mixed sweep is refused naming the key unless ``--allow-mixed`` (its main, in process)."""
    out = tmp_path / "report"
    res = subprocess.run([sys.executable, "-m", "scripts.compare", str(sweep), "--out", str(out)],
                         cwd=REPO, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "triton_v4 (partial, float32)" in res.stdout
    for name in (MD_FILE, CSV_FILE, CURVES_FILE, SPEED_FILE):
        assert (out / name).stat().st_size > 0

    mixed = make_sweep(tmp_path / "mixed", overrides={("torch", 2): {"model": {"n_layer": 6}}})
    assert compare_cli([str(mixed)]) == 2
    err = capsys.readouterr().err
    assert "model.n_layer" in err and "--allow-mixed" in err
    assert not (mixed / MD_FILE).exists()
    assert compare_cli([str(mixed), "--allow-mixed"]) == 0
    assert (mixed / MD_FILE).is_file()  # default out: the single DIR


def test_callback_on_multirun_end(tmp_path: Path, sweep: Path, caplog):
    cb = CompareOnMultirunEnd()
    cb.on_multirun_end(OmegaConf.create({"hydra": {"sweep": {"dir": str(sweep)}}}))
    assert cb.last_report == sweep / MD_FILE
    assert (sweep / CSV_FILE).is_file() and (sweep / CURVES_FILE).is_file() and (sweep / SPEED_FILE).is_file()

    mixed = make_sweep(tmp_path / "mixed", overrides={("torch", 0): {"train": {"max_steps": 7}}})
    cfg = OmegaConf.create({"hydra": {"sweep": {"dir": str(mixed)}}})
    with caplog.at_level(logging.WARNING, logger="llm.report.callback"):
        cb.on_multirun_end(cfg)  # must not raise
    assert "train.max_steps" in caplog.text and "--allow-mixed" in caplog.text
    assert cb.last_report is None and not (mixed / MD_FILE).exists()

    CompareOnMultirunEnd(allow_mixed=True).on_multirun_end(cfg)
    assert (mixed / MD_FILE).is_file()

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="llm.report.callback"):
        cb.on_multirun_end(OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path / "missing")}}}))
        cb.on_multirun_end(OmegaConf.create({}))  # no hydra.sweep.dir at all
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 2


def test_sweep_extended_by_more_seeds_counts_a_repeated_seed_once(tmp_path: Path, caplog):
    """Seeds 0-2, then 3-4 with seed 0 run again as a check (identical on a deterministic recipe): one sample of
    seed 0, not two, in n, mean ± std and the paired test; a repeat that differs is averaged and warned about."""
    first = write_sweep(tmp_path / "a", {REF: reference((0, 1, 2)), V4: planted(0.003, seeds=(0, 1, 2))})
    write_sweep(tmp_path / "b", {REF: reference((0, 3, 4)), V4: planted(0.003, seeds=(0, 3, 4))})
    with caplog.at_level(logging.INFO, logger="llm.report.analysis"):
        report = build_report([first, tmp_path / "b"])
    ref = next(g for g in report.groups if g.key[0] == "torch")
    assert len(ref.runs) == 6 and ref.n == 5
    assert ref.mean("val_loss") == pytest.approx(statistics.fmean(SEED_LOSS.values()))
    assert ref.std("val_loss") == pytest.approx(statistics.stdev(SEED_LOSS.values()))
    assert report.comparisons[0].loss.n == 5
    assert "seed 0 ran 2 times, to the same val loss: one sample" in caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert not [n for n in report.data_notes if "Repeated seed" in n], "agreeing repeats need no note"

    write_run(tmp_path / "c" / "0_torch_s0", "torch", 0, SEED_LOSS[0] + 0.01)
    caplog.clear()
    report = build_report([first, tmp_path / "c"])
    ref = next(g for g in report.groups if g.key[0] == "torch")
    assert ref.n == 3 and ref.per_seed("val_loss")[0] == pytest.approx(SEED_LOSS[0] + 0.005)
    assert "seed 0 ran 2 times and ended at different val losses" in caplog.text
    # the report file says it too: a reader of comparison.md sees no log
    note = next(n for n in report.data_notes if "Repeated seed" in n)
    assert note.startswith(f"**Repeated seed**: {ref.label}, seed 0: 2 runs ended at different val losses (")
    assert "averaged into one sample; runs of one seed on a deterministic recipe should agree" in note
    text = render_markdown(report)
    assert note in text
    # the reference's own count, named as such: a row's test may pair on fewer seeds
    assert f"Δ = implementation − {ref.label} (its 3 seed(s); each row's n says on how many its test ran)" in text


def test_a_repeated_seed_is_one_sample_in_welch_too(tmp_path: Path):
    """Unpaired (no seed in common), seed 3 run three times is one sample of the implementation: n = 2, not 4."""
    first = write_sweep(tmp_path / "a", {REF: reference((0, 1)), V4: planted(0.003, seeds=(2, 3))})
    for i in (1, 2):
        write_run(tmp_path / f"again{i}" / "run", "triton_v4", 3, SEED_LOSS[3] + 0.003 - 0.002)
    report = build_report([first, tmp_path / "again1", tmp_path / "again2"])
    (c,) = report.comparisons
    assert c.loss.method == WELCH and (c.loss.n, c.loss.n_ref) == (2, 2)
    assert c.unmatched == [2, 3]


def test_seeds_of_either_side_alone_are_listed(tmp_path: Path):
    """Paired on the seeds both have (three of each side's four): the implementation's seed 4 and the reference's
    seed 3 are named in the report and the CSV, not left out unseen."""
    sweep = write_sweep(tmp_path / "s", {REF: reference((0, 1, 2, 3)), V4: planted(0.003, seeds=(0, 1, 2, 4))})
    (c,) = build_report([sweep]).comparisons
    assert (c.seeds, c.unmatched, c.reference_only) == ([0, 1, 2], [4], [3])
    text = compare_runs([sweep], sweep).read_text()
    assert "paired (seeds 0 1 2); unmatched: 4; reference only: 3" in text
    assert "(n=3 paired, 2 run(s) without a counterpart left out, Δ = " in text
    with (sweep / "comparison.csv").open() as f:
        row = next(r for r in csv.DictReader(f) if r["implementation"].startswith("triton_v4"))
    assert (row["unmatched_seeds"], row["reference_only_seeds"]) == ("4", "3")
    assert (row["val_loss_test"], row["val_loss_test_n"], row["val_loss_test_n_ref"]) == ("paired", "3", "3")


def test_one_shared_seed_is_paired_where_welch_cannot_run(tmp_path: Path):
    """The reference of seed 0 alone, triton_v4 of seeds 0 and 1: Welch has no spread for a single seed, so the
    shared seed is paired (one pair: no interval) and seed 1 is unmatched, not averaged into a Δ of both seeds
    (seed 1's higher loss would read as triton_v4's)."""
    sweep = write_sweep(tmp_path / "s", {REF: reference((0,)), V4: planted(0.003, seeds=(0, 1))})
    (c,) = build_report([sweep]).comparisons
    assert c.loss.method != WELCH and (c.loss.n, c.seeds, c.unmatched) == (1, [0], [1]) and c.loss.ci is None
    assert c.loss.delta == pytest.approx(0.003 + 0.002)  # seed 0's planted Δ and its jitter


def test_the_default_reference_stays_partial_when_a_seed_of_it_failed(tmp_path: Path):
    """torch partial with one seed short of torch full is still the reference: Δ is full − partial."""
    sweep = write_sweep(tmp_path / "s", {REF: reference((0, 1, 2))})
    for s in (0, 1, 2, 3):
        write_run(sweep / f"full_s{s}", "torch", s, SEED_LOSS[s] + 0.01, variant="full")
    report = build_report([sweep])
    assert report.reference.key[:2] == ("torch", "partial")
    assert report.comparisons[0].loss.delta == pytest.approx(0.01)


def test_runs_that_shared_a_host_s_cpu_are_flagged(tmp_path: Path):
    """CPU runs record no GPU UUID: those on one host whose run times overlap shared its cores, and say so."""
    sweep = make_sweep(tmp_path / "sweep")
    jobs = sorted(p for p in sweep.iterdir() if p.is_dir())
    spans = [("h1", 0, 100), ("h1", 50, 150), ("h1", 200, 300), ("h2", 0, 100)]
    for job, (host, start, end) in zip(jobs, spans, strict=False):
        _set_summary(job, host=host, device="cpu", device_uuid=None, started_at=start, ended_at=end)
    assert [concurrent_runs([load_run(j) for j in jobs]).get(j) for j in jobs[:4]] == [2, 2, 1, 1]
    text = compare_runs([sweep], sweep).read_text()
    assert "**Shared CPU**: 2 run(s) trained while other runs used the same CPU (up to 2 at once" in text
    assert "| Runs on its CPU at once | Run |" in text[text.index("## Per-seed runs"):]


def _documents_packing(run_dir: Path) -> None:
    """Mark a synthetic run as trained on document-aligned windows (``data.packing=documents``)."""
    for path in (run_dir / "config.yaml", run_dir / ".hydra" / "config.yaml"):
        cfg = yaml.safe_load(path.read_text())
        cfg["data"]["packing"] = "documents"
        path.write_text(yaml.safe_dump(cfg))


def test_fidelity_yardstick_is_the_reference_of_the_same_packing(tmp_path: Path):
    """torch on document-aligned windows (named first) and on random ones, triton_v4 on random ones: triton_v4 is
    0.001 from the random-window torch run of its seed; the documents run (0.5 away: another model) is no
    yardstick for it, nor is the random-window torch run measured against the documents one."""
    for s in (0, 1):
        _documents_packing(write_run(tmp_path / f"a_docs_s{s}", "torch", s, SEED_LOSS[s] + 0.5))
        write_run(tmp_path / f"b_torch_s{s}", "torch", s, SEED_LOSS[s])
        write_run(tmp_path / f"c_v4_s{s}", "triton_v4", s, SEED_LOSS[s] + 0.001)
    text = compare_runs([tmp_path], tmp_path).read_text()
    section = text[text.index("## Fidelity"):text.index("## Per-seed runs")]
    rows = [ln for ln in section.splitlines() if ln.startswith("| ") and "Implementation" not in ln]
    assert rows == [f"| triton_v4 (partial, float32) | {s} | 2 | 0.00100 | 50 | 0.00100 |" for s in (0, 1)]


def test_fidelity_rows_are_in_seed_order(tmp_path: Path):
    """Run-dir names sort seed 10 before seed 2 as text (and a sweep's job numbers put seeds in any order): the rows
    go by implementation, then seed."""
    for s in (2, 10):
        write_run(tmp_path / f"torch_s{s}", "torch", s, 3.0)
        write_run(tmp_path / f"v4_s{s}", "triton_v4", s, 3.001)
    text = compare_runs([tmp_path], tmp_path).read_text()
    section = text[text.index("## Fidelity"):text.index("## Per-seed runs")]
    rows = [ln for ln in section.splitlines() if ln.startswith("| ") and "Implementation" not in ln]
    assert [row.split(" | ")[1] for row in rows] == ["2", "10"]


@pytest.mark.parametrize("bad", [float("inf"), float("nan")])
def test_a_nonfinite_val_loss_is_left_out_and_named(tmp_path: Path, bad: float):
    """A completed run whose final val loss is inf or nan (an eval that diverged): no traceback (inf broke
    ``statistics.stdev``), no sample of the mean, and named as non-finite, not as a seed without a reference run.
    Its accuracy is finite, so the accuracy table pairs all 5 seeds and must say so."""
    impl = planted(0.003)
    impl[2] = (bad, impl[2][1])
    ref = reference()
    ref[3] = (bad, ref[3][1])
    sweep = write_sweep(tmp_path / "s", {REF: ref, V4: impl})
    (gc,) = build_report([sweep]).comparisons
    assert (gc.seeds, gc.unmatched, gc.reference_only) == ([0, 1, 4], [], [])
    m = gc.matches["val_loss"]
    assert (m.nonfinite, m.reference_nonfinite) == ([2], [3])
    assert gc.loss.n == 3 and gc.metrics["val_acc"].n == 5 and gc.matches["val_acc"].seeds == [0, 1, 2, 3, 4]
    assert gc.group.stats["val_loss"] == pytest.approx(mean_std([impl[s][0] for s in (0, 1, 3, 4)]))
    text = compare_runs([sweep], sweep).read_text()
    assert ("left out, their val loss is nan/inf: seed(s) 2 of triton_v4 (partial, float32) and seed(s) 3 of "
            "torch (partial, float32)") in text
    assert "| paired (seeds 0 1 4); non-finite: 2; reference non-finite: 3 | 3 |" in text
    assert "| paired (seeds 0 1 2 3 4) | 5 |" in text  # the accuracy row: its own seeds
    summary = text[text.index("## Summary"):text.index("## Paired statistics")]
    assert f"{statistics.fmean(impl[s][0] for s in (0, 1, 3, 4)):.4f}" in summary and "(n=4)" in summary
    with (sweep / CSV_FILE).open() as f:
        row = next(r for r in csv.DictReader(f) if r["implementation"].startswith("triton_v4"))
    assert (row["unmatched_seeds"], row["nonfinite_seeds"], row["reference_nonfinite_seeds"]) == ("", "2", "3")


def test_a_metrics_line_that_does_not_read_is_a_note_in_the_report(tmp_path: Path):
    """A line of metrics.jsonl cut short (a crash mid-write) is skipped: the log said so, the report file did not;
    its notes now name the run and how many lines its curves lack."""
    sweep = write_sweep(tmp_path / "s", {REF: reference((0, 1, 2)), V4: planted(0.003, seeds=(0, 1, 2))})
    run = sorted(sweep.glob("*_s1"))[0]
    metrics = run / "metrics.jsonl"
    metrics.write_text(metrics.read_text() + '{"step": 99, "kind": "va')
    report = build_report([sweep])
    assert [n for n in report.data_notes if n.startswith("**Damaged curves**")] == [
        f"**Damaged curves**: lines of metrics.jsonl that did not read, skipped: `{run.name}` (1); the loss curves "
        "leave them out (the statistics read summary.json)."]
    assert "**Damaged curves**" in render_markdown(report)
