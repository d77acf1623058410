"""Where metrics go: ``metrics.jsonl`` (always, flushed line by line) and wandb (optional).

Writing each line as it comes means a crash or Ctrl-C never loses what was already measured.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def _clean(v: Any) -> Any:
    """JSON-safe scalars: non-finite floats become strings so the line stays valid JSON."""
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    return v


class MetricsWriter:
    """Appends one JSON object per call to ``path`` and flushes it to disk at once."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._f = open(self.path, "a", buffering=1)

    def write(self, record: Mapping[str, Any]) -> None:
        self._f.write(json.dumps({k: _clean(v) for k, v in record.items()}) + "\n")
        self._f.flush()
        os.fsync(self._f.fileno())

    def close(self) -> None:
        self._f.close()


def write_json_atomic(path: str | Path, obj: Any) -> None:
    """Write JSON through a temp file and a rename, so readers never see half a file."""
    path = Path(path)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2, default=str) + "\n")
    os.replace(tmp, path)


class Tracker:
    """wandb run for one training run (a no-op when ``logger=none`` or mode=disabled)."""

    def __init__(self, logger_cfg: Mapping, run_dir: Path, name: str, group: str, config: dict,
                 resume_id: str | None = None) -> None:
        self.run = None
        wcfg = logger_cfg.get("wandb") if logger_cfg.get("name") == "wandb" else None
        if not wcfg or wcfg.get("mode") == "disabled":
            return
        import wandb

        os.environ.setdefault("WANDB_SILENT", "true")
        self.run = wandb.init(
            project=wcfg.get("project", "ropelab"), entity=wcfg.get("entity"), group=wcfg.get("group") or group,
            name=name, config=config, dir=str(run_dir), mode=wcfg.get("mode", "offline"),
            tags=list(wcfg.get("tags") or []), id=resume_id, resume="allow" if resume_id else None,
            settings=wandb.Settings(console="off"),
        )

    @property
    def run_id(self) -> str | None:
        return self.run.id if self.run is not None else None

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        if self.run is not None:
            self.run.log(dict(metrics), step=step)

    def summary(self, metrics: Mapping[str, Any]) -> None:
        if self.run is not None:
            self.run.summary.update(dict(metrics))

    def finish(self, exit_code: int = 0) -> None:
        if self.run is not None:
            self.run.finish(exit_code=exit_code)
            self.run = None
