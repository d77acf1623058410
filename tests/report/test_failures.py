"""Failed and crashed runs are listed, counted and excluded, never dropped silently."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import pytest
import yaml

from llm.report import CRASHED, NoRunsError, build_report, compare_runs, find_crashed_dirs, sweep_failures

from .synthetic import config_for, planted, reference, write_run, write_sweep
from .test_cli import main as compare_cli

REF, V4 = ("torch", "float32"), ("triton_v4", "float32")


def _sweep_with_failures(root: Path) -> Path:
    """3 completed seeds per implementation, plus: failed, config_error, nonfinite, two crashed job dirs."""
    sweep = write_sweep(root, {REF: reference((0, 1, 2)), V4: planted(0.0003, seeds=(0, 1, 2))})
    write_run(sweep / "10_failed", "triton_v4", 3, 9.9, status="failed",
              message="RuntimeError: CUDA error: an illegal memory access\n  traceback line")
    write_run(sweep / "11_config", "torch", 3, 9.9, status="config_error", message="train.batch_size: must be > 0")
    write_run(sweep / "12_nan", "triton_v4", 4, float("nan"), status="nonfinite", message="loss is nan at step 7")
    killed = sweep / "13_killed"  # killed before summary.json: .hydra/ and a metrics line
    (killed / ".hydra").mkdir(parents=True)
    (killed / ".hydra" / "config.yaml").write_text(yaml.safe_dump(config_for("triton_v4", 5)))
    (killed / "metrics.jsonl").write_text(json.dumps({"kind": "train", "step": 40, "loss": 3.0}) + "\n")
    (sweep / "14_oom").mkdir()  # died while Hydra was still setting up: only the resolved config
    (sweep / "14_oom" / "config.yaml").write_text(yaml.safe_dump(config_for("torch", 6)))
    (sweep / "15_bare").mkdir()  # no .hydra/ (hydra.output_subdir=null) and no config: only metrics
    (sweep / "15_bare" / "metrics.jsonl").write_text(json.dumps({"kind": "train", "step": 10, "loss": 3.0}) + "\n")
    return sweep


def test_failed_and_crashed_runs_listed(tmp_path: Path):
    sweep = _sweep_with_failures(tmp_path / "sweep")
    text = compare_runs([sweep], sweep).read_text()
    section = text[text.index("## Failed or incomplete runs"):text.index("## Summary")]
    assert "6 run(s) did not complete" in section
    assert "| `10_failed` | triton_v4 (partial, float32) | 3 | failed | RuntimeError: CUDA error: an illegal " \
           "memory access |" in section  # the message's first line only
    assert "| `11_config` | torch (partial, float32) | 3 | config_error | train.batch_size: must be > 0 |" in section
    assert "| nonfinite | loss is nan at step 7 |" in section
    assert f"| `13_killed` | triton_v4 (partial, float32) | 5 | {CRASHED} | " in section
    assert "last step logged: 40" in section
    assert f"| `14_oom` | torch (partial, float32) | 6 | {CRASHED} |" in section
    assert f"| `15_bare` | ? | ? | {CRASHED} | the job died before writing summary.json; last step logged: 10 |" \
        in section
    # the statistics come from the completed runs only
    report = build_report([sweep])
    assert [(g.n, len(g.excluded)) for g in report.groups][-1] == (0, 1)  # 15_bare: implementation unknown
    assert [g.n for g in report.groups] == [3, 3, 0]
    assert report.comparisons[0].loss.n == 3
    with (sweep / "comparison.csv").open() as f:
        rows = {r["implementation"]: r for r in csv.DictReader(f)}
    assert rows["triton_v4 (partial, float32)"]["n_excluded"] == "3"
    assert rows["torch (partial, float32)"]["n_excluded"] == "2"
    assert CRASHED in rows["torch (partial, float32)"]["excluded"]
    assert rows["?"]["n"] == "0" and rows["?"]["n_excluded"] == "1"


def test_a_job_still_running_is_running_not_crashed(tmp_path: Path):
    """A job whose process holds its dir (a sweep still going) is listed as running, with its pid and step, not as a
    crash; once the process lets go, the same dir without summary.json is a crash again, with its last step."""
    from llm.training.run_dir import RunDirLock

    sweep = _sweep_with_failures(tmp_path / "sweep")
    killed, resumed = sweep / "13_killed", sweep / "10_failed"  # 10_failed: a job resumed, its old summary kept
    locks = [RunDirLock(d).acquire() for d in (killed, resumed)]
    for lock in locks:
        lock.mark_owner()
    try:
        statuses = {Path(d).name: (s, m) for d, s, m in sweep_failures(sweep)}
    finally:
        for lock in locks:
            lock.release()
    for name in ("13_killed", "10_failed"):
        status, message = statuses[name]
        assert status == "running" and message.startswith(f"still running (pid {os.getpid()})"), statuses[name]
    assert statuses["13_killed"][1].endswith("last step logged: 40")
    after = {Path(d).name: s for d, s, _ in sweep_failures(sweep)}
    assert after["13_killed"] == CRASHED and after["10_failed"] == "failed"
    section = compare_runs([sweep], sweep).read_text()
    assert f"| `13_killed` | triton_v4 (partial, float32) | 5 | {CRASHED} |" in section
    assert f"(`13_killed`, {CRASHED} at step 40)" in section  # the step the table gives, not n/a


def test_jobs_a_killed_sweep_never_started_are_listed(tmp_path: Path):
    """A sweep of rope=torch,triton_v4 seed=0,1,2 killed during its fourth job: the two jobs it never reached have no
    dir, and the report lists them from multirun.yaml (not a silent subset); a hand-made multirun.yaml adds nothing."""
    sweep = write_sweep(tmp_path / "sweep", {REF: reference((0, 1, 2)), V4: planted(0.0, seeds=(0,))})
    (sweep / "multirun.yaml").write_text(yaml.safe_dump({"hydra": {
        "sweeper": {"_target_": "hydra._internal.core_plugins.basic_sweeper.BasicSweeper", "params": None},
        "sweep": {"dir": str(sweep), "subdir": "${hydra.job.num}_${hydra:runtime.choices.rope}_s${seed}"},
        "overrides": {"task": ["rope=torch,triton_v4", "seed=0,1,2", "train.max_steps=5"]}}}))
    (sweep / "3_triton_v4_float32_s0").rename(sweep / "3_triton_v4_s0")  # as the sweep names its jobs
    report = build_report([sweep])
    missing = {r.name: r.message for r in report.failures if r.status == "not started"}
    assert set(missing) == {"4_triton_v4_s1", "5_triton_v4_s2"}, missing
    assert missing["4_triton_v4_s1"] == "the sweep never started it (rope=triton_v4 seed=1)"
    text = compare_runs([sweep], sweep).read_text()
    # listed under the implementation it was to train (its completed seed's), not as one of its own: `triton_v4`
    assert "| `5_triton_v4_s2` | triton_v4 (partial, float32) | 2 | not started | the sweep never started it " \
           "(rope=triton_v4 seed=2) |" in text
    assert "triton_v4 (partial, float32) seed 2 (`5_triton_v4_s2`, not started)" in text  # no "at step n/a"
    # a job that sets no rope=: the sweep's own rope (multirun.yaml's top level), not "?"
    (sweep / "multirun.yaml").write_text(yaml.safe_dump({"hydra": {
        "sweeper": {"_target_": "hydra._internal.core_plugins.basic_sweeper.BasicSweeper", "params": None},
        "sweep": {"dir": str(sweep), "subdir": "${hydra.job.num}_${hydra:runtime.choices.rope}_s${seed}"},
        "overrides": {"task": ["seed=0,1,2,3,4,5,6"]}}, "rope": {"name": "torch"}, "seed": 0}))
    missing = [r for r in build_report([sweep]).failures if r.status == "not started"]
    assert [(r.name, r.rope, r.seed) for r in missing] == [(f"{n}_torch_s{n}", "torch", n) for n in (4, 5, 6)]
    (sweep / "multirun.yaml").write_text("hydra: {}\n")
    assert not [r for r in build_report([sweep]).failures if r.status == "not started"]


def test_sweep_failures(tmp_path: Path):
    sweep = _sweep_with_failures(tmp_path / "sweep")
    failures = sweep_failures(sweep)
    by_name = {p.name: (status, msg) for p, status, msg in failures}
    assert set(by_name) == {"10_failed", "11_config", "12_nan", "13_killed", "14_oom", "15_bare"}
    assert by_name["10_failed"] == ("failed", "RuntimeError: CUDA error: an illegal memory access")
    assert by_name["13_killed"][0] == CRASHED
    assert all(p.is_absolute() and p.parent == sweep.resolve() for p, _, _ in failures)
    ok = write_sweep(tmp_path / "ok", {REF: reference((0, 1))})
    assert sweep_failures(ok) == []
    with pytest.raises(FileNotFoundError):
        sweep_failures(tmp_path / "missing")


def test_what_is_not_a_crashed_job(tmp_path: Path):
    """wandb's and .hydra's own config.yaml, a job's checkpoints/, a non-training config: not jobs."""
    sweep = write_sweep(tmp_path / "sweep", {REF: reference((0, 1))})
    (sweep / "wandb" / "offline-run-x" / "files").mkdir(parents=True)
    (sweep / "wandb" / "offline-run-x" / "files" / "config.yaml").write_text("rope: {value: 1}\n")
    job = next(sweep.glob("0_*"))
    (job / "checkpoints").mkdir()
    (job / "wandb" / "run" / "files").mkdir(parents=True)
    (job / "wandb" / "run" / "files" / "config.yaml").write_text("rope: 1\n")
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "config.yaml").write_text("defaults: [model: tiny]\n")
    assert find_crashed_dirs([tmp_path]) == []
    assert sweep_failures(sweep) == []


