"""Validation metrics on a fixed set of val tokens: loss (with its standard error), accuracy, perplexity.

The val windows are the same for every run of a config (a fixed slice of the val split), so two
runs' losses are measured on identical text. The standard error is over windows (tokens inside a
window are correlated; windows are the independent unit): the noise of the eval set itself, which
a comparison of runs has to stay above before calling a difference real.
"""

from __future__ import annotations

import math
from contextlib import AbstractContextManager

import numpy as np
import torch
import torch.nn.functional as F

from llm.data import val_batches
from llm.training.distributed import DistInfo, all_reduce_sum


@torch.no_grad()
def evaluate(model: torch.nn.Module, val_tokens: np.ndarray, batch_size: int, seq_len: int, n_batches: int,
             device: torch.device, autocast: AbstractContextManager, dist_info: DistInfo,
             vocab_size: int) -> dict[str, float]:
    """Mean loss and its SE, argmax accuracy, exp(mean loss) and the token count over the val windows.

    Batches are split across ranks and the sums all-reduced, so every rank returns the same numbers.
    """
    was_training = model.training
    model.eval()
    # loss sum, correct, tokens, windows, sum of window means, sum of squared window means
    totals = torch.zeros(6, dtype=torch.float64, device=device)
    for i, (x, y) in enumerate(val_batches(val_tokens, batch_size, seq_len, n_batches)):
        if i % dist_info.world_size != dist_info.rank:
            continue
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        with autocast:
            logits, _ = model(x)  # per-token losses below; the model's own mean would be computed twice
        token_loss = F.cross_entropy(logits.float().flatten(0, 1), y.flatten(), reduction="none").view_as(y)
        window = token_loss.double().mean(dim=1)
        pred = logits[..., :vocab_size].argmax(dim=-1)
        totals += torch.stack([token_loss.double().sum(), (pred == y).sum().double(), window.new_tensor(y.numel()),
                               window.new_tensor(len(window)), window.sum(), (window**2).sum()])
    all_reduce_sum(totals, dist_info)
    model.train(was_training)
    loss_sum, correct, tokens, windows, w_sum, w_sq = totals.tolist()
    mean_loss = loss_sum / tokens
    var = max(0.0, (w_sq - w_sum**2 / windows) / (windows - 1)) if windows > 1 else float("nan")
    return {"val_loss": mean_loss, "val_loss_se": math.sqrt(var / windows), "val_acc": correct / tokens,
            "val_ppl": math.exp(mean_loss) if mean_loss < 700 else float("inf"), "val_tokens": int(tokens)}
