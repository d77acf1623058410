"""Configs as dotted keys: flatten a nested config and ask whether a key falls under a prefix; read a run dir's
saved config.

Why shared: resume (which keys a resume may change, which sibling job trained the same run) and the run report
(which keys two runs differ in) both compare configs key by key; one spelling of "key", and one reading of a run's
config, keep their answers consistent.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

#: A run dir's resolved config, and Hydra's record of it (the fallback).
RUN_CONFIG_FILES = ("config.yaml", ".hydra/config.yaml")
#: Keys that change when a run logs, saves, samples and counts its FLOPs, never what it trains: a resume may
#: change them, and two runs differing only in them are not mixed.
BOOKKEEPING_KEYS = ("train.log_every", "train.ckpt_every", "train.keep_checkpoints", "train.peak_tflops",
                    "train.sample_every", "train.sample_tokens", "train.sample_prompts")


def flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    """Nested mappings as ``{"a.b": value}``; an empty mapping stays a value, so its presence still compares."""
    if isinstance(d, Mapping):
        out: dict[str, Any] = {}
        for k, v in d.items():
            out.update(flatten(v, f"{prefix}{k}."))
        if not d and prefix:
            out[prefix[:-1]] = {}
        return out
    return {prefix[:-1]: d}


def as_written(value: Any) -> Any:
    """An OmegaConf node as plain values with its interpolations as written (``train.eval_every=${train.max_steps}``).

    Why: Hydra's record of a command's overrides (``hydra.overrides.task``) is text, but read through OmegaConf
    each ``${...}`` in it is resolved as an interpolation of the record's own config: ``${.max_steps}`` fails there
    and a typo raises before the command's own checks can name it."""
    from omegaconf import DictConfig, ListConfig, OmegaConf

    return OmegaConf.to_container(value, resolve=False) if isinstance(value, (DictConfig, ListConfig)) else value


def covered(key: str, prefixes: Iterable[str]) -> bool:
    """True when ``key`` is one of ``prefixes`` or lies below one (``train`` covers ``train.max_steps``)."""
    return any(key == p or key.startswith(p + ".") for p in prefixes)


def load_run_config(run_dir: Path, warn: bool = True) -> dict[str, Any]:
    """The config a run dir saved (``{}`` when it has none or it cannot be read: a crash can cut it short)."""
    from omegaconf import OmegaConf

    for candidate in (run_dir / name for name in RUN_CONFIG_FILES):
        if not candidate.is_file():
            continue
        try:
            cfg = OmegaConf.load(candidate)
        except Exception as e:  # a config cut short by a crash: the run is still listed, config unknown
            log.warning("%s: cannot read (%s); its config counts as missing", candidate, e)
            return {}
        try:
            out = OmegaConf.to_container(cfg, resolve=True)
        except Exception:  # e.g. ${hydra:...} interpolations outside a Hydra app: compare them verbatim
            out = OmegaConf.to_container(cfg, resolve=False)
        return out if isinstance(out, dict) else {}
    if warn:
        log.warning("%s: no config.yaml or .hydra/config.yaml; its config counts as missing", run_dir)
    return {}
