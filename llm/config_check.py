"""Refuse a bad configuration before any work, with one line naming the key and what is allowed.

This module only orchestrates: each config group is validated by the module that builds it
(``llm.model`` the model, ``rope`` the RoPE, ``llm.data`` data and tokenizer, ``llm.optim`` the
optimizers, the trainer its ``train`` group); here their errors become :class:`ConfigError`, and the
checks that need two groups at once (the RoPE cache against the sequence length, the memory a step
needs against the device, the RoPE implementation against the device) are made. :func:`check_config_keys`
refuses a key no module would read (``+train.max_step=5``), against the keys the config files define.
"""

from __future__ import annotations

import os

import torch
from omegaconf import DictConfig, OmegaConf

import rope
from llm.config_schema import schema
from llm.data import check_data_config
from llm.errors import ConfigError
from llm.model import check_model_config, rope_cache_len
from llm.optim import check_optim_config
from llm.training.runtime import resolve_device
from llm.training.trainer import check_train_config

__all__ = ["ConfigError", "check_config_keys", "inert_rope_note", "validate_config"]

#: rope.check_args's argument names, as the config keys a user sets.
_ROPE_KEYS = {"head_dim": "model.n_embd/model.n_head", "max_seq_len": "rope.max_seq_len"}


def _as_config_error(group_check, *args):
    """Run one group's own check; its ValueError/TypeError becomes a ConfigError (same one-line message)."""
    try:
        return group_check(*args)
    except ConfigError:
        raise
    except (ValueError, TypeError) as e:
        raise ConfigError(str(e)) from None


def _check_rope(cfg: DictConfig, head_dim: int, device: torch.device) -> None:
    r = cfg.rope
    if r.name not in rope.available():
        raise ConfigError(f"rope.name={r.name!r} is not registered; allowed: {', '.join(rope.available())}")
    cache = rope_cache_len(cfg.model, r)
    if cache < cfg.model.seq_len:
        raise ConfigError(f"model.seq_len={cfg.model.seq_len} exceeds the RoPE cache rope.max_seq_len={cache}")
    options = {k: v for k, v in r.items() if k not in ("name", "base", "max_seq_len")}
    try:
        rope.check_args(r.name, head_dim, cache, r.get("base", 10000.0), **options)
    except rope.RopeArgumentError as e:
        key = _ROPE_KEYS.get(e.argument, f"rope.{e.argument}")
        value = {"head_dim": head_dim, "max_seq_len": cache}.get(e.argument, OmegaConf.select(r, e.argument))
        raise ConfigError(f"{key}={value}: {e}") from None
    reason = rope.get(r.name).unavailable_reason(device)
    if reason:
        raise ConfigError(reason)


def inert_rope_note(cfg: DictConfig) -> str | None:
    """A one-line note for a ``rope=none`` run given rotation settings (``rope.variant=full``): it rotates nothing,
    so they change nothing. A note, not a refusal: a sweep's settings apply to its ``rope=none`` control too
    (``+experiment=length_finetune`` fine-tunes every rope with YaRN)."""
    r = cfg.get("rope") or {}
    if r.get("name") != "none":
        return None
    defaults = {**rope.get("none").option_defaults(), "base": 10000.0}  # rope.build's own defaults
    inert = [f"rope.{k}={r[k]}" for k in ("variant", "base", "layout", "rotary_dim")
             if r.get(k, defaults[k]) != defaults[k]]
    scaling = (r.get("scaling") or {}).get("type")
    if scaling not in (None, "none"):
        inert.append(f"rope.scaling.type={scaling}")
    if not inert:
        return None
    return f"rope=none rotates nothing: {', '.join(inert)} change{'s' if len(inert) == 1 else ''} nothing in this run"


def _check_fused_loss(cfg: DictConfig, device: torch.device) -> None:
    """Liger's fused loss is Liger's Triton kernels: where ``rope=liger`` runs (CUDA, or the CPU's interpreter)."""
    if cfg.train.get("fused_linear_ce") and rope.get("liger").unavailable_reason(device) is not None:
        raise ConfigError(f"train.fused_linear_ce=true runs Liger-Kernel's Triton kernels: on a CUDA GPU, or on the "
                          f"CPU with TRITON_INTERPRET=1 set (slow); not on {device}")


