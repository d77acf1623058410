"""The metrics of one evaluation length, from per-target loss arrays of shape (windows, L).

With T the reference length (the run's training length unless set otherwise):

* ``val_loss`` (± ``val_loss_se``), ``val_acc``, ``val_ppl``: the whole window, every position;
* ``loss_within_train`` / ``loss_beyond_train``: positions p < T and p >= T (None at L <= T);
* ``sliding_loss`` / ``sliding_beyond_train``: the same model, the same targets, each predicted from at
  most the last ``window`` tokens (:mod:`llm.evaluation.losses`);
* ``gain_beyond_train`` = ``loss_beyond_train - sliding_beyond_train`` (± its SE): negative when the model
  predicts the targets beyond T better with its whole context than with the last T tokens, i.e. it uses
  the longer context;
* ``baseline_loss`` / ``baseline_beyond_train``: the run as trained (its own RoPE scaling) on the same
  sliding windows: the run's own level, the same number for every scaling it is evaluated with;
* ``degradation`` = ``loss_beyond_train - baseline_beyond_train`` (± its SE): what going to length L with
  this scaling costs against what the run achieves within its training length on the same targets.
  Comparing degradations across runs removes each seed's level (``degradation = gain + the scaling's cost
  on the sliding windows``).

Standard errors are over windows (the targets of one window are correlated; windows are the unit), so they
are the evaluation's own noise, not the seeds': the report puts the seeds' spread beside them.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from llm.training.evaluate import perplexity


def _mean(a: np.ndarray) -> float | None:
    return float(a.mean()) if a.size else None


def _se(per_window: np.ndarray) -> float | None:
    """Standard error of the mean of per-window values (None with fewer than two windows)."""
    n = len(per_window)
    return float(per_window.std(ddof=1) / math.sqrt(n)) if n > 1 else None


def _difference(a: np.ndarray, b: np.ndarray, split: int) -> tuple[float | None, float | None]:
    """Mean of ``a - b`` over positions >= split, and its SE over windows; (None, None) when there are none."""
    if a.shape[1] <= split:
        return None, None
    diff = a[:, split:] - b[:, split:]
    return float(diff.mean()), _se(diff.mean(axis=1))


def length_metrics(loss: np.ndarray, correct: np.ndarray, sliding: np.ndarray, baseline: np.ndarray, split: int,
                   bucket: int) -> dict[str, Any]:
    """Every metric of one length (see the module docstring) and the per-bucket curve of the three losses."""
    windows, length = loss.shape
    mean = float(loss.mean())
    window_means = loss.mean(axis=1)
    gain, gain_se = _difference(loss, sliding, split)
    degradation, degradation_se = _difference(loss, baseline, split)
    buckets = [{"start": a, "end": min(a + bucket, length), "loss": float(loss[:, a:a + bucket].mean()),
                "sliding": float(sliding[:, a:a + bucket].mean()), "baseline": float(baseline[:, a:a + bucket].mean())}
               for a in range(0, length, bucket)]
    return {
        # one window has no spread: None (as every SE here), so the JSON holds no NaN and the CSV cell is empty
        "val_loss": mean, "val_loss_se": _se(window_means),
        "val_acc": float(correct.mean()), "val_ppl": perplexity(mean),
        "val_tokens": windows * length, "windows": windows,
        "loss_within_train": _mean(loss[:, :split]), "loss_beyond_train": _mean(loss[:, split:]),
        "sliding_loss": float(sliding.mean()), "sliding_beyond_train": _mean(sliding[:, split:]),
        "gain_beyond_train": gain, "gain_beyond_train_se": gain_se,
        "baseline_loss": float(baseline.mean()), "baseline_beyond_train": _mean(baseline[:, split:]),
        "degradation": degradation, "degradation_se": degradation_se,
        "buckets": buckets,
    }
