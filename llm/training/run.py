"""Start one run: claim the run dir, resume, validate before any work, then fit a :class:`Trainer`."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
from omegaconf import DictConfig

from llm.config_check import validate_config
from llm.training.checkpoint import find_resume_checkpoint
from llm.training.distributed import cleanup, init_distributed
from llm.training.resume import reconcile_resume_config
from llm.training.run_dir import claim_run_dir
from llm.training.trainer import Trainer, TrainOutcome


def _shared_run_dir(run_dir: Path, dist_info) -> Path:
    """Every rank works in rank 0's run dir (the checkpoints it resumes from live there)."""
    if not dist_info.enabled:
        return run_dir
    shared = [str(run_dir)]
    torch.distributed.broadcast_object_list(shared, src=0)
    return Path(shared[0])


def run_training(cfg: DictConfig, run_dir: Path, overrides: Sequence[str] = (), group: str = "single",
                 resume_hint: str = "") -> TrainOutcome:
    """Train ``cfg`` into ``run_dir``: lock the dir, load the checkpoint to resume (its saved config wins
    over the composed one, see :mod:`llm.training.resume`), validate before any work, then fit.

    User errors (:class:`llm.errors.UserError`) propagate before any data or model work is done.
    """
    wants_cuda = cfg.get("device", "auto") != "cpu" and torch.cuda.is_available()
    dist_info = init_distributed(torch.device("cuda" if wants_cuda else "cpu"))
    run_dir = _shared_run_dir(Path(run_dir), dist_info)
    lock = claim_run_dir(run_dir, resuming=bool(cfg.train.get("resume"))) if dist_info.is_main else None
    try:
        resume = find_resume_checkpoint(cfg.train.get("resume"), run_dir / "checkpoints")
        if resume is not None and "config" in resume[1]:
            cfg = reconcile_resume_config(resume[1]["config"], cfg, overrides)
        validate_config(cfg, world_size=dist_info.world_size)
        trainer = Trainer(cfg, run_dir, dist_info, resume=resume, group=group, resume_hint=resume_hint)
        return trainer.fit()
    finally:
        if lock is not None:
            lock.release()
        cleanup(dist_info)
