"""How the next token is picked from the logits: greedy, temperature, top-k, top-p.

The settings are checked once, before any work, with one-line errors naming the key (``temperature``,
``top_k``, ``top_p``) as the command line spells it, so a typo never costs a model load.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from llm.checks import positive_int
from llm.errors import ConfigError


@dataclass(frozen=True)
class Sampling:
    """``temperature`` 0 is greedy (argmax; top_k/top_p ignored); above 0 the logits are divided by it,
    then cut to the ``top_k`` most likely tokens and/or the smallest set of mass ``top_p`` (None: no cut)."""

    temperature: float = 0.0
    top_k: int | None = None
    top_p: float | None = None

    def __post_init__(self) -> None:
        t, k, p = self.temperature, self.top_k, self.top_p
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t < 0:
            raise ConfigError(f"temperature={t!r} must be a finite number >= 0 (0: greedy)")
        positive_int(k, "top_k", allow_none=True, must_be="a positive integer, or null for no top-k cut")
        if p is not None and (isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 < p <= 1):
            raise ConfigError(f"top_p={p!r} must be in (0, 1], or null for no nucleus cut")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


GREEDY = Sampling()


def _tempered(logits: Tensor, temperature: float) -> Tensor:
    """``logits / temperature`` up to a constant per row (the distribution is the same), for any finite temperature
    > 0. Why not the plain division: a tiny temperature (1e-40) or large logits overflow float32 to inf, and the
    draw fails on inf/nan. Each row's maximum is subtracted first, so every value is <= 0 and the division can only
    reach -inf (probability 0); the maxima stay 0 (never 0 / 0 where the temperature underflows float32), so a tiny
    temperature is greedy, its ties shared."""
    shifted = logits - logits.max(dim=-1, keepdim=True).values
    return torch.where(shifted == 0, shifted, shifted / temperature)


def pick_next(logits: Tensor, sampling: Sampling, generator: torch.Generator | None = None) -> Tensor:
    """The next token (B,) for logits (B, V): argmax when greedy, else a draw from the cut distribution
    (``generator`` makes the draws reproducible; it must live on the logits' device)."""
    if sampling.greedy:
        return logits.argmax(dim=-1)
    logits = _tempered(logits.float(), sampling.temperature)
    if sampling.top_k is not None and sampling.top_k < logits.shape[-1]:
        kth = torch.topk(logits, sampling.top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, -math.inf)
    if sampling.top_p is not None and sampling.top_p < 1:
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        probs = sorted_logits.softmax(dim=-1)
        # drop a token when the tokens before it already hold top_p: the most likely one always stays
        drop = probs.cumsum(dim=-1) - probs >= sampling.top_p
        logits = logits.scatter(-1, order, sorted_logits.masked_fill(drop, -math.inf))
    return torch.multinomial(logits.softmax(dim=-1), 1, generator=generator).squeeze(-1)
