"""Checkpoints that survive interruption, and resume that survives a damaged checkpoint.

A checkpoint holds everything a bit-exact resume needs: model, every optimizer, the step (the data
stream is a function of the step), the Python/NumPy/torch RNG states, the run's config and its
running totals (training time, timed tokens, skipped steps), so a resumed run's speed numbers cover
the whole run. Files are written through :mod:`llm.fileio` (whole or absent; a full disk is named).
"""

from __future__ import annotations

import errno
import logging
import os
import random
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from llm.errors import CheckpointNotFoundError, ConfigError, ResumeError, in_chain, one_line
from llm.fileio import atomic_open, remove_stale_temps

log = logging.getLogger(__name__)

#: ``train.resume`` values that ask for a new run.
NO_RESUME = (None, "", "none", "null")

LAST = "last.pt"


@dataclass
class TrainTotals:
    """What a run has accumulated so far; carried across resumes so the summary covers every segment."""

    train_time_s: float = 0.0
    timed_tokens: int = 0
    skipped_steps: int = 0
    wall_time_s: float = 0.0
    compile_warmup_s: float = 0.0

    @classmethod
    def from_state(cls, state: dict | None) -> TrainTotals:
        known = cls.__dataclass_fields__
        return cls(**{k: v for k, v in (state or {}).items() if k in known})


def rng_state() -> dict[str, Any]:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def rank_rng_state(state: dict[str, Any], rank: int, world_size: int) -> dict[str, Any] | None:
    """The RNG state a checkpoint saved for this rank: its own where it holds one per rank of as many processes
    (``rng_ranks``), rank 0's (``rng``) for rank 0; None for another rank of another process count (or of a
    checkpoint saved by one process), whose stream then starts again (:func:`llm.training.runtime.rank_seed`)."""
    ranks = state.get("rng_ranks")
    if ranks is not None and len(ranks) == world_size:
        return ranks[rank]
    return state["rng"] if rank == 0 else None


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def step_file(ckpt_dir: Path, step: int) -> Path:
    return ckpt_dir / f"step_{step:07d}.pt"


def save_checkpoint(ckpt_dir: Path, step: int, model: torch.nn.Module, optimizers: list, totals: TrainTotals,
                    extra: dict, keep: int = 2) -> Path:
    """Write ``step_XXXXXXX.pt`` atomically, point ``last.pt`` at it, and keep only the newest ``keep``."""
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    state = {"step": step, "model": model.state_dict(), "optimizers": [opt.state_dict() for opt in optimizers],
             "rng": rng_state(), "totals": asdict(totals), **extra}
    path = step_file(ckpt_dir, step)
    # Through a file object this function closes, not a path: torch's zip writer keeps a path's descriptor open
    # while its exception lives, so on a full disk the removed temporary's blocks stayed allocated and the run's
    # summary.json could not be written after it (seen on a 6 MiB tmpfs, torch 2.11).
    # A second Ctrl-C lands in the Python write torch's zip writer calls back: the writer then fails on its own
    # ("unexpected pos", a RuntimeError chained to the KeyboardInterrupt); it is the abort that was asked for.
    try:
        with atomic_open(path, "wb") as f:
            torch.save(state, f)
    except Exception as e:
        if in_chain(e, KeyboardInterrupt) is not None:
            raise KeyboardInterrupt from None
        raise
    link_tmp = ckpt_dir / (LAST + ".tmp")
    link_tmp.unlink(missing_ok=True)
    link_tmp.symlink_to(path.name)
    link_tmp.replace(ckpt_dir / LAST)
    # the file just written stays whatever else is there: a step file newer than it (left by the steps after the
    # checkpoint a resume went back to) would otherwise count among the newest and last.pt would point at nothing
    others = sorted((p for p in ckpt_dir.glob("step_*.pt") if p != path), key=checkpoint_step)
    for old in others[:max(0, len(others) - (keep - 1))] if keep > 0 else []:
        old.unlink()
    return path


