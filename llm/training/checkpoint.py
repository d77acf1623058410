"""Checkpoints that survive interruption: written to a temp file, then renamed into place.

A checkpoint holds everything a bit-exact resume needs: model, every optimizer, the step (the data
stream is a function of the step), and the Python/NumPy/torch RNG states.
"""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

LAST = "last.pt"


def rng_state() -> dict[str, Any]:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(ckpt_dir: Path, step: int, model: torch.nn.Module, optimizers: list, extra: dict,
                    keep: int = 2) -> Path:
    """Write ``step_XXXXXXX.pt`` atomically, point ``last.pt`` at it, and keep only the newest ``keep``."""
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    state = {
        "step": step,
        "model": model.state_dict(),
        "optimizers": [opt.state_dict() for opt in optimizers],
        "rng": rng_state(),
        **extra,
    }
    path = ckpt_dir / f"step_{step:07d}.pt"
    tmp = path.with_suffix(".pt.tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)
    link_tmp = ckpt_dir / (LAST + ".tmp")
    if link_tmp.is_symlink() or link_tmp.exists():
        link_tmp.unlink()
    link_tmp.symlink_to(path.name)
    os.replace(link_tmp, ckpt_dir / LAST)
    for old in sorted(ckpt_dir.glob("step_*.pt"))[:-keep] if keep > 0 else []:
        old.unlink()
    return path


def resolve_resume(resume: str | None, ckpt_dir: Path) -> Path | None:
    """``None`` -> no resume; ``auto`` -> the run dir's last checkpoint if any; else a path that must exist."""
    if resume in (None, "", "none", "null"):
        return None
    if resume == "auto":
        last = ckpt_dir / LAST
        return last.resolve() if last.exists() else None
    path = Path(resume)
    if not path.is_file():
        raise FileNotFoundError(f"train.resume={resume} is not a checkpoint file (expected 'auto' or a path to a .pt)")
    return path


def load_checkpoint(path: Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    return torch.load(path, map_location=map_location, weights_only=False)