def _check_cache_dir(cfg: DictConfig) -> None:
    """The tokenized-data cache must be a directory this process can create and write (it is built there)."""
    path = os.path.expanduser(str(cfg.get("cache_dir") or "~/.cache/ropelab"))
    try:
        os.makedirs(path, exist_ok=True)
        writable = os.access(path, os.W_OK | os.X_OK)
    except OSError as e:
        raise ConfigError(f"cache_dir={path}: cannot create it ({e.strerror}); set cache_dir= or $ROPELAB_CACHE to "
                          "a writable directory") from None
    if not writable:
        raise ConfigError(f"cache_dir={path} is not writable; set cache_dir= or $ROPELAB_CACHE to a writable directory")


#: wandb's run modes a config may name (``logger.wandb.mode``).
WANDB_MODES = ("online", "offline", "disabled")


def _check_logger(cfg: DictConfig) -> None:
    mode = ((cfg.get("logger") or {}).get("wandb") or {}).get("mode", "offline")
    if mode not in WANDB_MODES:
        raise ConfigError(f"logger.wandb.mode={mode!r}; allowed: {', '.join(WANDB_MODES)}")


def device_memory_bytes(device: torch.device) -> int:
    """The memory a run on ``device`` can use at most: the GPU's, or the machine's RAM on the CPU."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _check_memory(cfg: DictConfig, model_cfg, device: torch.device, world_size: int) -> None:
    """Refuse a step that cannot fit the device (e.g. model.seq_len=100000 would run, then fail to allocate)."""
    dense = device.type == "cpu" or cfg.train.get("attention", "auto") == "math"
    per_rank = cfg.train.batch_size // world_size
    need, have = model_cfg.training_memory_bytes(per_rank, dense), device_memory_bytes(device)
    if need > have:
        raise ConfigError(f"model.seq_len={cfg.model.seq_len} with train.batch_size={cfg.train.batch_size} needs at "
                          f"least {need / 2**30:.1f} GiB for one training step, more than the "
                          f"{have / 2**30:.1f} GiB of {device}; lower model.seq_len or train.batch_size")


def check_config_keys(cfg: DictConfig, config_name: str = "config", command: str = "python -m llm.train") -> None:
    """Refuse a key no config file defines (added with ``+``, nothing would read it) or one a run reads that was
    removed (``~``), naming it and the closest known key. Checks the command's composed config against the keys of
    its primary config (``config_name``: llm.train's, ``generate``, ``eval_lengths``): a resumed run's saved config
    may hold keys of an older version, which it keeps."""
    problems = schema(config_name, command).problems(cfg)
    if problems:
        raise ConfigError(problems[0])


def validate_config(cfg: DictConfig, world_size: int = 1) -> None:
    """Every check a run needs before its first piece of work (data, model, run dir contents)."""
    seed = cfg.get("seed")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**32:
        raise ConfigError(f"seed={seed!r} must be an integer in [0, 2**32 - 1] (what numpy and torch seed with)")
    device = resolve_device(str(cfg.get("device", "auto")))
    model_cfg = _as_config_error(check_model_config, cfg.model)
    _as_config_error(check_train_config, cfg.train, world_size, cfg.data)
    _check_fused_loss(cfg, device)
    _check_cache_dir(cfg)
    _check_logger(cfg)
    per_gpu = (cfg.get("sweep") or {}).get("jobs_per_gpu", 1)  # read by hydra/launcher=gpus; refused alike here
    if isinstance(per_gpu, bool) or not isinstance(per_gpu, int) or per_gpu < 1:
        raise ConfigError(f"sweep.jobs_per_gpu={per_gpu!r} must be a positive integer")
    _as_config_error(check_optim_config, cfg.optim)
    _check_rope(cfg, model_cfg.head_dim, device)
    _as_config_error(check_data_config, cfg.data, cfg.tokenizer.name)
    _check_memory(cfg, model_cfg, device, world_size)
