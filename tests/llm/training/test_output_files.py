"""What a run writes is valid JSON and its tracker runs in the mode it was asked for.

summary.json held a bare ``NaN`` for ``val_loss_se`` with one val window (``Infinity`` for an infinite
perplexity): not JSON, so a browser's or jq's parser refused the file. ``WANDB_MODE`` was ignored.
"""

from __future__ import annotations

import json
import logging
import math

import pytest

from llm.fileio import write_json_atomic
from llm.report.runs import as_float
from llm.training.outputs import SUMMARY_FILE, RunOutputs, Tracker


def _strict(text: str):
    """json.loads as a strict parser reads: ``NaN``/``Infinity`` are errors."""
    def refuse(constant: str):
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


def test_a_json_file_holds_no_bare_nan_or_infinity(tmp_path):
    """Every writer's non-finite floats, at any depth, become null by default (a reader checks for None)."""
    path = tmp_path / "x.json"
    write_json_atomic(path, {"a": math.nan, "b": [1.0, math.inf, (-math.inf,)], "c": {"d": math.nan, "e": 2.5}})
    assert _strict(path.read_text()) == {"a": None, "b": [1.0, None, [None]], "c": {"d": None, "e": 2.5}}


def test_summary_json_writes_non_finite_values_as_metrics_jsonl_does(tmp_path):
    """As metrics.jsonl writes them ("nan", "inf"), which the report reads back as floats (a diverged run shows
    nan, not a gap)."""
    outputs = RunOutputs(tmp_path, Tracker({"name": "none"}, tmp_path, name="r", group="g", config={}))
    outputs.finish({"val_loss": 3.5, "val_loss_se": math.nan, "val_ppl": math.inf, "status": "completed"}, 0)
    summary = _strict((tmp_path / SUMMARY_FILE).read_text())
    assert summary == {"val_loss": 3.5, "val_loss_se": "nan", "val_ppl": "inf", "status": "completed"}
    assert math.isnan(as_float(summary["val_loss_se"])) and as_float(summary["val_ppl"]) == math.inf


@pytest.mark.parametrize("env,mode,said", [
    ("disabled", "disabled", "wandb: disabled (from $WANDB_MODE), nothing is logged to wandb"),
    ("offline", "disabled", "wandb: disabled (logger.wandb.mode, not $WANDB_MODE=offline), nothing is logged"),
    (None, "disabled", "wandb: disabled (logger.wandb.mode), nothing is logged to wandb"),
])
def test_the_tracker_logs_the_mode_it_runs_in_and_where_it_came_from(tmp_path, monkeypatch, caplog, env, mode, said):
    if env is None:
        monkeypatch.setenv("WANDB_MODE", "")
        monkeypatch.delenv("WANDB_MODE")
    else:
        monkeypatch.setenv("WANDB_MODE", env)
    with caplog.at_level(logging.INFO, logger="llm.training.outputs"):
        tracker = Tracker({"name": "wandb", "wandb": {"mode": mode, "project": "p"}}, tmp_path, name="r", group="g",
                          config={})
    assert tracker.run is None and not (tmp_path / "wandb").exists()
    assert any(r.getMessage().startswith(said) for r in caplog.records), [r.getMessage() for r in caplog.records]


def test_an_offline_tracker_run_takes_a_numeric_group_and_logs_its_mode(tmp_path, monkeypatch, caplog):
    """``sweep.name=2024`` is the group of a single run: a number, which wandb.init takes only as a string."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    with caplog.at_level(logging.INFO, logger="llm.training.outputs"):
        tracker = Tracker({"name": "wandb", "wandb": {"mode": "offline", "project": "p", "tags": ["a"]}}, tmp_path,
                          name="r", group=2024, config={})
    try:
        assert tracker.run is not None and tracker.run.group == "2024"
    finally:
        tracker.finish()
    assert "wandb: offline mode (from $WANDB_MODE), project p, group 2024" in [r.getMessage() for r in caplog.records]


def test_a_sweep_over_other_keys_names_each_run_by_its_values(tmp_path, monkeypatch):
    """optim.lr=0.001,0.003: each job's tracker run is named with its learning rate (the two were named alike);
    rope and seed, which the name says already, are not repeated."""
    import llm.training.trainer as trainer_module
    from tests.helpers import run_command_inprocess

    names = []
    real = trainer_module.Tracker

    def recording(*args, **kwargs):
        names.append(kwargs["name"])
        return real(*args, **kwargs)

    monkeypatch.setattr(trainer_module, "Tracker", recording)
    sweep = tmp_path / "sweep"
    assert run_command_inprocess(["optim.lr=0.001,0.003", "seed=1,2", "train.max_steps=1", "train.eval_every=1",
                                  f"hydra.sweep.dir={sweep}"]) == 0
    assert names == [f"torch (partial, float32) s{s} optim.lr={lr}" for lr in ("0.001", "0.003") for s in (1, 2)]


def test_muons_adamw_learning_rate_is_logged_beside_muons(tmp_path):
    """optim=muon trains the block matrices with Muon and the rest with AdamW: each train line logs both rates (only
    Muon's was, so AdamW's schedule could not be read from the metrics)."""
    from tests.helpers import run_inprocess

    run_inprocess(tmp_path, ["optim=muon", "train.max_steps=2", "train.log_every=1", "train.eval_every=2"])
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in lines if r["kind"] == "train"]
    assert train and all(r["lr"] > 0 and r["lr_adamw"] > 0 and r["lr"] != r["lr_adamw"] for r in train), train
