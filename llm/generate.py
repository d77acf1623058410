"""Write text with a trained run: ``python -m llm.generate run=<run dir> prompt="def main(" [key=value ...]``.

The Hydra entry point (conf/generate.yaml holds every key); the work is in
:mod:`llm.generation.command`. The run's config and newest checkpoint rebuild its model with its RoPE
implementation (``rope=<name>`` swaps the kernel), and the continuation streams to stdout while it is
decoded with a KV cache. A user error (a key nothing reads, no checkpoint, a prompt longer than the context,
``top_k=0``, ...) is one line on stderr and exit code 2, before the weights are loaded. Ctrl-C, or a SIGTERM (a job
scheduler's stop, ``kill``), keeps the text printed so far and ends with one line saying so, exit 130 or 143, as
``llm.eval_lengths`` and ``llm.train`` end. A reader of stdout that goes away (``| head``) ends it quietly, exit
141 (128 + SIGPIPE), as a shell pipeline's commands end.

``prompt=`` and ``prompt_file=`` take the rest of their argument verbatim (``prompt=def main(`` needs no
Hydra quoting): the entry point quotes them for Hydra's parser, unless the value is one Hydra quoted string already
(``prompt="'text'"``, whose quotes Hydra removes).
"""

from __future__ import annotations

import errno
import os
import re
import signal
import sys

if __name__ == "__main__":  # before Hydra imports: a stop from here on is one line, not an import's traceback
    from llm.entry import stop_quietly_while_starting

    stop_quietly_while_starting("before decoding began: nothing was generated")

import hydra  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

from llm.entry import (  # noqa: E402
    full_error_requested,
    refuse_multirun,
    refuse_unresolved,
    run_entry,
    sigterm_stops_like_ctrl_c,
    started,
    stopped,
)
from llm.errors import UserError, in_chain  # noqa: E402

#: Keys whose values are free text or paths, taken verbatim from the command line.
VERBATIM_KEYS = ("prompt", "prompt_file")


def quote_verbatim(value: str) -> str:
    """``value`` as a single-quoted Hydra string that parses (and resolves) back to exactly ``value``:
    backslashes before a quote or at the end doubled, quotes escaped, ``${`` escaped from interpolation."""
    value = re.sub(r"(\\*)(\$\{)", lambda m: m.group(1) * 2 + "\\${", value)
    value = re.sub(r"(\\*)('|\Z)", lambda m: m.group(1) * 2 + ("\\'" if m.group(2) else ""), value)
    return f"'{value}'"


#: The line refusing ``-m``: what generation does instead of a sweep.
MULTIRUN_REFUSAL = ("-m (--multirun): llm.generate runs one setting per command (a sweep would leave multirun/ dirs "
                    "here); give num_samples=N for several samples, or run the command once per value "
                    "(for s in 1 2; do python -m llm.generate ... seed=$s; done)")


def hydra_quoted(value: str) -> bool:
    """Whether ``value`` is one whole Hydra quoted string (``'text'``, ``'it\\'s'``): a quote, then characters in
    which every backslash escapes the one after it, so that no quote of its kind ends the string early, then the
    same quote. ``'a' + 'b'``, a triple-quoted docstring or ``'''`` begin and end with a quote but are not one
    string: they are prompts, taken verbatim."""
    if len(value) < 2 or value[0] != value[-1] or value[0] not in "'\"":
        return False
    q = value[0]
    return re.fullmatch(rf"(?:[^{q}\\]|\\.)*", value[1:-1], flags=re.DOTALL) is not None


def verbatim_overrides(argv: list[str]) -> list[str]:
    """``argv`` with the values of :data:`VERBATIM_KEYS` quoted for Hydra, but for a value that is one Hydra quoted
    string already (:func:`hydra_quoted`: quoted by the user for Hydra, which removes its quotes)."""
    out = []
    for arg in argv:
        key, eq, value = arg.partition("=")
        verbatim = eq and key in VERBATIM_KEYS and not hydra_quoted(value)
        out.append(f"{key}={quote_verbatim(value)}" if verbatim else arg)
    return out


@hydra.main(config_path="../conf", config_name="generate", version_base="1.3")
def main(cfg: DictConfig) -> None:
    try:
        started()  # this handler takes the stops from here on
        with sigterm_stops_like_ctrl_c():  # a SIGTERM takes Ctrl-C's path: one line, not a silent exit
            # imported here, not at the top: torch loads for seconds, and a Ctrl-C meanwhile ends with the line below
            import numpy  # noqa: F401  (before torch: torch's C init imports numpy and drops its errors, Ctrl-C too)

            from llm.config_check import check_config_keys
            from llm.generation.command import generate_from_config
            from llm.generation.load import refuse_rope_keys_without_a_kernel

            refuse_unresolved(cfg)  # top_k=${foo}: one line, before any key is read
            refuse_rope_keys_without_a_kernel(cfg.get("rope"))  # rope.variant=full: not a key of "the rope chosen"
            check_config_keys(cfg, "generate", "python -m llm.generate")  # +top_kk=3: refused first
            generate_from_config(cfg)
    except UserError as e:
        if full_error_requested():
            raise
        print(f"Error: {str(e).strip() or type(e).__name__}", file=sys.stderr)
        sys.exit(2)
    except BrokenPipeError:  # the reader of stdout is gone (`| head`): end quietly as a SIGPIPE would, no traceback
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # the interpreter's last flush of stdout must not fail again
        sys.exit(128 + signal.SIGPIPE)
    except OSError as e:
        # stdout that takes no more (a full disk, /dev/full): one line, not a traceback; any other OSError is a crash
        if e.filename is not None or e.errno not in (errno.ENOSPC, errno.EIO, errno.EDQUOT, errno.EFBIG):
            raise
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # the interpreter's last flush of stdout must not fail again
        print(f"Error: writing the text to stdout failed: {e.strerror or e}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt as e:  # a stop asked for, not a crash: no traceback, the text printed so far stays
        word, code = stopped(e)
        command = sys.modules.get("llm.generation.command")  # not imported yet: stopped before decoding
        where = in_chain(e, command.GenerationInterrupted) if command else None
        sample = "" if where is None or where.of == 1 else f" in sample {where.sample} of {where.of}"
        print(f"{word}{sample}: the text so far is above" if where else f"{word} before decoding began: nothing was "
              "generated", file=sys.stderr)
        sys.exit(code)


if __name__ == "__main__":
    refuse_multirun(sys.argv, MULTIRUN_REFUSAL)
    sys.argv = verbatim_overrides(sys.argv)
    run_entry(main, "generate", "python -m llm.generate")  # a stop while Hydra composes: the guard above
