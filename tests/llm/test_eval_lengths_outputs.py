"""``python -m llm.eval_lengths``'s output files: only lengths computed the same way join an earlier evaluation's file,
and all of those do (a length under bfloat16 autocast is not the float32 evaluation's; the newest checkpoint named
as ``last.pt`` is the default's); the file's config says how every length it holds was evaluated; a length no val
document reaches changes nothing of the lengths evaluated; and a run still training is evaluated with a warning
saying so, or refused saying it is still training, never that it stopped."""

from __future__ import annotations

import json
import shutil

import pytest
from helpers import CONF, run_inprocess, short_documents_only
from helpers import eval_lengths_inprocess as run_eval
from hydra import compose, initialize_config_dir

import llm.evaluation.lengths as lengths_mod
from llm.errors import ConfigError
from llm.evaluation.lengths import DEFAULT_BUCKETS, eval_lengths_from_config, unfinished_run_warning
from llm.generation.load import open_run
from llm.training.run_dir import RunDirLock


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("outputs") / "run"
    run_inprocess(run_dir, ["train.max_steps=2", "train.eval_every=2", "device=cpu"])
    return run_dir


def on_disk(run_dir, label: str) -> dict:
    return json.loads((run_dir / lengths_mod.OUT_DIR / f"{label}.json").read_text())


@pytest.fixture
def still_training(trained_run, tmp_path):
    """A copy of the run whose dir a live holder has locked, its summary not written yet (as while it trains)."""
    run = tmp_path / "run"
    shutil.copytree(trained_run, run, ignore=shutil.ignore_patterns("eval_lengths", "summary.json", ".run.lock"))
    lock = RunDirLock(run).acquire()
    lock.mark_owner()
    yield run
    lock.release()


def test_a_bfloat16_length_never_joins_a_float32_evaluation(trained_run):
    """dtype=bfloat16 for one length of a float32 file: the float32 file is moved to superseded/ (a mix would be
    read as one evaluation, under the config's last dtype), and the record says the autocast it ran under."""
    first, _ = run_eval(trained_run, "lengths=[32,64]", "tokens=128", "label=prec")
    assert first["autocast_dtype"] == "none"
    result, lines = run_eval(trained_run, "lengths=[64]", "tokens=128", "label=prec", "dtype=bfloat16")
    assert result["autocast_dtype"] == "bfloat16"
    saved = on_disk(trained_run, "prec")
    assert [m["length"] for m in saved["lengths"]] == [64] and saved["config"]["dtype"] == "bfloat16"
    assert any("held another evaluation (autocast_dtype='none' (this one: 'bfloat16'))" in line for line in lines)
    (moved,) = (trained_run / lengths_mod.OUT_DIR / lengths_mod.SUPERSEDED_DIR).glob("prec-*.json")
    assert [m["length"] for m in json.loads(moved.read_text())["lengths"]] == [32, 64]
    # a longer length under another autocast: the note names the autocast, not the default bucket it also changes
    _, lines = run_eval(trained_run, "lengths=[128]", "tokens=256", "label=prec")
    assert any("held another evaluation (tokens=128 (this one: 256), autocast_dtype='bfloat16' (this one: 'none'))"
               in line for line in lines), lines


def test_a_file_of_before_the_autocast_was_recorded_still_takes_float32_lengths(trained_run):
    """A record without ``autocast_dtype`` (written by earlier code) reads it from its config's dtype and device:
    a float32 evaluation of more lengths joins it, as it joined before."""
    run_eval(trained_run, "lengths=[32]", "tokens=128", "label=old")
    path = trained_run / lengths_mod.OUT_DIR / "old.json"
    record = json.loads(path.read_text())
    del record["autocast_dtype"]
    path.write_text(json.dumps(record))
    _, lines = run_eval(trained_run, "lengths=[64]", "tokens=128", "label=old")
    assert [m["length"] for m in on_disk(trained_run, "old")["lengths"]] == [32, 64]
    assert not any("held another evaluation" in line for line in lines)


