"""The callback logs the statistics table to wandb (offline here) as a job_type="report" run; best effort."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from helpers import read_wandb_run
from omegaconf import OmegaConf

from llm.report import MD_FILE, sweep_failures
from llm.report.callback import CompareOnMultirunEnd

from .synthetic import planted, reference, write_sweep

REF, V4 = ("torch", "float32"), ("triton_v4", "float32")
WANDB = {"name": "wandb", "wandb": {"mode": "offline", "project": "ropelab-test", "entity": None, "group": None,
                                    "tags": []}}


def _cfg(sweep: Path) -> object:
    return OmegaConf.create({"hydra": {"sweep": {"dir": str(sweep)}}, "sweep": {"name": "synth"}})


def _report_runs(sweep: Path) -> list[Path]:
    """The wandb run dirs the callback left in the sweep's ``wandb/`` dir (wandb's ``latest-run`` link left out)."""
    return sorted(p for p in (sweep / "wandb").glob("*run-*") if p.is_dir() and not p.is_symlink())


def _report_run(sweep: Path) -> Path:
    """The one wandb run the callback logged the report to, in the sweep's ``wandb/`` dir."""
    runs = _report_runs(sweep)
    assert len(runs) == 1, runs
    return runs[0]


def test_report_table_logged_offline(tmp_path: Path, wandb_offline, monkeypatch):
    import wandb

    sweep = write_sweep(tmp_path / "2024-01-01_sweep", {REF: reference((0, 1, 2)), V4: planted(0.02, seeds=(0, 1, 2))},
                        logger=WANDB)
    calls: list[dict] = []
    real_init = wandb.init
    monkeypatch.setattr(wandb, "init", lambda **kw: calls.append(kw) or real_init(**kw))
    cb = CompareOnMultirunEnd()
    cb.on_multirun_end(_cfg(sweep))
    assert cb.last_report == sweep / MD_FILE
    assert calls and calls[0]["job_type"] == "report" and calls[0]["mode"] == "offline"
    run_dir = _report_run(sweep)

    tables = list(run_dir.glob("files/media/table/comparison_*.table.json"))
    assert len(tables) == 1
    table = json.loads(tables[0].read_text())
    rows = {row[0]: dict(zip(table["columns"], row, strict=True)) for row in table["data"]}
    assert rows["triton_v4 (partial, float32)"]["val_loss_verdict"] == "worse"
    assert rows["triton_v4 (partial, float32)"]["val_loss_delta"] == pytest.approx(0.02 + 1e-3 / 3)
    assert rows["torch (partial, float32)"]["pairing"] == "reference"

    logged = read_wandb_run(next(run_dir.glob("run-*.wandb")))
    assert logged["group"] == f"synth-{sweep.name}"  # the group the training runs of this sweep used
    assert logged["config"]["reference"] == "torch (partial, float32)"
    assert sweep_failures(sweep) == []  # the report's own wandb dir is not a crashed job


def test_the_wandb_log_is_read_once_it_is_complete(tmp_path: Path, wandb_offline):
    """The tests' log reader waits for a log still being written (its header alone, then half a record, then the whole
    log), as wandb's service process may leave it when ``run.finish()`` returns."""
    import threading

    sweep = write_sweep(tmp_path / "sweep", {REF: reference((0, 1))}, logger=WANDB)
    cb = CompareOnMultirunEnd()
    cb.on_multirun_end(_cfg(sweep))
    written = next(_report_run(sweep).glob("run-*.wandb"))
    read_wandb_run(written)  # the service may still be writing it: the bytes copied below must be the whole log
    whole = written.read_bytes()
    late = tmp_path / "late.wandb"
    late.write_bytes(whole[:7])
    steps = [lambda: late.write_bytes(whole[:len(whole) // 2]), lambda: late.write_bytes(whole)]
    timers = [threading.Timer(0.5 * (i + 1), step) for i, step in enumerate(steps)]
    for t in timers:
        t.start()
    logged = read_wandb_run(late)
    for t in timers:
        t.join()
    assert logged["group"] == f"synth-{sweep.name}" and logged["config"]["reference"] == "torch (partial, float32)"


def test_no_wandb_when_the_runs_did_not_use_it(tmp_path: Path, wandb_offline):
    sweep = write_sweep(tmp_path / "sweep", {REF: reference((0, 1))})
    cb = CompareOnMultirunEnd()
    cb.on_multirun_end(_cfg(sweep))
    assert cb.last_report is not None
    assert not (sweep / "wandb").exists()


def test_wandb_failure_never_fails_the_sweep(tmp_path: Path, wandb_offline, monkeypatch, caplog):
    import wandb

    def broken(**kw):
        raise RuntimeError("no network")

    monkeypatch.setattr(wandb, "init", broken)
    sweep = write_sweep(tmp_path / "sweep", {REF: reference((0, 1))}, logger=WANDB)
    cb = CompareOnMultirunEnd()
    with caplog.at_level(logging.WARNING, logger="llm.report"):
        cb.on_multirun_end(_cfg(sweep))
    assert cb.last_report == sweep / MD_FILE and _report_runs(sweep) == []
    assert "could not log the comparison to wandb" in caplog.text and "no network" in caplog.text


def test_the_report_joins_the_group_of_a_sweep_named_0(tmp_path: Path, wandb_offline):
    """``sweep.name=0`` (a name Hydra reads as a number): llm.train groups the runs under ``0-<sweep dir>``; the report
    went to ``default-<sweep dir>``, a group of its own beside them."""
    sweep = write_sweep(tmp_path / "sweep", {REF: reference((0, 1))}, logger=WANDB)
    cfg = OmegaConf.create({"hydra": {"sweep": {"dir": str(sweep)}}, "sweep": {"name": 0}})
    cb = CompareOnMultirunEnd()
    cb.on_multirun_end(cfg)
    assert read_wandb_run(next(_report_run(sweep).glob("run-*.wandb")))["group"] == f"0-{sweep.name}"
