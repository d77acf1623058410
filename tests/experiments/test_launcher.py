"""``hydra/launcher=gpus``: ``sweep.jobs_per_gpu`` jobs at once on each visible device, spread over the GPUs."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from helpers import CONF, FakeGpus, run_cli
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from omegaconf.errors import InterpolationResolutionError

import llm.train  # noqa: F401  (registers the launcher's resolvers)


def _launcher(overrides: list[str]):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("config", overrides=["hydra/launcher=gpus", *overrides], return_hydra_config=True)


def test_jobs_per_gpu_multiplies_the_visible_gpus(monkeypatch):
    FakeGpus(monkeypatch, count=4)
    assert _launcher([]).hydra.launcher.n_jobs == 4  # one per GPU by default
    cfg = _launcher(["++sweep.jobs_per_gpu=2"])
    assert "Joblib" in cfg.hydra.launcher._target_ and cfg.hydra.launcher.n_jobs == 8
    with pytest.raises(InterpolationResolutionError, match="sweep.jobs_per_gpu=0 must be a positive integer"):
        _ = _launcher(["++sweep.jobs_per_gpu=0"]).hydra.launcher.n_jobs


def test_two_jobs_per_gpu_spread_over_the_gpus(monkeypatch):
    """With 2 GPUs and 2 jobs per GPU, the launcher runs 4 at once; job n takes cuda:(n mod 2), so any 4
    consecutive jobs (what runs together) put two on each GPU."""
    from llm.train import _pin_parallel_job

    FakeGpus(monkeypatch, count=2)
    cfg = _launcher(["++sweep.jobs_per_gpu=2"])
    n_jobs = cfg.hydra.launcher.n_jobs
    assert n_jobs == 4
    devices = []
    for num in range(8):
        job = OmegaConf.create({"device": "auto"})
        _pin_parallel_job(job, OmegaConf.create({"launcher": {"_target_": cfg.hydra.launcher._target_},
                                                 "job": {"num": num}}))
        devices.append(job.device)
    for first in range(0, 8 - n_jobs + 1):
        assert Counter(devices[first:first + n_jobs]) == {"cuda:0": 2, "cuda:1": 2}


def test_two_jobs_at_once_on_one_device_through_the_launcher(tmp_path):
    """On a machine without a GPU the CPU is the one device: sweep.jobs_per_gpu=2 runs three jobs two at a time
    (the third starts when one ends), each in its own process."""
    sweep = tmp_path / "sweep"
    proc = run_cli(["-m", "hydra/launcher=gpus", "++sweep.jobs_per_gpu=2", "seed=0,1,2", "train.max_steps=2",
                    "train.eval_every=2", f"hydra.sweep.dir={sweep}"], timeout=600, extra_env={"OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = [json.loads(p.read_text()) for p in sorted(sweep.glob("*/summary.json"))]
    assert len(runs) == 3 and all(r["status"] == "completed" for r in runs)
    spans = [(r["started_at"], r["ended_at"]) for r in runs]
    at_once = [sum(s <= t < e for s, e in spans) for t, _ in spans]
    assert max(at_once) == 2, spans  # two ran together, never three
