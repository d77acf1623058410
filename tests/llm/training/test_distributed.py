"""Training under torchrun: what a stop and a refusal print (once, from rank 0), and what torchrun cannot run.

The two multi-process tests launch ``torchrun --standalone`` with ``device=cpu`` (gloo on the CPU, a GPU machine
too); the others run the entry point in this process with the environment torchrun gives a process.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from helpers import ROOT, SMALL, read_metrics, run_cli, run_module_main

from llm import entry
from llm.train import resume_command

TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", "llm.train"]
#: torchrun sets 1 per process itself, saying so in a warning; set here, the two ranks share the 2 cores quietly
ENV = {"OMP_NUM_THREADS": "1"}


def _processes_naming(text: str) -> list[str]:
    """The command lines of the live processes that contain ``text``."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            line = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # ended meanwhile
            continue
        if text in line:
            found.append(line)
    return found


def test_sigterm_to_torchrun_checkpoints_and_prints_the_torchrun_resume_once(tmp_path):
    """torchrun passes a SIGTERM on to each process: the step ends on every rank, rank 0 checkpoints (every rank's
    RNG state with it: each rank draws dropout masks of its own), and the run says so once, with a resume command
    that resumes on as many processes (not ``python -m``: one process taking the whole global batch); no process
    is left behind."""
    run_dir = tmp_path / "run"
    cmd = [*TORCHRUN, *SMALL, "device=cpu", "train.max_steps=100000", "train.log_every=1", "model.dropout=0.1",
           f"hydra.run.dir={run_dir}"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, **ENV, "WANDB_MODE": "offline"},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    metrics = run_dir / "metrics.jsonl"
    deadline = time.time() + 300
    while time.time() < deadline and not (metrics.exists() and metrics.read_text().count("\n") >= 2):
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=300)
    assert out.count("SIGTERM received") == 1, out[-3000:]
    assert out.count("Resume with:") == 1, out[-3000:]
    command = out.split("Resume with:")[1].strip().splitlines()[0]
    assert command == f"torchrun --nproc_per_node=2 -m llm.train hydra.run.dir={run_dir} train.resume=auto"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["world_size"] == 2
    state = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=False)
    assert state["step"] == summary["step"] >= 2
    # each rank its own dropout stream (seeded alike, every rank masked its rows the same way), each saved
    ranks = state["rng_ranks"]
    assert len(ranks) == 2 and not torch.equal(ranks[0]["torch"], ranks[1]["torch"])
    assert torch.equal(ranks[0]["torch"], state["rng"]["torch"])
    assert [m["step"] for m in read_metrics(run_dir) if m["kind"] == "train"] == list(range(1, summary["step"] + 1))
    assert not _processes_naming(f"hydra.run.dir={run_dir}"), "a torchrun worker outlived torchrun"


def test_a_refusal_under_torchrun_is_one_line_from_rank_0(tmp_path):
    """Every rank refuses the same config: one line is printed (then torchrun's own report of the failed processes),
    and rank 0 is not cut short by torchrun before it removed the run dir it made."""
    run_dir = tmp_path / "run"
    done = run_cli(["device=cpu", "train.batch_size=5", f"hydra.run.dir={run_dir}"], module=TORCHRUN[2:], extra_env=ENV,
                   timeout=300)
    errors = [ln for ln in done.stderr.splitlines() if ln.startswith("Error:")]
    assert errors == ["Error: train.batch_size=5 (global) must be divisible by the 2 processes of torchrun"], \
        done.stderr[-3000:]
    assert done.returncode != 0
    assert not run_dir.exists()


