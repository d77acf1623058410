"""Rebuild the length-generalization report: ``python -m scripts.length_report DIR... [--out OUTDIR]``.

DIR is a sweep dir, a run dir or any parent (searched for run dirs and their ``eval_lengths/*.json``, as
written by ``python -m llm.eval_lengths``). Writes length_report.md, length_report.csv, length_curves.png and
position_loss.png into OUTDIR (default: the single DIR given, else the DIRs' common parent). Only evaluations on the
same targets (budget ``tokens``, T, baseline, val split) are averaged or compared: each set is a row of its own, and a
comparison with no counterpart on its targets is n/a. The logic is in :mod:`llm.report.length`; this is only the
command line. A bad argument is one line and exit code 2.
"""

from __future__ import annotations

import sys

# Before the guarded imports: the exit code the guard returns is named there, in a leaf of the standard library.
from llm.cli import INTERRUPTED, OneLineParser

# A Ctrl-C while the report's modules load (scipy, matplotlib) ends as one later does: one line, no traceback.
try:
    from llm.report import CompareError, cli_error_line, default_out_dir, out_dir_problem
    from llm.report.length import CSV_FILE, CURVES_FILE, POSITION_FILE, build_length_report
    from llm.report.length_writers import write_length_report
except KeyboardInterrupt:
    print("interrupted: no report written", file=sys.stderr)
    sys.exit(INTERRUPTED)


def main(argv: list[str] | None = None) -> int:
    """Write the report; 0 when written, 2 on bad input (no such dir, no evaluations under it)."""
    p = OneLineParser(prog="python -m scripts.length_report",
                      description="Perplexity against evaluation length per RoPE variant x scaling, over seeds.")
    p.add_argument("dirs", nargs="+", metavar="DIR", help="sweep dirs, run dirs or parents of them")
    p.add_argument("--out", metavar="OUTDIR", default=None,
                   help="where to write the report (default: the single DIR, else the DIRs' common parent)")
    args = p.parse_args(argv)
    try:
        report = build_length_report(args.dirs)
        out = args.out if args.out is not None else default_out_dir(args.dirs)
    except (CompareError, FileNotFoundError) as e:
        print(cli_error_line(e), file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # while the evaluations load: nothing written
        print("interrupted: no report written", file=sys.stderr)
        return INTERRUPTED
    try:
        md = write_length_report(report, out)
    except OSError as e:
        print(f"error: argument --out: cannot write the report to {out}: {out_dir_problem(out, e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"interrupted: {out} left as it was", file=sys.stderr)
        return INTERRUPTED
    try:  # the report is written whole: a Ctrl-C from here on says so, as the exit code alone would not
        print(md.read_text())
        print(f"report: {md} (+ {CSV_FILE}, {CURVES_FILE}, {POSITION_FILE} in {md.parent})")
    except KeyboardInterrupt:
        print(f"interrupted after the report was written: {md}", file=sys.stderr)
        return INTERRUPTED
    return 0


if __name__ == "__main__":
    sys.exit(main())
