"""Evaluate a finished run at other context lengths: ``python -m llm.eval_lengths run=<run dir> [key=value ...]``.

The Hydra entry point (conf/eval_lengths.yaml holds every key); the work is in
:mod:`llm.evaluation.lengths`. The run's newest checkpoint is evaluated on the same val tokens at each
length (default 1x, 2x, 4x, 8x, 16x its training ``model.seq_len``), with the run's RoPE scaling or the
one ``rope.scaling.*`` asks for, and with its implementation or ``rope=<name>``'s. One progress line per
length (and per baseline before them); results in ``<run dir>/eval_lengths/<label>.json`` and ``.csv``, written
after every length, so Ctrl-C (one line, exit 130) or a SIGTERM (a job scheduler's stop, ``kill``: one line, exit
143, as ``llm.train`` ends) keeps the lengths finished. A user error (no checkpoint,
``lengths=[0]``, an unknown scaling, a length that cannot fit the device) is one line on stderr and exit
code 2, before the weights are loaded; so is a Hydra-level mistake (an unknown option or key, see :mod:`llm.entry`).
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import hydra
from omegaconf import DictConfig

from llm.config_check import check_config_keys
from llm.entry import full_error_requested, run_entry
from llm.errors import UserError, in_chain
from llm.evaluation.lengths import eval_lengths_from_config
from llm.fileio import DiskFullError


def _print(line: str) -> None:
    print(line, flush=True)


class Terminated(KeyboardInterrupt):
    """A SIGTERM, raised where the evaluation is, as Ctrl-C raises KeyboardInterrupt: the same path keeps the lengths
    finished and names their file (:class:`llm.evaluation.lengths.LengthsInterrupted` wraps it)."""

    signum = signal.SIGTERM


@contextmanager
def _sigterm_stops_like_ctrl_c() -> Iterator[None]:
    """While the command works, a SIGTERM raises :class:`Terminated`.

    Why: the default handler ends the process at once, without a word and with exit code -15, where Ctrl-C says what
    was kept; a job scheduler or ``kill`` stops a long evaluation with SIGTERM. The previous handler comes back after.
    """

    def handle(signum, frame) -> None:
        raise Terminated

    previous = signal.signal(signal.SIGTERM, handle)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@hydra.main(config_path="../conf", config_name="eval_lengths", version_base="1.3")
def main(cfg: DictConfig) -> None:
    try:
        with _sigterm_stops_like_ctrl_c():
            check_config_keys(cfg, "eval_lengths", "python -m llm.eval_lengths")  # +tokenz=5: refused first
            eval_lengths_from_config(cfg, emit=_print)
    except (UserError, DiskFullError) as e:
        if full_error_requested():
            raise
        print(f"Error: {str(e).strip() or type(e).__name__}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt as e:  # Ctrl-C or SIGTERM: every length finished is already written (a write per length)
        path = getattr(e, "json_path", None)
        terminated = in_chain(e, Terminated)
        stopped = "Stopped by SIGTERM" if terminated else "Interrupted"
        print(f"{stopped}: the lengths evaluated so far are in {path}" if path else
              f"{stopped} before the first length finished: nothing was written", file=sys.stderr)
        # exit 128 + the signal, the shell's convention, as llm.train ends a run stopped by a signal
        sys.exit(128 + (terminated.signum if terminated else signal.SIGINT))


if __name__ == "__main__":
    run_entry(main, "eval_lengths", "python -m llm.eval_lengths")