def test_only_failures_is_an_error_that_names_them(tmp_path: Path):
    (tmp_path / "j" / ".hydra").mkdir(parents=True)
    with pytest.raises(NoRunsError, match="1 crashed job dir"):
        compare_runs([tmp_path], tmp_path)
    write_run(tmp_path / "f", "torch", 0, 3.0, status="failed", message="boom")
    with pytest.raises(NoRunsError, match="completed"):
        compare_runs([tmp_path], tmp_path)


def test_unreadable_summary_is_a_failure_not_a_crash_of_the_report(tmp_path: Path):
    sweep = write_sweep(tmp_path / "sweep", {REF: reference((0, 1))})
    bad = write_run(sweep / "9_bad", "torch", 2, 3.0)
    (bad / "summary.json").write_text('{"status": "compl')
    text = compare_runs([sweep], sweep).read_text()
    assert "| `9_bad` | torch (partial, float32) | 2 | unreadable summary.json |" in text


def test_cli_says_so_on_the_console(tmp_path: Path, capsys):
    """scripts.compare's main in this process (test_compare.py's test_cli runs the command as a process)."""
    sweep = _sweep_with_failures(tmp_path / "sweep")
    assert compare_cli([str(sweep)]) == 0
    out, err = capsys.readouterr()
    assert f"warning: 13_killed: {CRASHED}" in err and "warning: 10_failed: failed" in err
    assert "6 run(s) failed or crashed" in err
    assert "## Failed or incomplete runs" in out


