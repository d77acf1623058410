"""Evaluate a finished run at other context lengths: ``python -m llm.eval_lengths run=<run dir> [key=value ...]``.

The Hydra entry point (conf/eval_lengths.yaml holds every key); the work is in
:mod:`llm.evaluation.lengths`. The run's newest checkpoint is evaluated on windows of whole val documents at
each length (default 1x, 2x, 4x, 8x, 16x its training ``model.seq_len``; every run and scaling gets the same
windows at a length), with the run's RoPE scaling or the
one ``rope.scaling.*`` asks for, and with its implementation or ``rope=<name>``'s. One progress line per
length (and per baseline before them); results in ``<run dir>/eval_lengths/<label>.json`` and ``.csv``, written
after every length, so Ctrl-C (one line, exit 130) or a SIGTERM (a job scheduler's stop, ``kill``: one line, exit
143, as ``llm.train`` ends) keeps the lengths finished. A user error (no checkpoint, a damaged ``config.yaml``,
a run dir whose ``eval_lengths/`` cannot be written, ``lengths=[0]``, an unknown scaling, a length that cannot fit
the device) is one line on stderr and exit
code 2, before the weights are loaded; so is a Hydra-level mistake (an unknown option or key, see :mod:`llm.entry`).
"""

from __future__ import annotations

import sys

if __name__ == "__main__":  # before Hydra and torch import: a stop from here on is one line, not a traceback
    from llm.entry import stop_quietly_while_starting

    stop_quietly_while_starting("before the first length finished: nothing was written")

import hydra  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

from llm.config_check import check_config_keys  # noqa: E402
from llm.entry import (  # noqa: E402
    full_error_requested,
    refuse_multirun,
    refuse_unresolved,
    run_entry,
    sigterm_stops_like_ctrl_c,
    started,
    stopped,
)
from llm.errors import UserError  # noqa: E402
from llm.evaluation.lengths import eval_lengths_from_config  # noqa: E402
from llm.fileio import DiskFullError  # noqa: E402

#: The line refusing ``-m``: what to do instead of a sweep.
MULTIRUN_REFUSAL = ("-m (--multirun): llm.eval_lengths evaluates one run with one setting per command (a sweep would "
                    "leave multirun/ dirs here); run it once per value (for s in linear ntk yarn; do python -m "
                    "llm.eval_lengths run=... rope.scaling.type=$s rope.scaling.factor=auto; done), or train with "
                    "+experiment=length_generalization, whose sweep evaluates each run at the end")


def _print(line: str) -> None:
    print(line, flush=True)


@hydra.main(config_path="../conf", config_name="eval_lengths", version_base="1.3")
def main(cfg: DictConfig) -> None:
    try:
        started()  # this handler takes the stops from here on
        with sigterm_stops_like_ctrl_c():  # a SIGTERM takes Ctrl-C's path: the lengths finished are kept
            refuse_unresolved(cfg)  # lengths=${foo}: one line, before any key is read
            check_config_keys(cfg, "eval_lengths", "python -m llm.eval_lengths")  # +tokenz=5: refused first
            eval_lengths_from_config(cfg, emit=_print)
    except (UserError, DiskFullError) as e:
        if full_error_requested():
            raise
        print(f"Error: {str(e).strip() or type(e).__name__}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt as e:  # Ctrl-C or SIGTERM: every length finished is already written (a write per length)
        path = getattr(e, "json_path", None)
        word, code = stopped(e)
        print(f"{word}: the lengths evaluated so far are in {path}" if path else
              f"{word} before the first length finished: nothing was written", file=sys.stderr)
        sys.exit(code)


if __name__ == "__main__":
    refuse_multirun(sys.argv, MULTIRUN_REFUSAL)
    run_entry(main, "eval_lengths", "python -m llm.eval_lengths")