def clean_checkpoint_dir(ckpt_dir: Path) -> None:
    """Remove temporaries a killed save left behind (call while owning the run dir)."""
    for p in remove_stale_temps(ckpt_dir):
        log.warning(f"removed {p}, left by an interrupted checkpoint save")


class DamagedCheckpoint(ResumeError):
    """A checkpoint file that does not load as one: cut short, overwritten, or another kind of file."""


#: What a resume reads from a checkpoint; every checkpoint a run saves holds them. ``config`` among them: the resume
#: continues the saved run's config, and one without it would go on with whatever the command composed.
RESUME_KEYS = ("step", "model", "optimizers", "rng", "config")


def _first_line(e: BaseException) -> str:
    """The first sentence of an error's first line: torch's zip reader adds a paragraph of advice to its own."""
    return one_line(e).split(". ")[0].rstrip(".") or type(e).__name__


def _whole_zip(path: Path) -> bool:
    """Whether ``path`` ends as a zip archive does (torch saves checkpoints as one): a file cut short does not."""
    try:
        return zipfile.is_zipfile(path)
    except OSError:
        return True  # unreadable: not evidence of damage


def load_checkpoint(path: Path, map_location: str | torch.device = "cpu",
                    needs: tuple[str, ...] = ()) -> dict[str, Any]:
    """Load one checkpoint: a file that does not load as one holding ``needs`` raises :class:`DamagedCheckpoint`
    naming it, a file the system will not let this process read a plain :class:`ResumeError`."""
    try:
        state = torch.load(path, map_location=map_location, weights_only=False)
    except OSError as e:
        # torch's zip reader on a file cut short raises EINVAL; only a file that is no whole zip archive is damage
        if e.errno == errno.EINVAL and not _whole_zip(path):
            raise DamagedCheckpoint(f"checkpoint {path} is damaged ({_first_line(e)})") from None
        # not damage: the file may be whole, and falling back past it would train its steps again and replace it
        raise ResumeError(f"checkpoint {path} cannot be read ({e.strerror or _first_line(e)}): make it readable "
                          "and run the command again") from None
    except Exception as e:  # torch's zip reader, pickle: any other failure to read means damaged
        raise DamagedCheckpoint(f"checkpoint {path} is damaged ({_first_line(e)})") from None
    # a torch file of another kind (a tensor, a bare state dict) loads too, and would fail later with a traceback
    missing = [k for k in needs if k not in state] if isinstance(state, dict) else None
    if missing is None or missing:
        held = f"a {type(state).__name__}" if missing is None else f"no {', '.join(missing)}"
        raise DamagedCheckpoint(f"checkpoint {path} is not a checkpoint of a run (it holds {held})")
    return state


def checkpoint_files(ckpt_dir: Path) -> list[Path]:
    """``last.pt``'s target first, then every ``step_*.pt`` newest first, without repeats (none loaded)."""
    out: list[Path] = []
    last = ckpt_dir / LAST
    if last.exists():
        out.append(last.resolve())
    out += [p for p in sorted(ckpt_dir.glob("step_*.pt"), key=checkpoint_step, reverse=True) if p.resolve() not in out]
    return out


def checkpoint_step(path: Path) -> int:
    """The step of a ``step_N.pt`` file, to order them by (by name, step 10,000,000 would sort before 9,999,999);
    -1 for a name that holds no number."""
    digits = path.stem.removeprefix("step_")
    return int(digits) if digits.isdigit() else -1


def dangling_last(ckpt_dir: Path) -> str | None:
    """What ``last.pt`` points to when that file is gone (removed by hand), else None."""
    last = ckpt_dir / LAST
    return os.readlink(last) if last.is_symlink() and not last.exists() else None


