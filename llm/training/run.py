"""Start one run: claim the run dir, resume (or start from another run's weights), validate before any work,
then fit a :class:`Trainer`."""

from __future__ import annotations

import gc
import logging
from collections.abc import Sequence
from pathlib import Path

import torch
from omegaconf import DictConfig

from llm.config_check import validate_config
from llm.training.checkpoint import find_resume_checkpoint
from llm.training.distributed import cleanup, init_distributed
from llm.training.init_from import apply_init_from, check_init_from, default_original_length
from llm.training.outputs import SUMMARY_FILE
from llm.training.resume import reconcile_resume_config, resumed_group
from llm.training.run_dir import claim_run_dir, never_trained
from llm.training.trainer import Trainer, TrainOutcome

log = logging.getLogger("llm.train")


def _shared_run_dir(run_dir: Path, dist_info) -> Path:
    """Every rank works in rank 0's run dir (the checkpoints it resumes from live there)."""
    if not dist_info.enabled:
        return run_dir
    shared = [str(run_dir)]
    torch.distributed.broadcast_object_list(shared, src=0)
    return Path(shared[0])


def run_training(cfg: DictConfig, run_dir: Path, overrides: Sequence[str] = (), group: str = "single",
                 resume_hint: str = "", start_unstarted: bool = False) -> TrainOutcome:
    """Train ``cfg`` into ``run_dir``: lock the dir, load the checkpoint to resume (its saved config wins
    over the composed one, see :mod:`llm.training.resume`), or check ``train.init_from``'s source run
    (:mod:`llm.training.init_from`; ignored when resuming), validate before any work, then fit.

    ``start_unstarted`` (a sweep's job): ``train.resume=auto`` in a dir that never trained starts the run
    from step 0 instead of refusing, so that one command continues an interrupted sweep.

    User errors (:class:`llm.errors.UserError`) propagate before any data or model work is done.
    """
    wants_cuda = cfg.get("device", "auto") != "cpu" and torch.cuda.is_available()
    dist_info = init_distributed(torch.device("cuda" if wants_cuda else "cpu"))
    run_dir = _shared_run_dir(Path(run_dir), dist_info)
    lock = claim_run_dir(run_dir, resuming=bool(cfg.train.get("resume"))) if dist_info.is_main else None
    trainer = None
    try:
        asked = cfg.train.get("resume")
        if start_unstarted and asked == "auto" and never_trained(run_dir):
            log.info(f"{run_dir.name}: nothing to resume (never trained), starting it from step 0")
            if dist_info.is_main:
                (run_dir / SUMMARY_FILE).unlink(missing_ok=True)  # a failed start's record, replaced by this run's
            asked = None
        resume = find_resume_checkpoint(asked, run_dir / "checkpoints")
        if resume is not None and "config" in resume[1]:
            cfg = reconcile_resume_config(resume[1]["config"], cfg, overrides)
        if resume is not None:
            group = resumed_group(resume[1], group, overrides)
        source = check_init_from(cfg) if resume is None else None  # a resumed run holds its weights already
        note = default_original_length(cfg, source) if source is not None else None
        validate_config(cfg, world_size=dist_info.world_size)
        init = source.load() if source is not None else None  # a damaged checkpoint fails before any work
        trainer = Trainer(cfg, run_dir, dist_info, resume=resume, group=group, resume_hint=resume_hint)
        if init is not None:
            apply_init_from(trainer.model, *init)
            if dist_info.is_main:
                for line in (note, f"initialised the model from {init[0]} (step {init[1]}); optimizer and step "
                                   "start afresh"):
                    if line:
                        log.info(line)
        return trainer.fit()
    finally:
        if lock is not None:
            lock.release()
        # The DDP wrapper's reducer holds the process group: freed after destroy_process_group, gloo's
        # destructor can deadlock on its mutex (a torchrun rank hung at exit in CI), so it goes first.
        trainer = None
        gc.collect()  # reference cycles of the trainer too
        cleanup(dist_info)
