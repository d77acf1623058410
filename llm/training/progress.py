"""Progress that suits where output goes: a live bar on a terminal, one line per interval in a log file.

Why: a ``\\r``-redrawn bar written to a file (a redirected run, a cluster job's log) becomes one
update per step, thousands of them; a log wants a plain line every ``train.log_every`` steps.
"""

from __future__ import annotations

import logging
import sys
import time

from tqdm import tqdm

log = logging.getLogger("llm.train")


class Progress:
    """``update(step, loss, tokens_per_s)`` after each step; ``close()`` at the end. Silent when disabled."""

    def __init__(self, total: int, initial: int, every: int, enabled: bool, interactive: bool | None = None,
                 job: str = "") -> None:
        """``job``: the sweep job's name, leading each line and the bar, since jobs side by side share a console."""
        self.total, self.every, self.enabled = total, max(1, every), enabled
        self.prefix = f"{job}: " if job else ""
        self.interactive = sys.stderr.isatty() if interactive is None else interactive
        self._start, self._first = time.perf_counter(), initial
        self._bar = None
        if enabled and self.interactive:
            self._bar = tqdm(total=total, initial=initial, desc=job or "train", dynamic_ncols=True)

    def update(self, step: int, loss: float, tokens_per_s: float) -> None:
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.update(1)
            if step % self.every == 0:
                self._bar.set_postfix(loss=f"{loss:.3f}", tok_s=f"{tokens_per_s:,.0f}")
            return
        if step % self.every == 0 or step == self.total:
            elapsed = time.perf_counter() - self._start
            done = step - self._first
            eta = elapsed / done * (self.total - step) if done else float("nan")
            log.info(f"{self.prefix}step {step:>6}/{self.total}  loss {loss:.4f}  {tokens_per_s:,.0f} tok/s  "
                     f"elapsed {elapsed:.0f}s  eta {eta:.0f}s")

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