def test_cli_counts_interrupted_runs_apart_from_failed_ones(tmp_path: Path, capsys):
    """A run stopped by Ctrl-C or SIGTERM is what comparison.md calls it, interrupted (a second Ctrl-C: aborted), not
    a failed or crashed run: the console's count says which is which. (It said "N run(s) failed or crashed" for
    every run that did not complete.)"""
    sweep = write_sweep(tmp_path / "sweep", {REF: reference((0, 1, 2)), V4: planted(0.0003, seeds=(0, 1, 2))})
    write_run(sweep / "10_stopped", "torch", 3, 9.9, status="interrupted",
              message="stopped at step 40 (SIGTERM); checkpoint saved in ckpt")
    assert compare_cli([str(sweep)]) == 0
    out, err = capsys.readouterr()
    assert "| interrupted |" in out and "warning: 10_stopped: interrupted - stopped at step 40 (SIGTERM)" in err
    assert "1 run(s) interrupted; the statistics use the 6 completed run(s)" in err.splitlines()
    assert "failed" not in err
    write_run(sweep / "11_aborted", "triton_v4", 3, 9.9, status="aborted", message="aborted by a second Ctrl-C")
    write_run(sweep / "12_failed", "triton_v4", 4, 9.9, status="failed", message="RuntimeError: boom")
    (sweep / "13_killed" / ".hydra").mkdir(parents=True)  # killed before summary.json
    (sweep / "13_killed" / ".hydra" / "config.yaml").write_text(yaml.safe_dump(config_for("torch", 5)))
    assert compare_cli([str(sweep)]) == 0
    err = capsys.readouterr().err
    assert "1 run(s) interrupted; 1 aborted; 2 failed or crashed; the statistics use the 6 completed run(s)" \
        in err.splitlines(), err


