"""Validation metrics on a fixed set of val tokens: loss (with its standard error), accuracy, perplexity, and the
loss of each window.

The val windows are the same for every run of a config (spread evenly over the val split, so they sample all
of it), so two runs' losses are measured on identical text. The standard error is over windows (tokens inside
a window are correlated; windows are the independent unit): the noise of the eval set itself, which a
comparison of runs has to stay above before calling a difference real. The per-window losses go to the run
dir (``eval_windows.json``), where the report pairs two runs window by window.
"""

from __future__ import annotations

import math
from contextlib import AbstractContextManager
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from llm.data import val_batches, val_window_starts
from llm.data.packing import document_layout
from llm.doc_attention import DocumentMask, takes_dense
from llm.training.distributed import DistInfo, all_reduce_sum


@dataclass
class EvalResult:
    """One eval: the metrics logged (``metrics.jsonl``, the summary) and each window's mean token loss."""

    metrics: dict[str, float]
    starts: list[int]  # each window's offset in the val stream
    window_loss: list[float]


@torch.no_grad()
def evaluate(model: torch.nn.Module, val_tokens: np.ndarray, batch_size: int, seq_len: int, n_batches: int,
             device: torch.device, autocast: AbstractContextManager, dist_info: DistInfo,
             vocab_size: int, documents_eot: int | None = None) -> EvalResult:
    """Mean loss and its SE, argmax accuracy, exp(mean loss) and the token count over the val windows, and the
    mean loss of each window.

    With ``documents_eot`` (the end-of-text id of a ``data.packing=documents`` run) each window is laid out by
    document as in training (positions restart at each end-of-text token, attention stays inside a document),
    so the model is evaluated on the layout it was trained on; the windows and targets are the same.

    Batches are split across ranks and the sums all-reduced, so every rank returns the same numbers.
    """
    was_training = model.training
    model.eval()
    starts = val_window_starts(len(val_tokens), batch_size, seq_len, n_batches, spread=True)
    per_window = torch.zeros(len(starts), dtype=torch.float64, device=device)
    # loss sum, correct, tokens, windows, sum of window means, sum of squared window means
    totals = torch.zeros(6, dtype=torch.float64, device=device)
    first = 0
    for i, (x, y) in enumerate(val_batches(val_tokens, batch_size, seq_len, n_batches, spread=True)):
        rows = slice(first, first + len(x))
        first += len(x)
        if i % dist_info.world_size != dist_info.rank:
            continue
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        documents = {}
        if documents_eot is not None:
            positions, doc_ids = document_layout(x, documents_eot)
            mask = DocumentMask.build(doc_ids, dense=takes_dense(doc_ids.device))
            documents = {"positions": positions, "doc_mask": mask}
        with autocast:
            logits, _ = model(x, **documents)  # per-token losses below; the model's own mean would be computed twice
        token_loss = F.cross_entropy(logits.float().flatten(0, 1), y.flatten(), reduction="none").view_as(y)
        window = token_loss.double().mean(dim=1)
        per_window[rows] = window
        pred = logits[..., :vocab_size].argmax(dim=-1)
        totals += torch.stack([token_loss.double().sum(), (pred == y).sum().double(), window.new_tensor(y.numel()),
                               window.new_tensor(len(window)), window.sum(), (window**2).sum()])
    all_reduce_sum(totals, dist_info)
    all_reduce_sum(per_window, dist_info)  # each window's loss comes from one rank, zeros from the others
    model.train(was_training)
    loss_sum, correct, tokens, windows, w_sum, w_sq = totals.tolist()
    mean_loss = loss_sum / tokens
    var = max(0.0, (w_sq - w_sum**2 / windows) / (windows - 1)) if windows > 1 else float("nan")
    metrics = {"val_loss": mean_loss, "val_loss_se": math.sqrt(var / windows), "val_acc": correct / tokens,
               "val_ppl": perplexity(mean_loss), "val_tokens": int(tokens)}
    return EvalResult(metrics, [int(s) for s in starts], per_window.tolist())


def perplexity(mean_loss: float) -> float:
    """exp of a mean loss in nats: inf past float64's range, and NaN for a NaN loss (a comparison ``< 700`` sent a
    NaN loss to inf, a number a reader would take for a diverged but finite evaluation)."""
    return float("inf") if mean_loss >= 700 else math.exp(mean_loss)
