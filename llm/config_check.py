"""Refuse a bad configuration before any work, with one line naming the key and what is allowed."""

from __future__ import annotations

from omegaconf import DictConfig

import rope
from llm.data import check_data_config
from llm.optim import OPTIMIZERS

#: train.attention values: "auto" lets PyTorch pick the scaled-dot-product-attention kernel.
ATTENTION_BACKENDS = ("auto", "flash", "efficient", "cudnn", "math")


class ConfigError(ValueError):
    """A configuration value that cannot work; the message names the key."""


def validate_config(cfg: DictConfig, world_size: int = 1) -> None:
    m, r, t = cfg.model, cfg.rope, cfg.train
    if r.name not in rope.available():
        raise ConfigError(f"rope.name={r.name!r} is not registered; allowed: {', '.join(rope.available())}")
    variant = r.get("variant", "partial")
    if variant not in ("partial", "full"):
        raise ConfigError(f"rope.variant={variant!r}; allowed: partial, full")
    if m.n_head <= 0 or m.n_embd % m.n_head:
        raise ConfigError(f"model.n_embd={m.n_embd} must be divisible by model.n_head={m.n_head}")
    head_dim = m.n_embd // m.n_head
    if head_dim % 2:
        raise ConfigError(f"head_dim = model.n_embd/model.n_head = {head_dim} must be even for RoPE")
    if variant == "partial" and head_dim % 4:
        raise ConfigError(f"head_dim = model.n_embd/model.n_head = {head_dim} must be a multiple of 4 for "
                          "rope.variant=partial (or use rope.variant=full)")
    max_seq = r.get("max_seq_len")
    if max_seq is not None and m.seq_len > max_seq:
        raise ConfigError(f"model.seq_len={m.seq_len} exceeds the RoPE cache rope.max_seq_len={max_seq}")
    if cfg.optim.name not in OPTIMIZERS:
        raise ConfigError(f"optim.name={cfg.optim.name!r}; allowed: {', '.join(OPTIMIZERS)}")
    for key in ("max_steps", "batch_size", "grad_accum", "eval_every", "eval_batches", "log_every"):
        if t[key] <= 0:
            raise ConfigError(f"train.{key}={t[key]} must be a positive integer")
    if t.batch_size % world_size:
        raise ConfigError(f"train.batch_size={t.batch_size} (global) must be divisible by the {world_size} "
                          "processes of torchrun")
    if t.dtype not in ("auto", "float32", "bfloat16"):
        raise ConfigError(f"train.dtype={t.dtype!r}; allowed: auto, float32, bfloat16")
    if t.get("attention", "auto") not in ATTENTION_BACKENDS:
        raise ConfigError(f"train.attention={t.attention!r}; allowed: {', '.join(ATTENTION_BACKENDS)}")
    if cfg.device not in ("auto", "cpu") and not str(cfg.device).startswith("cuda"):
        raise ConfigError(f"device={cfg.device!r}; allowed: auto, cpu, cuda, cuda:N")
    if not 0 <= t.warmup_frac < 1:
        raise ConfigError(f"train.warmup_frac={t.warmup_frac} must be in [0, 1)")
    if t.get("skip_nonfinite", 0) < 0:
        raise ConfigError(f"train.skip_nonfinite={t.skip_nonfinite} must be >= 0")
    check_data_config(cfg.data, cfg.tokenizer.name)
