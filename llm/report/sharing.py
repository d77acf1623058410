"""Runs that trained at the same time on one GPU.

A sweep run side by side on one device (``hydra/launcher=joblib hydra.launcher.n_jobs=5``) trains
several models at once: quality is unaffected, but each run's training time and tokens/s then
measure a fifth of a GPU, not its RoPE implementation. Each run's summary records its host, its
GPU's UUID (``llm.training.runtime.device_identity``) and when it started and ended; runs on the same
GPU whose intervals overlap shared it. The comparison says so next to the speed columns.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from llm.report.runs import Run, as_float


def _interval(run: Run) -> tuple[tuple[str, str], float, float] | None:
    s = run.summary
    host, uuid = s.get("host"), s.get("device_uuid")
    start, end = as_float(s.get("started_at")), as_float(s.get("ended_at"))
    if not host or not uuid or start is None or end is None or end < start:
        return None
    return (str(host), str(uuid)), start, end


def concurrent_runs(runs: Sequence[Run]) -> dict[Path, int]:
    """Run dir -> the most runs (itself included) that trained on its GPU at one moment of its run.

    Runs without a host, GPU UUID or start/end time (CPU runs, runs from before these were recorded)
    are left out: nothing is claimed about them.
    """
    spans = {r.path: iv for r in runs if (iv := _interval(r)) is not None}
    out = {}
    for path, (dev, start, end) in spans.items():
        same = [(s, e) for d, s, e in spans.values() if d == dev and s < end and e > start]
        moments = [start] + [s for s, _ in same if start <= s < end]
        out[path] = max(sum(1 for s, e in same if s <= t < e) for t in moments)
    return out
