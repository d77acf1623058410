"""The training application end to end on the CPU: outputs, determinism, Hydra CLI and multirun, wandb."""

from __future__ import annotations

import json
import math
import socket

import numpy as np
import pytest
import torch
from helpers import (
    compose_cfg,
    read_metrics,
    read_wandb_run,
    run_cli,
    run_command_inprocess,
    run_inprocess,
    train_losses,
    val_losses,
)

SUMMARY_KEYS = {"rope", "variant", "compute_dtype", "seed", "params", "device", "train_time_s", "wall_time_s",
                "val_loss", "val_acc", "val_ppl", "tokens_per_s", "mfu", "git_commit", "code_fingerprint", "status",
                "step", "torch_threads", "autocast_dtype"}


def test_cli_run_writes_every_output(tmp_path):
    run_dir = tmp_path / "run"
    proc = run_cli(["train.max_steps=4", "train.eval_every=2", "train.log_every=2", f"hydra.run.dir={run_dir}"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (run_dir / ".hydra" / "config.yaml").is_file()
    resolved = (run_dir / "config.yaml").read_text()
    assert "max_steps: 4" in resolved and "${" not in resolved
    summary = json.loads((run_dir / "summary.json").read_text())
    assert SUMMARY_KEYS <= set(summary)
    assert summary["status"] == "completed" and summary["step"] == 4 and summary["rope"] == "torch"
    assert isinstance(summary["torch_threads"], int) and summary["torch_threads"] >= 1
    # train.dtype=auto: float32 without autocast on a CPU, bf16 autocast on a GPU (device=auto takes one)
    assert summary["autocast_dtype"] == ("none" if summary["device"] == "cpu" else "bfloat16"), summary["device"]
    for key in ("val_loss", "val_acc", "val_ppl", "train_time_s", "wall_time_s", "tokens_per_s"):
        assert math.isfinite(summary[key]), key
    assert summary["val_ppl"] == pytest.approx(math.exp(summary["val_loss"]), rel=1e-6)
    assert 0 <= summary["val_acc"] <= 1 and summary["train_time_s"] <= summary["wall_time_s"]
    # what the comparison needs to tell runs that shared a GPU (a CPU has no GPU UUID; device=auto takes a GPU
    # where there is one)
    assert summary["host"] == socket.gethostname()
    if summary["device"] == "cpu":
        assert summary["device_uuid"] is None
    else:
        assert summary["device_uuid"] == str(torch.cuda.get_device_properties(0).uuid)
    assert summary["started_at"] <= summary["ended_at"]
    metrics = read_metrics(run_dir)
    assert [m["step"] for m in metrics if m["kind"] == "val"] == [2, 4]
    assert [m["step"] for m in metrics if m["kind"] == "train"] == [2, 4]
    assert all(math.isfinite(m["loss"]) for m in metrics if m["kind"] == "train")
    assert (run_dir / "checkpoints" / "last.pt").exists()
    assert "val_loss" in proc.stdout + proc.stderr  # periodic eval lines


def test_loss_falls_on_tiny(tmp_path):
    # the real tiny preset with its cl100k vocabulary (SMALL's shrunken widths and byte tokenizer put back), shorter
    # sequences; 16 steps leave margins of 0.3 nats or more (seed 0, CPU, Python 3.11: val 10.67 at step 8, 9.31 at
    # 16, against 10.17 and 10.02; train 10.82 at step 5, 9.41 at 16). Val at step 8 is near the uniform guess, where
    # two batches' windows move it by half a nat.
    summary = run_inprocess(tmp_path, ["model=tiny", "tokenizer=cl100k_base", "model.n_layer=4", "model.n_embd=128",
                                       "model.n_head=4", "model.seq_len=64", "train.max_steps=16",
                                       "train.eval_every=8", "train.eval_batches=2", "data.max_files=300"])
    vals = val_losses(tmp_path)
    uniform = math.log(100277)  # loss of a uniform guess over the cl100k vocabulary
    assert vals[16] < vals[8] - 0.5 and vals[16] < uniform - 1.5, vals
    losses = train_losses(tmp_path)
    assert losses[16] < losses[5] - 1.0, losses
    assert summary["val_loss"] == vals[16]


def test_same_seed_same_curve_and_other_seed_differs(tmp_path):
    steps = ["train.max_steps=3", "train.log_every=1"]
    a = run_inprocess(tmp_path / "a", [*steps, "seed=3"])
    b = run_inprocess(tmp_path / "b", [*steps, "seed=3"])
    c = run_inprocess(tmp_path / "c", [*steps, "seed=4"])
    assert train_losses(tmp_path / "a") == train_losses(tmp_path / "b")
    assert a["val_loss"] == b["val_loss"]
    assert train_losses(tmp_path / "a") != train_losses(tmp_path / "c") and c["val_loss"] != a["val_loss"]


def test_deterministic_mode_is_per_run_and_attention_backend_applies(tmp_path):
    """deterministic=true turns strict deterministic algorithms on for its run and the next run off again
    (a multirun shares one process). train.attention=math pins the SDPA kernel (on the CPU the default
    is a flash kernel, so the numbers move in the last bits)."""
    import torch

    common = ["train.max_steps=3", "train.eval_every=3", "seed=2"]
    run_inprocess(tmp_path / "a", [*common, "train.deterministic=true", "train.attention=math"])
    assert torch.are_deterministic_algorithms_enabled()
    run_inprocess(tmp_path / "b", [*common, "train.attention=math"])
    assert not torch.are_deterministic_algorithms_enabled()
    assert val_losses(tmp_path / "a") == val_losses(tmp_path / "b")
    assert train_losses(tmp_path / "a") == train_losses(tmp_path / "b")


@pytest.mark.parametrize("name", ["flash", "efficient", "cudnn", "math"])
def test_attention_backend_leaves_only_that_kernel(name):
    import torch

    from llm.training.runtime import attention_backend

    flags = {"flash": torch.backends.cuda.flash_sdp_enabled, "efficient": torch.backends.cuda.mem_efficient_sdp_enabled,
             "cudnn": torch.backends.cuda.cudnn_sdp_enabled, "math": torch.backends.cuda.math_sdp_enabled}
    with attention_backend(name):
        assert {k for k, on in flags.items() if on()} == {name}
    with attention_backend("auto"):
        assert all(on() for on in flags.values())


def test_multirun_writes_one_dir_per_job_and_the_comparison(tmp_path):
    """Hydra's multirun through the entry point, in this process (the command's own process: the CLI test)."""
    sweep = tmp_path / "sweep"
    assert run_command_inprocess(["rope=torch,none", "train.max_steps=2", "train.eval_every=2",
                                  f"hydra.sweep.dir={sweep}"]) == 0
    runs = sorted(p.parent for p in sweep.glob("*/summary.json"))
    assert [r.name for r in runs] == ["0_torch_s0", "1_none_s0"]
    assert {json.loads((r / "summary.json").read_text())["rope"] for r in runs} == {"torch", "none"}
    assert (sweep / "comparison.md").is_file() and (sweep / "comparison.csv").is_file()


def test_wandb_offline_run_holds_metrics(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    run_dir = tmp_path / "run"
    assert run_command_inprocess(["train.max_steps=6", "train.log_every=2", "logger=wandb", "sweep.name=ci",
                                  f"hydra.run.dir={run_dir}"], multirun=False) == 0
    runs = list((run_dir / "wandb").glob("offline-run-*"))
    assert len(runs) == 1, list((run_dir / "wandb").iterdir())
    logs = list(runs[0].glob("*.wandb"))
    assert len(logs) == 1, "no wandb transaction log"
    run = read_wandb_run(logs[0])
    ours = json.loads((run_dir / "summary.json").read_text())
    assert run["group"] == "ci" and run["name"] == "torch (partial, float32) s0"
    assert run["summary"]["val/loss"] == pytest.approx(ours["val_loss"])
    assert run["summary"]["val/acc"] == pytest.approx(ours["val_acc"]) and run["summary"]["status"] == "completed"
    assert not [k for k in run["summary"] if k.startswith("val_")], "a val metric under two names"
    logged_train = [h["train/loss"] for h in run["history"] if "train/loss" in h]
    assert len(logged_train) == 3
    assert logged_train == pytest.approx([m["loss"] for m in read_metrics(run_dir) if m["kind"] == "train"])
    assert run["config"]["train"]["max_steps"] == 6 and run["config"]["rope"]["name"] == "torch"


def test_cli_overrides_any_key(tmp_path):
    cfg = compose_cfg(["rope=none", "model.n_layer=2", "train.max_steps=7", "optim.lr=0.01"])
    assert cfg.rope.name == "none" and cfg.model.n_layer == 2 and cfg.train.max_steps == 7
    assert cfg.optim.lr == 0.01


def test_perplexity_of_a_nan_loss_is_nan_and_past_float_range_is_inf():
    """A NaN val loss was recorded with val_ppl inf: a reader takes that for a diverged but finite evaluation."""
    from llm.evaluation.metrics import length_metrics
    from llm.training.evaluate import perplexity

    assert math.isnan(perplexity(float("nan")))
    assert perplexity(800.0) == float("inf") and perplexity(math.log(7.5)) == pytest.approx(7.5)
    loss = np.full((2, 4), np.nan)
    got = length_metrics(loss, np.zeros((2, 4)), loss, loss, split=2, bucket=2)
    assert math.isnan(got["val_ppl"])


def test_the_summary_says_the_autocast_dtype_the_run_trained_in(tmp_path):
    """compute_dtype is RoPE's arithmetic; nothing said whether the run trained under bfloat16 autocast (train.dtype
    auto is bfloat16 on a GPU, float32 on a CPU)."""
    summary = run_inprocess(tmp_path, ["train.max_steps=2", "train.eval_every=2", "train.dtype=bfloat16"])
    assert summary["autocast_dtype"] == "bfloat16" and summary["compute_dtype"] == "float32"
    # the model as built, with the fields model=tiny leaves to the code's defaults (bias, d_ff, norm_eps)
    model = summary["model_config"]
    assert model["bias"] is False and model["d_ff"] is None and model["norm_eps"] == 1e-6
