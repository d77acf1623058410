"""Optimizers and the learning-rate schedule.

``optim=adamw`` (default): one AdamW, no weight decay on norms/biases/embeddings.
``optim=muon``: ``torch.optim.Muon`` for the 2-D weight matrices inside the transformer blocks and
AdamW for everything else (embeddings, norms, the tied head), each with its own learning rate; ``weight_decay`` is
Muon's, ``adamw_weight_decay`` AdamW's, on its matrices (embeddings, an untied head) only, never on norms or biases.
Both are driven by the same warmup + cosine schedule (a multiplier on each group's base lr).

Every setting is read from the config as given, with no default here: ``conf/optim/<name>.yaml`` is the one place
the defaults live (the config check refuses a key removed from it), so a fallback in this module could never apply
and would only mislead a reader about what a run uses.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch
from torch import nn

OPTIMIZERS = ("adamw", "muon")
#: The learning-rate keys each optimizer reads.
LR_KEYS = {"adamw": ("lr",), "muon": ("muon_lr", "adamw_lr")}
#: Every key each optimizer reads (its file in conf/optim/ sets them all; tests/llm/test_optim_keys.py holds the two
#: in step).
KEYS = {"adamw": ("lr", "betas", "eps", "weight_decay"),
        "muon": ("muon_lr", "adamw_lr", "momentum", "nesterov", "ns_steps", "weight_decay", "adamw_weight_decay",
                 "betas", "eps")}


def _bad_number(value: object, low: float, high: float = math.inf, low_inclusive: bool = False) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return True
    return not (low <= value < high if low_inclusive else low < value < high)


#: The settings of torch.optim.Muon that :func:`build_optimizers` passes on from the config as they are.
MUON_SETTINGS = ("momentum", "nesterov", "ns_steps")
#: torch.optim.Muon's bound on ``ns_steps`` (exclusive), which it checks only when it steps.
MUON_MAX_NS_STEPS = 100


def check_optim_config(cfg: Mapping) -> None:
    """Validate an ``optim`` config group before any work: a NaN, negative or infinite rate fails here,
    named, instead of as a non-finite loss many steps later (or torch's traceback once the model is built).

    A key the optimizer reads but ``cfg`` lacks is refused too, naming it: the config check refuses one removed
    from a composed config, but a config that did not come through it (a resumed run's saved one, a caller's own
    dict) may lack one, and no default here stands in for the config file's."""
    name = cfg.get("name")
    if name not in OPTIMIZERS:
        raise ValueError(f"optim.name={name!r}; allowed: {', '.join(OPTIMIZERS)}")
    for key in KEYS[name]:
        if key not in cfg:
            raise ValueError(f"optim.{key} is missing: optim={name} reads it (conf/optim/{name}.yaml sets it)")
    for key in LR_KEYS[name]:
        if _bad_number(cfg[key], 0.0):
            raise ValueError(f"optim.{key}={cfg[key]!r} must be a finite number > 0")
    for key in (k for k in ("weight_decay", "adamw_weight_decay") if k in KEYS[name]):
        if _bad_number(cfg[key], 0.0, low_inclusive=True):
            raise ValueError(f"optim.{key}={cfg[key]!r} must be a finite number >= 0")
    betas = cfg["betas"]
    # the length is asked of a list only: a bare number (optim.betas=0.9) has none, and its error named no key
    if isinstance(betas, str) or not isinstance(betas, Sequence) or len(betas) != 2 or any(
            _bad_number(b, 0.0, 1.0, low_inclusive=True) for b in betas):
        shown = list(betas) if isinstance(betas, Sequence) and not isinstance(betas, str) else betas
        raise ValueError(f"optim.betas={shown!r} must be a list of two numbers in [0, 1), e.g. optim.betas=[0.9,0.95]")
    if _bad_number(cfg["eps"], 0.0):
        raise ValueError(f"optim.eps={cfg['eps']!r} must be a finite number > 0")
    if name == "muon":
        _check_muon(cfg)


def _check_muon(cfg: Mapping) -> None:
    """torch.optim.Muon checks only momentum >= 0, after the model is built: momentum 1 or more never forgets
    (and diverges), ns_steps 0 skips the orthogonalization that makes it Muon (and 100 or more fails in its first
    step, a traceback after the model and data were built), and any nesterov value counts as true or false."""
    momentum = cfg["momentum"]
    if _bad_number(momentum, 0.0, 1.0, low_inclusive=True):
        raise ValueError(f"optim.momentum={momentum!r} must be a number in [0, 1)")
    steps = cfg["ns_steps"]
    # torch.optim.Muon refuses 100 or more only inside its first step, after the data and model work
    if isinstance(steps, bool) or not isinstance(steps, int) or not 1 <= steps < MUON_MAX_NS_STEPS:
        raise ValueError(f"optim.ns_steps={steps!r} must be an integer >= 1 (Newton-Schulz iterations) and "
                         f"< {MUON_MAX_NS_STEPS} (torch.optim.Muon's limit)")
    nesterov = cfg["nesterov"]
    if not isinstance(nesterov, bool):
        raise ValueError(f"optim.nesterov={nesterov!r} must be true or false")


def lr_multiplier(step: int, max_steps: int, warmup_steps: int, min_lr_frac: float) -> float:
    """Linear warmup to 1, then cosine decay to ``min_lr_frac`` at ``max_steps``."""
    if warmup_steps > 0 and step < warmup_steps:
        return (step + 1) / warmup_steps
    decay_steps = max(1, max_steps - warmup_steps)
    progress = min(1.0, (step - warmup_steps) / decay_steps)
    return min_lr_frac + (1.0 - min_lr_frac) * 0.5 * (1.0 + math.cos(math.pi * progress))


def _adamw(groups: list[dict], cfg: Mapping, lr: float, device: torch.device) -> torch.optim.AdamW:
    return torch.optim.AdamW(groups, lr=lr, betas=tuple(cfg["betas"]), eps=cfg["eps"], fused=device.type == "cuda")


def build_optimizers(model: nn.Module, cfg: Mapping, device: torch.device) -> list[torch.optim.Optimizer]:
    """The optimizers for ``model`` described by an ``optim`` config group, which holds every key of its file in
    ``conf/optim/`` (checked first, :func:`check_optim_config`: the file is where the defaults are)."""
    check_optim_config(cfg)
    name = cfg["name"]
    wd = cfg["weight_decay"]
    params = {n: p for n, p in model.named_parameters() if p.requires_grad}
    if name == "adamw":
        decay = [p for n, p in params.items() if p.dim() >= 2 and "embed" not in n]
        no_decay = [p for n, p in params.items() if not (p.dim() >= 2 and "embed" not in n)]
        groups = [{"params": decay, "weight_decay": wd}, {"params": no_decay, "weight_decay": 0.0}]
        return [_adamw(groups, cfg, cfg["lr"], device)]
    # Muon: 2-D matrices of the blocks; AdamW: embeddings (tied head), norms, biases
    muon = [p for n, p in params.items() if n.startswith("blocks.") and p.dim() == 2]
    muon_ids = {id(p) for p in muon}
    rest = [p for p in params.values() if id(p) not in muon_ids]
    opt_muon = torch.optim.Muon(muon, lr=cfg["muon_lr"], weight_decay=wd,
                                **{k: cfg[k] for k in MUON_SETTINGS})
    adamw_wd = cfg["adamw_weight_decay"]
    groups = [{"params": rest, "weight_decay": adamw_wd}]
    # norm gains and biases (1-D) are never decayed, as under optim=adamw: decay would pull the gains towards 0;
    # without decay the one group stays, so such a run and its checkpoints' optimizer state are as they were
    if adamw_wd:
        groups = [g for g in ({"params": [p for p in rest if p.dim() >= 2], "weight_decay": adamw_wd},
                              {"params": [p for p in rest if p.dim() < 2], "weight_decay": 0.0}) if g["params"]]
    opt_adamw = _adamw(groups, cfg, cfg["adamw_lr"], device)
    return [opt_muon, opt_adamw]


def set_lr(optimizers: list[torch.optim.Optimizer], multiplier: float) -> None:
    """Scale every group's base lr (remembered as ``initial_lr``) by the schedule's multiplier."""
    for opt in optimizers:
        for group in opt.param_groups:
            group.setdefault("initial_lr", group["lr"])
            group["lr"] = group["initial_lr"] * multiplier
