"""train.sample_every: greedy continuations of fixed prompts in samples.jsonl and a wandb table,
without changing what is trained, switchable on when resuming a run older than the keys."""

from __future__ import annotations

import json

import pytest
import torch
from helpers import compose_cfg, read_wandb_run, run_inprocess, train_losses, val_losses

from llm.config_check import validate_config
from llm.errors import ConfigError

# dropout draws random numbers every step: a sampler that drew any would change the later losses
COMMON = ["train.max_steps=6", "train.eval_every=3", "train.log_every=1", "model.dropout=0.1", "seed=7"]


def test_samples_switched_on_when_resuming_an_old_run_leave_training_unchanged(tmp_path):
    plain = tmp_path / "plain"
    run_inprocess(plain, COMMON)
    assert not (plain / "samples.jsonl").exists()

    run = tmp_path / "run"
    run_inprocess(run, [*COMMON, "train.stop_at_step=3"])
    # make it a run from before the sample keys existed: its saved config lacks them
    ckpt = (run / "checkpoints" / "last.pt").resolve()
    state = torch.load(ckpt, weights_only=False)
    for key in ("sample_every", "sample_tokens", "sample_prompts"):
        del state["config"]["train"][key]
    torch.save(state, ckpt)
    # a sample written before the checkpoint stays; one after it (a crash later) is sampled again
    (run / "samples.jsonl").write_text(json.dumps({"step": 2, "prompt": "p", "text": "kept"}) + "\n"
                                       + json.dumps({"step": 5, "prompt": "p", "text": "dropped"}) + "\n")

    summary = run_inprocess(run, [*COMMON, "train.resume=auto", "train.sample_every=2", "train.sample_tokens=5",
                                  "logger=wandb"])
    assert summary["status"] == "completed" and summary["step"] == 6
    assert train_losses(run) == train_losses(plain) and val_losses(run) == val_losses(plain)

    records = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    prompts = compose_cfg([]).train.sample_prompts
    assert [r["step"] for r in records] == [2] + [4] * len(prompts) + [6] * len(prompts)
    assert [r["prompt"] for r in records[1:]] == list(prompts) * 2
    for r in records[1:]:
        assert isinstance(r["text"], str) and 0 < r["tokens"] <= 5 and r["end_of_text"] in (True, False)
        assert r["text"] or r["end_of_text"]

    (wandb_log,) = (run / "wandb").glob("offline-run-*/*.wandb")
    logged = [h for h in read_wandb_run(wandb_log)["history"] if "samples/_type" in h]
    assert [(h["_step"], h["samples/_type"]) for h in logged] == [(4, "table-file"), (6, "table-file")]
    assert [h["samples/nrows"] for h in logged] == [1 + len(prompts), len(records)]  # the table grows
    (last,) = (run / "wandb").glob("offline-run-*/files/" + logged[-1]["samples/path"])
    table = json.loads(last.read_text())
    assert table["columns"] == ["step", "prompt", "text"]
    assert [row[0] for row in table["data"]] == [r["step"] for r in records]  # every sample so far, in order
    assert table["data"][-1][2] == records[-1]["text"]


def test_a_resume_may_switch_samples_on_or_off():
    """Samples change nothing trained (the test above), so resume lets the command line set them."""
    from omegaconf import OmegaConf

    from llm.training.resume import reconcile_resume_config

    saved = OmegaConf.to_container(compose_cfg([]), resolve=True)
    asked = ["train.sample_every=5", "train.sample_tokens=7", "train.sample_prompts=[x]"]
    cfg = reconcile_resume_config(saved, compose_cfg(asked), asked)
    assert (cfg.train.sample_every, cfg.train.sample_tokens, list(cfg.train.sample_prompts)) == (5, 7, ["x"])


@pytest.mark.parametrize("overrides,message", [
    (["train.sample_every=-1"], "train.sample_every=-1 must be an integer >= 0"),
    (["train.sample_tokens=0"], "train.sample_tokens=0 must be a positive integer"),
    (["train.sample_prompts=oops"], "train.sample_prompts='oops' must be a list of strings"),
    (["train.sample_prompts=[1,2]"], "train.sample_prompts=[1, 2] must be a list of strings"),
    (["train.sample_every=5", "train.sample_prompts=[]"], "train.sample_every=5 needs at least one prompt"),
])
def test_bad_sample_settings_fail_before_any_work_naming_the_key(overrides, message):
    with pytest.raises(ConfigError) as e:
        validate_config(compose_cfg(overrides))
    assert message in str(e.value) and "\n" not in str(e.value)


def test_a_sample_prompt_longer_than_the_context_is_refused_before_the_data(tmp_path, monkeypatch):
    import llm.training.trainer as trainer

    monkeypatch.setattr(trainer.Trainer, "_load_data", lambda self: pytest.fail("data loaded before the check"))
    with pytest.raises(ConfigError, match=r"train.sample_prompts\[1\] is \d+ tokens .* context of 32 positions"):
        run_inprocess(tmp_path, ["train.sample_every=2", "train.sample_prompts=[ok,'" + "word " * 40 + "']"])
