"""Compare finished runs: ``python -m scripts.compare DIR... [--out OUTDIR] [--allow-mixed] [--reference NAME]
[--margin EPS] [--acc-margin EPS]``.

DIR is a run dir, a Hydra multirun dir or any parent (searched recursively for summary.json; job dirs
that crashed without one are listed too). Writes comparison.md, comparison.csv, loss_curves.png,
speed.png and paired_delta.png into OUTDIR (default: the single DIR given, else the common parent of
the DIRs). The logic lives in :mod:`llm.report`; this is only the command line. A bad argument gets a
one-line error naming it and exit code 2; Ctrl-C, from the report's first import on, one line and exit code 130.
"""

from __future__ import annotations

import sys

# Before the guarded imports: the exit code the guard returns is named there, in a leaf of the standard library.
from llm.cli import INTERRUPTED, OneLineParser

# A Ctrl-C while the report's modules load ends as one later does: one line and INTERRUPTED, no traceback.
try:
    import argparse
    import logging

    from llm.report import (
        DEFAULT_ACC_MARGIN,
        DEFAULT_MARGIN,
        CompareError,
        build_report,
        cli_error_line,
        default_out_dir,
        out_dir_problem,
        write_report,
    )
    from llm.report.analysis import margin_problem
except KeyboardInterrupt:
    print("interrupted: no report written", file=sys.stderr)
    sys.exit(INTERRUPTED)


def _margin(text: str, accuracy: bool = False) -> float:
    """An equivalence margin (the report's rule, :func:`llm.report.analysis.margin_problem`)."""
    if why := margin_problem(text, accuracy):
        raise argparse.ArgumentTypeError(f"{why}, got {text!r}")
    return float(text)


def _accuracy_margin(text: str) -> float:
    return _margin(text, accuracy=True)


def _parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="python -m scripts.compare",
        description="Compare RoPE implementations over seeds: verdicts against a reference, mean ± std, "
                    "paired statistics (md + csv) and plots.",
    )
    p.add_argument("dirs", nargs="+", metavar="DIR", help="run dirs, multirun dirs or parents of them")
    p.add_argument("--out", metavar="OUTDIR", default=None,
                   help="where to write the report (default: the single DIR, else the DIRs' common parent)")
    p.add_argument("--allow-mixed", action="store_true",
                   help="compare runs even if they differ in more than rope and seed (model, data, steps...)")
    p.add_argument("--reference", metavar="NAME", default=None,
                   help="implementation the others are compared with: a rope= preset (torch_full), a registry "
                        "name (triton_v4) or a full label ('torch (partial, bfloat16)'); default: torch with "
                        "compute_dtype float32")
    p.add_argument("--margin", metavar="EPS", type=_margin, default=DEFAULT_MARGIN,
                   help=f"equivalence margin for val loss, in nats (default {DEFAULT_MARGIN})")
    p.add_argument("--acc-margin", metavar="EPS", type=_accuracy_margin, default=DEFAULT_ACC_MARGIN,
                   help=f"equivalence margin for val accuracy, absolute (default {DEFAULT_ACC_MARGIN})")
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the comparison; 0 when the report was written (failed runs are listed, not fatal), 2 on bad input."""
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        report = build_report(args.dirs, allow_mixed=args.allow_mixed, reference=args.reference,
                              margin=args.margin, acc_margin=args.acc_margin)
        out = args.out if args.out is not None else default_out_dir(args.dirs)
    except (CompareError, FileNotFoundError) as e:
        print(cli_error_line(e), file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # while the runs load or scipy and statsmodels import (on first use): nothing written
        print("interrupted: no report written", file=sys.stderr)
        return INTERRUPTED
    try:
        md = write_report(report, out)
    except OSError as e:
        print(f"error: argument --out: cannot write the report to {out}: {out_dir_problem(out, e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"interrupted: {out} left as it was", file=sys.stderr)
        return INTERRUPTED
    try:  # the report is written whole: a Ctrl-C from here on says so, as the exit code alone would not
        print(md.read_text())
        for r in report.failures:
            print(f"warning: {r.name}: {r.status}" + (f" - {r.message}" if r.message else ""), file=sys.stderr)
        if report.failures:
            print(report.left_out_line(), file=sys.stderr)
        print(f"report: {md} (+ comparison.csv, loss_curves.png, speed.png, paired_delta.png in {md.parent})")
    except KeyboardInterrupt:
        print(f"interrupted after the report was written: {md}", file=sys.stderr)
        return INTERRUPTED
    return 0


if __name__ == "__main__":
    sys.exit(main())
