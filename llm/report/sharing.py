"""Runs that trained at the same time on one GPU, or on one host's CPU.

A sweep run side by side on one device (``hydra/launcher=joblib hydra.launcher.n_jobs=5``) trains
several models at once: quality is unaffected, but each run's training time and tokens/s then
measure a fifth of a GPU, not its RoPE implementation. Each run's summary records its host, its
GPU's UUID (``llm.training.runtime.device_identity``) and when it started and ended; runs on the same
GPU whose intervals overlap shared it. A CPU run records no UUID: runs on one host's CPU (``device: cpu``)
whose intervals overlap shared its cores. The comparison says so next to the speed columns.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from llm.report.runs import Run, as_float

#: What stands for a GPU's UUID in a CPU run's sharing key: the host's cores.
CPU = "cpu"


def on_cpu(run: Run) -> bool:
    """Whether the run trained on the CPU (no GPU UUID, and the summary's device as the trainer records it)."""
    return not run.summary.get("device_uuid") and run.summary.get("device") == CPU


def _interval(run: Run) -> tuple[tuple[str, str], float, float] | None:
    s = run.summary
    host, uuid = s.get("host"), s.get("device_uuid") or (CPU if on_cpu(run) else None)
    start, end = as_float(s.get("started_at")), as_float(s.get("ended_at"))
    if not host or not uuid or start is None or end is None or end < start:
        return None
    return (str(host), str(uuid)), start, end


def concurrent_runs(runs: Sequence[Run]) -> dict[Path, int]:
    """Run dir -> the most runs (itself included) that trained on its GPU at one moment of its run.

    Runs without a host, a GPU UUID (or the CPU) or start/end times (runs from before these were recorded)
    are left out: nothing is claimed about them.
    """
    spans = {r.path: iv for r in runs if (iv := _interval(r)) is not None}
    out = {}
    for path, (dev, start, end) in spans.items():
        same = [(s, e) for d, s, e in spans.values() if d == dev and s < end and e > start]
        moments = [start] + [s for s, _ in same if start <= s < end]
        out[path] = max(sum(1 for s, e in same if s <= t < e) for t in moments)
    return out