def test_more_processes_on_a_node_than_gpus_is_one_line_before_any_work(tmp_path, monkeypatch, capsys):
    """torchrun --nproc_per_node=2 on a node of one GPU: refused before a GPU is selected, and the run dir the command
    made goes (rank 1 failed with CUDA's "invalid device ordinal" traceback while rank 0 waited for it in the
    process group). Rank 0 here, through the entry point (Hydra's logging left out, as it would outlive the test);
    the other ranks' own check below."""
    for name, value in {"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    selected = []
    monkeypatch.setattr(torch.cuda, "set_device", selected.append)
    run_dir = tmp_path / "day" / "run"
    args = [*SMALL, f"hydra.run.dir={run_dir}", "hydra/job_logging=none", "hydra/hydra_logging=none"]
    code, err = run_module_main(monkeypatch, capsys, "llm.train", args)
    assert code == 2 and len(err) == 1, err
    assert err[0] == ("Error: device: torchrun started 2 processes on this node, a GPU each, and it has 1 GPU: run "
                      "torchrun --nproc_per_node=1 or fewer, or device=cpu (processes on the CPU, gloo)"), err
    assert selected == [] and not (tmp_path / "day").exists()


@pytest.mark.parametrize("local_rank,per_node,gpus", [(1, "2", 1), (3, "4", 2), (1, "", 1)])
def test_every_rank_of_a_node_refuses_more_processes_than_gpus(monkeypatch, local_rank, per_node, gpus):
    """Each rank checks the node's process count (or, without LOCAL_WORLD_SIZE, its own local rank), so all refuse
    alike and none selects a GPU; as many processes as GPUs select theirs."""
    from llm.errors import ConfigError
    from llm.training.distributed import init_distributed

    env = {"WORLD_SIZE": "4", "RANK": str(local_rank), "LOCAL_RANK": str(local_rank), "LOCAL_WORLD_SIZE": per_node}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    if not per_node:
        monkeypatch.delenv("LOCAL_WORLD_SIZE")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    selected = []
    monkeypatch.setattr(torch.cuda, "set_device", selected.append)
    with pytest.raises(ConfigError, match=f"and it has {gpus} GPUs?: run torchrun --nproc_per_node={gpus} or fewer"):
        init_distributed(torch.device("cuda"))
    assert selected == []
    monkeypatch.setattr(torch.cuda, "device_count", lambda: local_rank + 1 if not per_node else int(per_node))
    monkeypatch.setattr("torch.distributed.is_initialized", lambda: True)  # the process group: not this test's
    assert init_distributed(torch.device("cuda")).local_rank == local_rank and selected == [local_rank]


def test_multirun_under_torchrun_is_refused_in_one_line(tmp_path, monkeypatch, capsys):
    """Each torchrun process would run the whole sweep (rank 0 refused by its own rank 1's lock on the sweep dir,
    after the dirs are made): refused before Hydra starts, saying what to run instead."""
    for name, value in {"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2"}.items():
        monkeypatch.setenv(name, value)
    sweep = tmp_path / "sweep"
    args = ["-m", *SMALL, "seed=0,1", f"hydra.sweep.dir={sweep}"]
    code, err = run_module_main(monkeypatch, capsys, "llm.train", args)
    assert code == 2
    assert len(err) == 1 and err[0].startswith("Error: -m (--multirun) does not run under torchrun"), err
    assert not sweep.exists()


def test_a_rank_other_than_0_leaves_the_refusal_to_rank_0(monkeypatch, capsys):
    """Rank 1 waits for torchrun to end it once rank 0 has refused; a refusal of its own alone, it names the rank."""
    for name, value in {"WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}.items():
        monkeypatch.setenv(name, value)
    waits = []
    monkeypatch.setattr(entry.time, "sleep", waits.append)
    code, err = run_module_main(monkeypatch, capsys, "llm.train", ["model=nope"])
    assert code == 2 and waits == [entry.RANK0_GRACE_S]
    assert len(err) == 1 and err[0].startswith("Error: rank 1: model=nope is not an option of model"), err


def test_the_resume_command_keeps_the_processes_and_nodes(monkeypatch, tmp_path):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert resume_command(tmp_path) == f"python -m llm.train hydra.run.dir={tmp_path} train.resume=auto"
    monkeypatch.setenv("WORLD_SIZE", "8")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    assert resume_command(tmp_path).startswith("torchrun --nnodes=2 --nproc_per_node=4 -m llm.train hydra.run.dir=")


def test_a_resume_restores_each_rank_s_own_stream_or_starts_one_for_a_rank_it_has_none_of():
    """On as many processes each rank takes its own saved RNG state (the run goes on bitwise); on another count, or
    from a one-process checkpoint, rank 0 takes the run's and the other ranks start streams of their own."""
    from llm.training.checkpoint import rank_rng_state
    from llm.training.runtime import rank_seed

    state = {"rng": "rank 0's", "rng_ranks": ["rank 0's", "rank 1's"]}
    assert [rank_rng_state(state, r, 2) for r in (0, 1)] == ["rank 0's", "rank 1's"]
    assert [rank_rng_state(state, r, 4) for r in (0, 3)] == ["rank 0's", None]
    assert rank_rng_state({"rng": "one process"}, 1, 2) is None
    seeds = {rank_seed(0, rank, step) for rank in (1, 2) for step in (0, 100)} | {rank_seed(1, 1, 0)}
    assert len(seeds) == 5 and all(0 <= s < 2**63 for s in seeds)