def test_a_job_that_failed_before_building_its_rope_counts_under_its_implementation(tmp_path: Path):
    """A completed run records the compute dtype its RoPE reports (``triton_v4``: float32), a job refused or killed
    before building it only its config's (none for a kernel), and a job a sweep never started only its ``rope=``
    preset (``torch_full``): each is listed under the implementation it was to train, whose row counts it as
    excluded, not as an implementation of its own."""
    sweep = write_sweep(tmp_path / "sweep", {REF: reference((0, 1, 2)), V4: planted(0.0, seeds=(0, 1, 2)),
                                             ("torch_full", "float32"): planted(0.01, seeds=(0, 1))})
    for d in sweep.glob("*_torch_full_*"):  # as the trainer records a torch_full run: torch, full
        summary = json.loads((d / "summary.json").read_text())
        (d / "summary.json").write_text(json.dumps({**summary, "rope": "torch", "variant": "full"}))
        config = yaml.safe_load((d / "config.yaml").read_text())
        config["rope"].update(name="torch", variant="full")
        (d / "config.yaml").write_text(yaml.safe_dump(config))
    killed = sweep / "9_triton_v4_s3"  # killed before summary.json; a kernel's config names no compute dtype
    config = config_for("triton_v4", 3)
    del config["rope"]["compute_dtype"]
    (killed / ".hydra").mkdir(parents=True)
    (killed / ".hydra" / "config.yaml").write_text(yaml.safe_dump(config))
    (sweep / "multirun.yaml").write_text(yaml.safe_dump({"hydra": {
        "sweeper": {"_target_": "hydra._internal.core_plugins.basic_sweeper.BasicSweeper", "params": None},
        "sweep": {"dir": str(sweep), "subdir": "${hydra.job.num}_${hydra:runtime.choices.rope}_s${seed}"},
        "overrides": {"task": ["rope=torch,triton_v4,torch_full", "seed=0,1,2"]}}}))
    report = build_report([sweep])
    labels = {g.label: (g.n, sorted(r.name for r in g.excluded)) for g in report.groups}
    assert labels == {"torch (partial, float32)": (3, []), "triton_v4 (partial, float32)": (3, ["9_triton_v4_s3"]),
                      "torch (full, float32)": (2, ["8_torch_full_s2"])}, labels
    text = compare_runs([sweep], sweep).read_text()
    assert "| `8_torch_full_s2` | torch (full, float32) | 2 | not started |" in text
    assert f"| `9_triton_v4_s3` | triton_v4 (partial, float32) | 3 | {CRASHED} |" in text
    with (sweep / "comparison.csv").open() as f:
        rows = {r["implementation"]: r for r in csv.DictReader(f)}
    assert set(rows) == set(labels)
    assert rows["triton_v4 (partial, float32)"]["n_excluded"] == "1"
    assert rows["torch (full, float32)"]["n_excluded"] == "1"


def test_jobs_never_started_are_listed_when_the_sweeps_parent_is_given(tmp_path: Path):
    """``scripts.compare`` takes run dirs, sweep dirs or their parents: given the parent of a killed sweep, the jobs it
    never reached are listed as they are for the sweep dir itself, not left out of a report that looks complete."""
    sweep = write_sweep(tmp_path / "sweeps" / "killed", {REF: reference((0, 1, 2)), V4: planted(0.0, seeds=(0,))})
    (sweep / "multirun.yaml").write_text(yaml.safe_dump({"hydra": {
        "sweeper": {"_target_": "hydra._internal.core_plugins.basic_sweeper.BasicSweeper", "params": None},
        "sweep": {"dir": str(sweep), "subdir": "${hydra.job.num}_${hydra:runtime.choices.rope}_s${seed}"},
        "overrides": {"task": ["rope=torch,triton_v4", "seed=0,1,2"]}}}))
    for root in (sweep, tmp_path / "sweeps", tmp_path):
        missing = sorted(r.name.rsplit("/", 1)[-1] for r in build_report([root]).failures if r.status == "not started")
        assert missing == ["4_triton_v4_s1", "5_triton_v4_s2"], (root, missing)


def test_a_job_never_started_keeps_the_variant_it_sweeps(tmp_path: Path):
    """A sweep over ``rope.variant=partial,full`` killed before its last job: that job is listed under the variant it
    was to train, not under the ``rope=torch`` preset's partial rotation."""
    sweep = tmp_path / "sweep"
    for num, (variant, seed) in enumerate([("partial", 0), ("full", 0), ("partial", 1)]):
        write_run(sweep / f"{num}_torch_s{seed}", "torch", seed, 3.0 + 0.01 * num, variant=variant)
    (sweep / "multirun.yaml").write_text(yaml.safe_dump({"hydra": {
        "sweeper": {"_target_": "hydra._internal.core_plugins.basic_sweeper.BasicSweeper", "params": None},
        "sweep": {"dir": str(sweep), "subdir": "${hydra.job.num}_${hydra:runtime.choices.rope}_s${seed}"},
        "overrides": {"task": ["seed=0,1", "rope.variant=partial,full"]}}, "rope": {"name": "torch"}}))
    report = build_report([sweep])
    [missing] = [r for r in report.failures if r.status == "not started"]
    assert (missing.name, missing.label) == ("3_torch_s1", "torch (full, float32)")
