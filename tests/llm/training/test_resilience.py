"""Several processes, exact resume, interruption, non-finite losses and bad configuration."""

from __future__ import annotations

import json
import math
import signal
import subprocess
import sys
import time

import pytest
import torch
from helpers import (
    ROOT,
    compose_cfg,
    read_metrics,
    run_cli,
    run_command_inprocess,
    run_inprocess,
    train_losses,
    val_losses,
)

from llm.config_check import validate_config


def test_resume_reproduces_the_uninterrupted_curve_bitwise(tmp_path):
    # dropout: each step draws random numbers, so the curves agree only if the resume restores the generators
    steps = ["train.max_steps=6", "train.eval_every=2", "train.log_every=1", "model.dropout=0.1"]
    run_inprocess(tmp_path / "full", steps)
    first = run_inprocess(tmp_path / "resumed", [*steps, "train.stop_at_step=3"])
    assert first["status"] == "interrupted" and first["step"] == 3
    assert (tmp_path / "resumed" / "checkpoints" / "last.pt").exists()
    second = run_inprocess(tmp_path / "resumed", [*steps, "train.resume=auto"])
    assert second["status"] == "completed" and second["step"] == 6
    assert train_losses(tmp_path / "resumed") == train_losses(tmp_path / "full")  # bitwise: == on floats
    assert val_losses(tmp_path / "resumed") == val_losses(tmp_path / "full")
    steps_logged = [m["step"] for m in read_metrics(tmp_path / "resumed") if m["kind"] == "train"]
    assert steps_logged == list(range(1, 7)), "a resumed run must neither lose nor repeat metric lines"


@pytest.mark.gpu
@pytest.mark.parametrize(("first", "then"), [("cpu", "cuda"), ("cuda", "cpu")])
def test_a_run_resumes_on_the_other_device(tmp_path, first, then):
    """``device`` is the command's, not the run's: a run stopped on the CPU resumes on the GPU and the other way
    round (the checkpoint loads to the CPU and moves with the model, the optimizer state follows its parameters, a
    device's RNG state is restored only where that device is) and completes, its metric lines neither lost nor
    repeated, every loss finite."""
    steps = ["train.max_steps=6", "train.eval_every=2", "train.log_every=1", "model.dropout=0.1"]
    first_part = run_inprocess(tmp_path, [*steps, f"device={first}", "train.stop_at_step=3"])
    assert first_part["status"] == "interrupted" and first_part["step"] == 3
    rest = run_inprocess(tmp_path, [*steps, f"device={then}", "train.resume=auto"])
    assert rest["status"] == "completed" and rest["step"] == 6
    losses = train_losses(tmp_path)
    assert sorted(losses) == list(range(1, 7)) and all(math.isfinite(x) for x in losses.values()), losses
    assert all(math.isfinite(x) for x in val_losses(tmp_path).values())


def test_checkpoint_holds_everything_a_resume_needs(tmp_path):
    run_inprocess(tmp_path, ["train.max_steps=6", "train.ckpt_every=2"])
    ckpts = sorted((tmp_path / "checkpoints").glob("step_*.pt"))
    assert [c.name for c in ckpts] == ["step_0000004.pt", "step_0000006.pt"]  # keeps the newest 2
    state = torch.load(tmp_path / "checkpoints" / "last.pt", weights_only=False)
    assert state["step"] == 6 and state["data"]["next_step"] == 6
    assert {"model", "optimizers", "rng", "config"} <= set(state)
    assert {"python", "numpy", "torch"} <= set(state["rng"])
    assert not list((tmp_path / "checkpoints").glob("*.tmp"))


def test_resume_path_must_exist(tmp_path):
    with pytest.raises(FileNotFoundError, match="train.resume=.*nope.pt"):
        run_inprocess(tmp_path, ["train.max_steps=2", f"train.resume={tmp_path / 'nope.pt'}"])


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "Ctrl-C"])
def test_signal_checkpoints_and_says_how_to_resume(tmp_path, sig):
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "llm.train", *__import__("helpers").SMALL, "train.max_steps=100000",
           "train.log_every=1", "logger=wandb", f"hydra.run.dir={run_dir}"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    metrics = run_dir / "metrics.jsonl"
    deadline = time.time() + 300
    while time.time() < deadline and not (metrics.exists() and metrics.read_text().count("\n") >= 3):
        time.sleep(0.1)
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 128 + sig, out[-3000:]
    assert "Resume with" in out and "train.resume=auto" in out and str(run_dir) in out
    assert "Traceback" not in out
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "interrupted"
    state = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=False)
    assert state["step"] == summary["step"] >= 3
    logged = [m["step"] for m in read_metrics(run_dir) if m["kind"] == "train"]
    assert logged == list(range(1, summary["step"] + 1)), "lines logged before the signal must all be there"
    assert list((run_dir / "wandb").glob("offline-run-*/*.wandb")), "wandb offline files must survive"