def load_newest_checkpoint(ckpt_dir: Path, map_location: str | torch.device = "cpu",
                           needs: tuple[str, ...] = ()) -> tuple[Path, dict] | None:
    """The newest checkpoint in ``ckpt_dir`` that loads, saying which damaged ones it skipped; None when
    the dir holds none. Raises :class:`ResumeError` when every one is damaged, or one cannot be read.

    Shared by resume and generation: both want the latest weights and neither may stop at a damaged file.
    Why fall back rather than refuse: a damaged newest file is what a crash or a full disk leaves of a save, the
    older checkpoint is whole, and a resume from it trains only the steps since again (``metrics.jsonl`` is cut
    back to its step), so the user loses a few steps and not the run; each skipped file is named in a warning.
    """
    damaged = []
    if (gone := dangling_last(ckpt_dir)) is not None:
        log.warning(f"{ckpt_dir / LAST} points to {gone}, which is missing; trying an older checkpoint")
    for path in checkpoint_files(ckpt_dir):
        try:
            state = load_checkpoint(path, map_location, needs)
        except DamagedCheckpoint as e:
            damaged.append(path.name)
            log.warning(f"{e}; trying an older checkpoint")
            continue
        if damaged or gone is not None:
            log.warning(f"using {path}, the newest checkpoint that loads")
        return path, state
    if damaged:
        raise DamagedCheckpoint(f"every checkpoint in {ckpt_dir} is damaged ({', '.join(damaged)})")
    return None


def find_resume_checkpoint(resume: str | None, ckpt_dir: Path,
                           map_location: str | torch.device = "cpu") -> tuple[Path, dict] | None:
    """The checkpoint ``train.resume`` asks for, loaded: ``None`` for no resume.

    ``auto`` takes the newest checkpoint in ``ckpt_dir`` that loads, saying which damaged ones it
    skipped; with none there it raises (a silent restart at step 0 would log steps twice). A path
    must exist and load.
    """
    if resume in NO_RESUME:
        return None
    # a YAML true, false or number would reach Path() as a non-string and fail there with a traceback
    if not isinstance(resume, str):
        raise ConfigError(f"train.resume={str(resume).lower()} must be null (a new run), auto (the run dir's newest "
                          "checkpoint that loads) or a path to a checkpoint .pt file")
    if resume != "auto":
        path = Path(resume)
        if not path.is_file():
            raise CheckpointNotFoundError(f"train.resume={resume} is not a checkpoint file "
                                          "(expected 'auto' or a path to a .pt)")
        try:
            return path, load_checkpoint(path, map_location, RESUME_KEYS)
        except DamagedCheckpoint as e:
            raise ResumeError(f"train.resume={resume}: {e}; give another checkpoint of the run, or train.resume=auto "
                              "for the newest that loads") from None
    run_dir = ckpt_dir.parent
    try:
        found = load_newest_checkpoint(ckpt_dir, map_location, RESUME_KEYS)
    except DamagedCheckpoint as e:
        raise ResumeError(f"train.resume=auto: {e}; start the run again in another hydra.run.dir, or remove "
                          f"{run_dir} and start it again there") from None
    except ResumeError as e:
        raise ResumeError(f"train.resume=auto: {e}") from None
    if found is None and (gone := dangling_last(ckpt_dir)) is not None:
        raise ResumeError(f"train.resume=auto: {ckpt_dir / LAST} points to {gone}, which is missing, and "
                          f"{ckpt_dir} holds no other checkpoint; put the file back, or start the run again in another "
                          "hydra.run.dir")
    if found is None:
        metrics = run_dir / "metrics.jsonl"
        if not (metrics.is_file() and metrics.stat().st_size):  # nothing ever trained there
            raise ResumeError(f"train.resume=auto: there is no run in {run_dir} to resume (no step logged, no "
                              "checkpoint); give the run's own dir, hydra.run.dir=<outputs/runs/...>, as its resume "
                              "line printed it")
        raise ResumeError(f"train.resume=auto: no checkpoint in {ckpt_dir} to resume from (the run stopped before "
                          "its first checkpoint; train.ckpt_every=N saves one every N steps); start a new run "
                          f"in another hydra.run.dir, or remove {run_dir} and start it again there (for a sweep's "
                          "job: remove it and continue the sweep)")
    return found