def test_the_config_keeps_the_rope_group_of_every_length_the_file_holds(trained_run):
    """Lengths joining a file: its config's per-length rope groups are those of every length it holds, not only of
    the lengths of the last command (the earlier ones' scaling, e.g. factor=auto's factor per length, stays)."""
    run_eval(trained_run, "lengths=[32]", "tokens=128", "label=ropes", "rope.scaling.type=yarn",
             "rope.scaling.factor=auto")
    run_eval(trained_run, "lengths=[64]", "tokens=128", "label=ropes", "rope.scaling.type=yarn",
             "rope.scaling.factor=auto")
    saved = on_disk(trained_run, "ropes")
    assert [m["length"] for m in saved["lengths"]] == [32, 64] and saved["config"]["lengths"] == [32, 64]
    ropes = saved["config"]["rope"]
    assert list(ropes) == ["32", "64"]
    assert (ropes["32"]["scaling"]["factor"], ropes["64"]["scaling"]["factor"]) == (1.0, 2.0)


def test_the_newest_checkpoint_named_as_last_pt_is_the_same_evaluation(trained_run):
    """checkpoint=<run>/checkpoints/last.pt (a link to the newest step_*.pt, which the default evaluates) or a
    relative path to it: more lengths of the same evaluation, not another one moving the file to superseded/."""
    run_eval(trained_run, "lengths=[32]", "tokens=128", "label=named")
    last = trained_run / "checkpoints" / "last.pt"
    assert last.is_symlink()
    _, lines = run_eval(trained_run, "lengths=[64]", "tokens=128", "label=named", f"checkpoint={last}")
    saved = on_disk(trained_run, "named")
    assert [m["length"] for m in saved["lengths"]] == [32, 64], lines
    assert saved["checkpoint"] == str(last.resolve())
    assert not list((trained_run / lengths_mod.OUT_DIR / lengths_mod.SUPERSEDED_DIR).glob("named-*"))


def test_a_skipped_length_leaves_the_evaluated_lengths_their_position_buckets(trained_run, monkeypatch):
    """lengths=[64,6400] where no document has 6400 tokens: the buckets are 64 / DEFAULT_BUCKETS positions, as for
    lengths=[64] alone, not 6400 / DEFAULT_BUCKETS (one bucket of 100 for the whole 64-token window: no curve)."""
    short_documents_only(monkeypatch, 100)
    alone, _ = run_eval(trained_run, "lengths=[64]", "tokens=6400", "label=alone")
    result, lines = run_eval(trained_run, "lengths=[64,6400]", "tokens=6400", "label=with_skipped")
    assert [s["length"] for s in result["skipped"]] == [6400]
    assert result["bucket_size"] == alone["bucket_size"] == max(1, 64 // DEFAULT_BUCKETS)
    (m,) = result["lengths"]
    assert len(m["buckets"]) == len(alone["lengths"][0]["buckets"]) == 64 // result["bucket_size"]


def test_a_run_still_training_is_evaluated_with_a_warning(still_training):
    """No summary.json yet, so nothing said it had not finished: its checkpoint so far was recorded silently."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("eval_lengths", overrides=[f"run={still_training}", "device=cpu", "lengths=[32]",
                                                 "tokens=64"])
    lines: list[str] = []
    eval_lengths_from_config(cfg, emit=lines.append)
    (warning,) = [line for line in lines if line.startswith("warning:")]
    assert f"{still_training} is still training (pid " in warning and "not the finished model" in warning


def test_a_finished_run_gets_no_warning(trained_run):
    assert unfinished_run_warning(trained_run) is None


def test_a_run_still_training_without_a_checkpoint_is_not_said_to_have_stopped(still_training):
    shutil.rmtree(still_training / "checkpoints")
    with pytest.raises(ConfigError) as refused:
        open_run(str(still_training))
    assert "is still training (pid " in str(refused.value) and "stopped" not in str(refused.value)
