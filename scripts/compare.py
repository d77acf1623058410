"""Compare finished runs: ``python -m scripts.compare DIR... [--out OUTDIR] [--allow-mixed]``.

DIR is a run dir, a Hydra multirun dir or any parent (searched recursively for summary.json).
Writes comparison.md, comparison.csv, loss_curves.png and speed.png into OUTDIR (default: the single
DIR given, else the common parent of the DIRs). The logic lives in :mod:`llm.compare`.
"""

from __future__ import annotations

import argparse
import logging
import sys

from llm.compare import CompareError, compare_runs


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m scripts.compare",
        description="Compare RoPE implementations over seeds: mean ± std table (md + csv) and plots.",
    )
    p.add_argument("dirs", nargs="+", metavar="DIR", help="run dirs, multirun dirs or parents of them")
    p.add_argument("--out", metavar="OUTDIR", default=None,
                   help="where to write the report (default: the single DIR, else the DIRs' common parent)")
    p.add_argument("--allow-mixed", action="store_true",
                   help="compare runs even if they differ in more than rope and seed (model, data, steps...)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        md = compare_runs(args.dirs, out_dir=args.out, allow_mixed=args.allow_mixed)
    except (CompareError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(md.read_text())
    print(f"report: {md} (+ comparison.csv, loss_curves.png, speed.png in {md.parent})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
