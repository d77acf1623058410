"""Validation metrics on a fixed set of val tokens: loss, next-token accuracy, perplexity."""

from __future__ import annotations

import math
from contextlib import AbstractContextManager

import numpy as np
import torch

from llm.data import val_batches
from llm.distributed import DistInfo, all_reduce_sum


@torch.no_grad()
def evaluate(model: torch.nn.Module, val_tokens: np.ndarray, batch_size: int, seq_len: int, n_batches: int,
             device: torch.device, autocast: AbstractContextManager, dist_info: DistInfo,
             vocab_size: int) -> dict[str, float]:
    """Mean loss, argmax accuracy and exp(mean loss) over the fixed val windows (split across ranks)."""
    was_training = model.training
    model.eval()
    totals = torch.zeros(3, dtype=torch.float64, device=device)  # loss sum, correct, count
    for i, (x, y) in enumerate(val_batches(val_tokens, batch_size, seq_len, n_batches)):
        if i % dist_info.world_size != dist_info.rank:
            continue
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        with autocast:
            logits, loss = model(x, y)
        pred = logits[..., :vocab_size].argmax(dim=-1)
        totals[0] += loss.double() * y.numel()
        totals[1] += (pred == y).sum()
        totals[2] += y.numel()
    all_reduce_sum(totals, dist_info)
    model.train(was_training)
    mean_loss = (totals[0] / totals[2]).item()
    return {"val_loss": mean_loss, "val_acc": (totals[1] / totals[2]).item(),
            "val_ppl": math.exp(mean_loss) if mean_loss < 700 else float("inf")}