def test_a_signal_to_a_sweep_says_how_to_continue_all_of_it(tmp_path):
    """A signal ends the whole sweep (the jobs after it never start): the job checkpoints, and the sweep prints
    the one command that continues every job (test_entry_point follows such a command to the end)."""
    sweep = tmp_path / "sweep"
    cmd = [sys.executable, "-m", "llm.train", "-m", *__import__("helpers").SMALL, "seed=0,1",
           "train.max_steps=100000", "train.log_every=1", f"hydra.sweep.dir={sweep}"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    metrics = sweep / "0_torch_s0" / "metrics.jsonl"
    deadline = time.time() + 300
    while time.time() < deadline and not (metrics.exists() and metrics.read_text().count("\n") >= 3):
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 128 + signal.SIGTERM, out[-3000:]
    command = out.split("Continue the sweep with:")[1].strip().splitlines()[0]
    assert command.startswith("python -m llm.train -m ") and "seed=0,1" in command
    assert command.endswith(f"hydra.sweep.dir={sweep} train.resume=auto")
    job = json.loads((sweep / "0_torch_s0" / "summary.json").read_text())
    state = torch.load(sweep / "0_torch_s0" / "checkpoints" / "last.pt", weights_only=False)
    assert job["status"] == "interrupted" and state["step"] == job["step"] >= 3
    assert not (sweep / "1_torch_s1").exists(), "the signal ended the sweep before the second job"


def _poison_forward_at(monkeypatch, bad_calls: set[int]) -> None:
    """Make the model's loss NaN on the given forward calls (counted from 1) to simulate divergence."""
    from llm.model import GPT

    original, calls = GPT.forward, {"n": 0}

    def forward(self, idx, targets=None):
        logits, loss = original(self, idx, targets)
        if self.training and targets is not None:
            calls["n"] += 1
            if calls["n"] in bad_calls:
                loss = loss * float("nan")
        return logits, loss

    monkeypatch.setattr(GPT, "forward", forward)


def test_nonfinite_loss_stops_keeps_last_good_checkpoint(tmp_path, monkeypatch):
    _poison_forward_at(monkeypatch, {4})
    with pytest.raises(SystemExit) as exc:
        run_inprocess(tmp_path, ["train.max_steps=8", "train.ckpt_every=3"])
    assert exc.value.code == 1
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "nonfinite" and summary["step"] == 4
    assert "step 4" in summary["message"]
    state = torch.load(tmp_path / "checkpoints" / "last.pt", weights_only=False)
    assert state["step"] == 3  # the last good one, not the broken state
    assert all(torch.isfinite(v).all() for v in state["model"].values() if v.is_floating_point())


def test_skip_nonfinite_tolerates_k_bad_steps(tmp_path, monkeypatch):
    _poison_forward_at(monkeypatch, {2, 4})
    summary = run_inprocess(tmp_path, ["train.max_steps=5", "train.skip_nonfinite=2", "train.log_every=1"])
    assert summary["status"] == "completed" and summary["skipped_steps"] == 2
    assert math.isfinite(float(summary["val_loss"]))  # finite: summary.json writes NaN as "nan"


@pytest.mark.parametrize(
    "overrides,message",
    [
        (["model.n_embd=30", "model.n_head=4"], "model.n_embd=30 must be divisible by model.n_head=4"),
        (["model.n_embd=36", "model.n_head=4", "rope.variant=full"], "must be even"),
        (["model.n_embd=24", "model.n_head=4"], "model.n_embd/model.n_head=6: head_dim must be a multiple of 4 for "
                                              "variant='partial'"),
        (["rope.name=nope"], "rope.name='nope' is not registered; allowed: "),
        (["rope.base=-1"], "rope.base=-1: base must be a finite number > 0"),
        (["rope.variant=x"], "rope.variant=x: variant must be one of"),
        (["+rope.foo=1"], "rope.foo=1: rope=torch has no option 'foo'"),
        (["seed=abc"], "seed='abc' must be an integer"),
        (["seed=-1"], "seed=-1 must be an integer in [0, 2**32 - 1]"),
        (["seed=4294967296"], "seed=4294967296 must be an integer in [0, 2**32 - 1]"),
        (["model.tie_embeddings=maybe"], "model.tie_embeddings='maybe' must be true or false"),
        (["train.compile=yes"], "train.compile='yes' must be true or false"),
        (["train.keep_checkpoints=0"], "train.keep_checkpoints=0 must be an integer >= 1"),
        # `train.init_from=$SRC` with SRC unset: read as unset, it trained from scratch without a word
        (["train.init_from="], "train.init_from is empty: give a run dir, or train.init_from=null for a new run"),
        (["train.resume="], "train.resume is empty: give auto or a checkpoint file, or train.resume=null"),
        (["train.max_steps='5'"], "train.max_steps='5' must be a positive integer"),  # quoted: no number
        (["train.ckpt_every=null"], "train.ckpt_every=null must be an integer >= 0"),
        (["sweep.jobs_per_gpu=0"], "sweep.jobs_per_gpu=0 must be a positive integer"),
        (["cache_dir=/proc/ropelab-nope"], "cache_dir=/proc/ropelab-nope: cannot create it"),
        (["logger=wandb", "logger.wandb.mode=bogus"], "logger.wandb.mode='bogus'; allowed: online, offline, disabled"),
        (["optim.lr=nan"], "optim.lr=nan must be a finite number > 0"),
        (["optim.weight_decay=-1"], "optim.weight_decay=-1 must be a finite number >= 0"),
        (["model.n_head=0"], "model.n_head=0 must be a positive integer"),
        (["model.dropout=1.5"], "model.dropout=1.5 must be in [0, 1)"),
        (["train.warmup_frac=1.5"], "train.warmup_frac=1.5 must be in [0, 1)"),
        (["train.grad_clip=-1"], "train.grad_clip=-1 must be a finite number >= 0"),
        (["device=tpu"], "device='tpu'; allowed: auto, cpu, cuda, cuda:N"),
        (["+rope.max_seq_len=16"], "model.seq_len=32 exceeds the RoPE cache rope.max_seq_len=16"),
        (["optim.name=sgd"], "optim.name='sgd'; allowed: adamw, muon"),
        (["train.batch_size=0"], "train.batch_size=0 must be a positive integer"),
        (["train.dtype=fp8"], "train.dtype='fp8'; allowed"),
        (["train.attention=fast"], "train.attention='fast'; allowed: auto, flash, efficient, cudnn, math"),
        (["data=text_files", "data.path=/no/such/dir"], "data.path=/no/such/dir"),
        (["tokenizer.name=nope"], "tokenizer"),
        (["data.name=nope"], "pystdlib"),
    ],
)
def test_bad_config_fails_before_any_work_naming_the_key(overrides, message):
    cfg = compose_cfg(overrides)
    with pytest.raises(ValueError, match=None) as exc:
        validate_config(cfg)
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_fused_loss_off_cuda_needs_the_interpreter(monkeypatch):
    """Liger's fused loss is Triton kernels: on the CPU without TRITON_INTERPRET=1 it is refused before any work.

    The interpreter is switched off for rope's device rule alone (rope._launch.INTERPRETING), not in the
    environment: the check imports Liger, and Liger (with Triton) imported under TRITON_INTERPRET=0 leaves the later
    Triton tests of this process without the interpreter ("0 active drivers")."""
    monkeypatch.setattr("rope._launch.INTERPRETING", False)
    with pytest.raises(ValueError, match="train.fused_linear_ce=true runs Liger-Kernel's Triton kernels: on a CUDA "
                                         "GPU, or on the CPU with TRITON_INTERPRET=1"):
        validate_config(compose_cfg(["train.fused_linear_ce=true", "device=cpu"]))


def test_bad_config_on_the_command_line_is_one_clear_line(tmp_path, capsys):
    """Through the entry point in this process (tests/llm/test_entry_point.py runs the real command)."""
    assert run_command_inprocess(["model.n_embd=30", "model.n_head=4", f"hydra.run.dir={tmp_path}"],
                                  multirun=False) == 2
    assert "model.n_embd=30 must be divisible by model.n_head=4" in capsys.readouterr().err
    assert not (tmp_path / "metrics.jsonl").exists()
    assert run_command_inprocess(["model=nope", f"hydra.run.dir={tmp_path}"], multirun=False) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("Error: model=nope is not an option of model; allowed: ") and "tiny" in lines[0]


def test_two_processes_match_one_with_the_same_global_batch(tmp_path):
    """torchrun with two ranks against the same run in one process (this one: the reference needs no process of
    its own)."""
    common = ["train.max_steps=4", "train.log_every=1", "train.eval_every=2", "train.batch_size=4",
              "train.eval_batches=2", "device=cpu", "model.dropout=0.0"]  # an eval batch on each rank
    run_inprocess(tmp_path / "one", common)
    two = run_cli([*common, f"hydra.run.dir={tmp_path / 'two'}"],
                  module=["torch.distributed.run", "--nproc_per_node=2", "--master_port=29533", "-m", "llm.train"],
                  extra_env={"OMP_NUM_THREADS": "1"})
    assert two.returncode == 0, two.stdout[-2000:] + two.stderr[-3000:]
    a, b = train_losses(tmp_path / "one"), train_losses(tmp_path / "two")
    assert a.keys() == b.keys() == set(range(1, 5))
    for step in a:
        assert b[step] == pytest.approx(a[step], rel=1e-4, abs=1e-4), step
    va, vb = val_losses(tmp_path / "one"), val_losses(tmp_path / "two")
    for step in va:
        assert vb[step] == pytest.approx(va[step], rel=1e-4, abs=1e-4)
    summary = json.loads((tmp_path / "two" / "summary.json").read_text())
    assert summary["world_size"] == 2
    assert not list(ROOT.glob("metrics.jsonl")), "non-main ranks must not write outputs"


def test_the_trainer_is_freed_before_the_process_group_goes(tmp_path, monkeypatch):
    """Under torchrun the DDP wrapper's reducer holds the process group; freed after destroy_process_group,
    gloo's destructor can deadlock (a rank hung at exit in CI). So no Trainer may be alive at cleanup."""
    import gc

    from llm.training import run as run_module
    from llm.training.trainer import Trainer

    alive = []
    real_cleanup = run_module.cleanup

    def cleanup(info, **kwargs):
        alive.append(sum(isinstance(o, Trainer) for o in gc.get_objects()))
        real_cleanup(info, **kwargs)

    monkeypatch.setattr(run_module, "cleanup", cleanup)
    run_inprocess(tmp_path / "run", ["train.max_steps=2", "train.eval_every=2", "device=cpu"])
    assert alive == [0]


@pytest.mark.parametrize("fails", [False, True])
def test_ranks_leave_the_process_group_together_after_a_run_that_ended(tmp_path, monkeypatch, fails):
    """A rank that ended its run meets the others at a barrier before it tears its connections down (rank 1, which
    writes nothing, reached the end first and went while rank 0 still wrote its outputs); one whose run failed
    does not wait for peers that may never come."""
    from llm.training import distributed
    from llm.training import run as run_module
    from llm.training.trainer import Trainer

    calls = []
    monkeypatch.setattr(run_module, "init_distributed", lambda device: distributed.DistInfo(0, 2, 0))
    monkeypatch.setattr(run_module, "_shared_run_dir", lambda run_dir, info: run_dir)  # a broadcast
    monkeypatch.setattr(distributed.dist, "is_initialized", lambda: True)
    monkeypatch.setattr(distributed.dist, "barrier", lambda: calls.append("barrier"))
    monkeypatch.setattr(distributed.dist, "destroy_process_group", lambda: calls.append("destroy"))
    monkeypatch.setattr(Trainer, "__init__", lambda self, *a, **k: None)
    monkeypatch.setattr(Trainer, "fit", lambda self: (_ for _ in ()).throw(RuntimeError("boom")) if fails else "done")
    cfg = compose_cfg(["train.max_steps=2", "device=cpu"])
    if fails:
        with pytest.raises(RuntimeError, match="boom"):
            run_module.run_training(cfg, tmp_path / "run")
    else:
        assert run_module.run_training(cfg, tmp_path / "run") == "done"
    assert calls == (["destroy"] if fails else ["barrier", "destroy"])
