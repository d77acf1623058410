"""Two commits of the RoPE code side by side, from the rows ``bench.kernel`` and ``bench.step`` appended.

    python -m bench.compare --base d8fcb20                 # the newest other commit on the same GPU as the head
    python -m bench.compare --base d8fcb20 --head 1a2b3c4 --gpu "NVIDIA H200"

Kernels: per configuration, implementation and direction that both commits measured, their % of copy bandwidth
and the difference; ``SLOWER`` where the head is more than ``--points`` (2) below the base at a head size public
models use (64, 80, 96, 128, 160, 192, 256). Then the head's ``triton_v4`` against Liger-Kernel (same GPU): ``BELOW
LIGER`` wherever it is under Liger's row of the same configuration, at any head dim. Training steps: each commit's
``triton_v4`` step against ``rope=torch`` of its own run (paired rounds), and the head's ``SLOWER`` where its
interval lies wholly above the base's. Rows timed under ``--tuning`` (launch candidates) are listed apart, beside
the base's, the default plan's and Liger's. Where a configuration was measured more than once, the head's newest row
counts, and the base's (and Liger's) timed nearest to it: the row of the same run where one timed both; a note says
how many compared rows were timed more than an hour apart. The default ``--head`` is the newest commit in this
checkout's history with rows of that GPU (by date without git); one older than ``--base`` gets a note.
``--base`` and ``--head`` take the start of one commit's hash (``d8fcb20`` also takes the rows of ``d8fcb20-dirty``);
the start of several is refused, naming them. Only reads the CSVs; exit 0 whatever it finds (the flags are for a
reader); a file or option it cannot compare (a row cut short, a word in a number's cell) is one line and exit 2.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import functools
import subprocess
from pathlib import Path

from bench import harness
from bench.kernel import COMMON_HEAD_DIMS
from llm.cli import OneLineParser

#: What makes two kernel rows the same measurement (``heads``: :func:`bench.harness.heads_of`, added on reading).
CONFIG_KEYS = ("head_dim", "variant", "layout", "rotary_dim", "positions", "elements", "dtype", "heads")


@functools.cache
def commit_ages() -> dict[str, int]:
    """Short hash -> place in this checkout's history (larger newer); empty without git (the dates decide)."""
    try:
        out = subprocess.run(["git", "rev-list", "--reverse", "--abbrev=7", "--abbrev-commit", "HEAD"],
                             cwd=harness.ROOT, capture_output=True, text=True, check=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    return {h[:7]: i for i, h in enumerate(out.split())}


def nearest(rows: list[dict], key: tuple[str, ...], to: dict[tuple, dict]) -> dict[tuple, dict]:
    """For each ``key`` value of ``to``, the row of ``rows`` timed nearest to ``to``'s row (the later of two as near):
    a commit's rows from the run that timed the other one, where one did. Why: each commit's newest rows come from
    different runs where one of them was timed again later, and rows of two runs differ by the machine as much as by
    the code (docs/benchmarks.md, "Two commits in one GPU run")."""
    by_key: dict[tuple, list[dict]] = {}
    for r in rows:
        by_key.setdefault(tuple(r[k] for k in key), []).append(r)
    out = {}
    for k, target in to.items():
        if k in by_key:
            when = _time(target)
            out[k] = min(by_key[k], key=lambda r: (abs((_time(r) - when).total_seconds()), -_time(r).timestamp()))
    return out


def _time(row: dict) -> datetime.datetime:
    return datetime.datetime.fromisoformat(row["date"].replace("Z", "+00:00"))


def apart_note(pairs: list[tuple[dict, dict]], base: str, head: str) -> list[str]:
    """A line where some compared rows were timed more than an hour apart (in different runs), else none."""
    apart = sum(abs((_time(a) - _time(b)).total_seconds()) > 3600 for a, b in pairs)
    if not apart:
        return []
    return [f"note: {apart} of {len(pairs)} compared rows of {base} and {head} were timed more than an hour apart, "
            "in different runs: the machine differs between runs by as much as the code (bench/compare_commits.sh "
            "times both in one)"]


def latest(rows: list[dict], key: tuple[str, ...], age: dict[str, int] | None = None) -> dict[tuple, dict]:
    """The newest row of each ``key`` value: of the newest commit where ``age`` ranks commits (short hash -> its
    place in the history, larger newer; commits it lacks come first), then by date (a later row of a date wins)."""
    def newness(r: dict) -> tuple:
        return (age.get(r["commit"].removesuffix("-dirty")[:7], -1) if age else 0, r["date"])

    out: dict[tuple, dict] = {}
    for r in sorted(rows, key=newness):
        out[tuple(r[k] for k in key)] = r
    return out


def commit_of(row: dict) -> str:
    """A row's commit, ``-dirty`` left off: ``d8fcb20-dirty`` (its ``rope/`` edited) counts as ``d8fcb20``."""
    return row["commit"].removesuffix("-dirty")


def commit_rows(rows: list[dict], commit: str, gpu: str) -> list[dict]:
    """Rows of ``gpu`` of ``commit`` (as :func:`resolve` names it; ``d8fcb20`` matches ``d8fcb20-dirty``)."""
    return [r for r in rows if r["gpu"] == gpu and commit_of(r) == commit]


def resolve(option: str, prefix: str, rows: list[dict], gpu: str, parser: argparse.ArgumentParser) -> str:
    """The one commit of ``gpu``'s rows that ``prefix`` names: itself where a row has it whole, else the one it
    starts. A prefix of several commits is the parser's one-line error listing them: their rows mixed under one
    name would be no comparison of two commits."""
    commits = sorted({commit_of(r) for r in rows if r["gpu"] == gpu and r["commit"].startswith(prefix)})
    if prefix in commits:
        return prefix
    if len(commits) > 1:
        parser.error(f"{option} {prefix} is the start of {len(commits)} commits of {gpu}: {', '.join(commits)}; "
                     "give more of the hash")
    return commits[0] if commits else prefix


def pick_head(rows: list[dict], base: str, gpu: str, age: dict[str, int]) -> str | None:
    """The newest other commit with rows of ``gpu``: by this checkout's history where it knows the commits (a later
    run may time an older commit again), else by date."""
    others = sorted((r for r in rows if r["gpu"] == gpu and commit_of(r) != base),
                    key=lambda r: (age.get(commit_of(r)[:7], -1), r["date"]))
    return commit_of(others[-1]) if others else None


def kernel_lines(rows: list[dict], base: str, head: str, gpu: str, points: float, flags_only: bool) -> list[str]:
    key = ("implementation", "direction", *CONFIG_KEYS)
    plain = [r for r in rows if not r["tuning"]]
    new = latest(commit_rows(plain, head, gpu), key)
    old = nearest(commit_rows(plain, base, gpu), key, new)
    lines = [f"kernels on {gpu}: % of copy bandwidth, {base} -> {head}", "",
             f"{'impl':12s}{'dir':9s}{'D':>5s} {'variant':8s}{'layout':12s}{'rot':>5s} {'positions':12s}{'heads':>6s}"
             f"{'base':>7s}{'head':>7s}{'diff':>7s}"]
    flagged = 0
    for k in sorted(set(old) & set(new), key=lambda k: (k[0] != "triton_v4", k[0], int(k[2]), k[3:], k[1])):
        a, b = float(old[k]["pct_copy_bw"]), float(new[k]["pct_copy_bw"])
        flag = "  SLOWER" if b < a - points and int(k[2]) in COMMON_HEAD_DIMS else ""
        flagged += bool(flag)
        if flag or not flags_only:
            lines.append(f"{k[0]:12s}{k[1]:9s}{k[2]:>5s} {k[3]:8s}{k[4]:12s}{k[5]:>5s} {k[6]:12s}{k[9]:>6s}"
                         f"{a:7.1f}{b:7.1f}{b - a:+7.1f}{flag}")
    lines += ["", f"{len(set(old) & set(new))} rows in both; {flagged} more than {points:g} points slower "
                  f"at D in {', '.join(map(str, COMMON_HEAD_DIMS))}",
              *apart_note([(old[k], new[k]) for k in set(old) & set(new)], base, head), ""]
    mine = latest([r for r in commit_rows(plain, head, gpu) if r["implementation"] == "triton_v4"], key[1:])
    liger = nearest([r for r in plain if r["gpu"] == gpu and r["implementation"] == "liger"], key[1:], mine)
    below = [(k, float(mine[k]["pct_copy_bw"]), float(liger[k]["pct_copy_bw"])) for k in sorted(
        set(mine) & set(liger), key=lambda k: (int(k[1]), k[2:], k[0]))]
    low = [f"  D={k[1]} {k[2]} {k[0]} {k[8]} heads: triton_v4 {m:.2f} < liger {g:.2f}  BELOW LIGER"
           for k, m, g in below if m < g]
    lines += [f"triton_v4 at {head} against Liger-Kernel: {len(below)} rows, {len(low)} below it",
              *apart_note([(mine[k], liger[k]) for k, _, _ in below], head, "liger"), *low]
    return lines


def candidate_lines(rows: list[dict], base: str, head: str, gpu: str) -> list[str]:
    """The head's ``triton_v4`` rows timed under ``--tuning`` (launch candidates), each beside the same configuration's
    row of the base, of the head's default plan and of Liger-Kernel (``-``: not measured)."""
    key = ("implementation", "direction", *CONFIG_KEYS)
    tuned = latest([r for r in commit_rows(rows, head, gpu) if r["tuning"]], (*key, "tuning"))
    plain = [r for r in rows if not r["tuning"]]
    new = latest(commit_rows(plain, head, gpu), key)
    old = nearest(commit_rows(plain, base, gpu), key, new)
    liger = nearest([r for r in plain if r["gpu"] == gpu and r["implementation"] == "liger"], key[1:],
                    {k[1:]: r for k, r in new.items() if k[0] == "triton_v4"})
    lines = [f"launch candidates at {head}: % of copy bandwidth", "",
             f"{'dir':9s}{'D':>5s} {'variant':8s}{'rot':>5s} {'tuning':30s}{'base':>7s}{'head':>7s}{'liger':>7s}"
             f"{'cand':>7s}"]
    for k, r in sorted(tuned.items(), key=lambda kr: (int(kr[0][2]), kr[0][3:], kr[0][1])):
        cells = (f"{float(d[c]['pct_copy_bw']):7.1f}" if c in d else f"{'-':>7s}"
                 for d, c in ((old, k[:-1]), (new, k[:-1]), (liger, k[1:-1])))
        lines.append(f"{k[1]:9s}{k[2]:>5s} {k[3]:8s}{k[5]:>5s} {k[-1]:30s}{''.join(cells)}"
                     f"{float(r['pct_copy_bw']):7.1f}")
    return [*lines, ""] if tuned else []


def step_lines(rows: list[dict], base: str, head: str, gpu: str) -> list[str]:
    key = ("model", "shape", "mode", "implementation")
    new = latest(commit_rows(rows, head, gpu), key)
    old = nearest(commit_rows(rows, base, gpu), key, new)
    title = f"training steps on {gpu}: triton_v4 against rope=torch of the same run [95% CI], {base} -> {head}"

    def cell(r: dict) -> tuple[str, float, float]:
        pct, lo, hi = (float(r[c]) if r[c] else float("nan") for c in ("vs_torch_pct", "vs_torch_lo", "vs_torch_hi"))
        return f"{float(r['time_us']) / 1e3:8.2f} ms {pct:+6.2f}% [{lo:+.2f}, {hi:+.2f}]", lo, hi

    lines = []
    for k in sorted(set(old) & set(new)):
        if k[3] != "triton_v4":
            continue
        (a, _, a_hi), (b, b_lo, _) = cell(old[k]), cell(new[k])
        flag = "  SLOWER" if b_lo > a_hi else ""
        lines.append(f"{k[0]:11s}{k[2]:8s} base {a}   head {b}{flag}")
    # a heading with nothing under it would read as a comparison that found nothing wrong
    if not lines:
        return [f"training steps on {gpu}: no triton_v4 step of both {base} and {head}"]
    both = [k for k in set(old) & set(new) if k[3] == "triton_v4"]
    return [title, "", *lines, *apart_note([(old[k], new[k]) for k in both], base, head)]


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(prog="python -m bench.compare", description=__doc__,
                      formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base", required=True, help="the older commit (a prefix of the commit column naming one commit)")
    p.add_argument("--head", default=None, help="the newer commit (default: the newest other one on that GPU)")
    p.add_argument("--gpu", default=None, help="the GPU's name as the rows give it (default: the newest row's)")
    p.add_argument("--points", type=float, default=2.0, help="how far below the base is flagged (default 2)")
    p.add_argument("--flags-only", action="store_true", help="of the kernels' comparison, print the flagged lines only")
    p.add_argument("--kernel-csv", type=Path, default=harness.RESULTS / "kernel.csv",
                   help="bench.kernel's rows (default bench/results/kernel.csv)")
    p.add_argument("--step-csv", type=Path, default=harness.RESULTS / "step.csv",
                   help="bench.step's rows (default bench/results/step.csv)")
    args = p.parse_args(argv)
    from bench.kernel import COLUMNS as KERNEL_COLUMNS
    from bench.step import COLUMNS as STEP_COLUMNS

    # a file that is not there, empty, or of another benchmark, is a wrong option: said before reading it, not a
    # traceback or an empty comparison
    for option, path, columns in (("--kernel-csv", args.kernel_csv, KERNEL_COLUMNS),
                                  ("--step-csv", args.step_csv, STEP_COLUMNS)):
        if path.is_dir():
            p.error(f"{option} {path}: a folder; name bench.{option[2:-4]}'s CSV file")
        if not path.is_file():
            p.error(f"{option} {path}: no such file")
        with open(path, newline="") as f:
            header = next(csv.reader(f), [])
        if not header:
            p.error(f"{option} {path}: an empty file, not even bench.{option[2:-4]}'s header")
        if header != list(columns):
            p.error(f"{option} {path}: its columns are not bench.{option[2:-4]}'s")
    for option, commit in (("--base", args.base), ("--head", args.head)):
        if commit is not None and not commit.strip():
            p.error(f"{option} takes a commit (a prefix of the commit column), got an empty one")
    if not 0 <= args.points < float("inf"):
        p.error(f"--points takes a number of points, 0 or more, got {args.points:g}")
    # the cells read as numbers: a row cut short or a word in one is refused naming its line, not misread
    kernel_rows = harness.read_rows(args.kernel_csv, numeric=("head_dim", "pct_copy_bw"), integer=("head_dim",),
                                    forms=("shape",))
    step_rows = harness.read_rows(args.step_csv, numeric=("time_us", "vs_torch_pct", "vs_torch_lo", "vs_torch_hi"))
    kernel_rows = [{**r, "heads": harness.heads_of(r)} for r in kernel_rows]
    if not kernel_rows and not step_rows:
        p.error(f"no rows in {args.kernel_csv} or {args.step_csv}")
    measured = [r for r in kernel_rows + step_rows if r["gpu"] != harness.SMOKE_GPU] or kernel_rows + step_rows
    gpu = args.gpu or max(measured, key=lambda r: r["date"])["gpu"]
    base = resolve("--base", args.base, kernel_rows + step_rows, gpu, p)
    age = commit_ages()
    head = resolve("--head", args.head, kernel_rows + step_rows, gpu, p) if args.head else \
        pick_head(kernel_rows + step_rows, base, gpu, age)
    if head is None or not commit_rows(kernel_rows + step_rows, base, gpu):
        p.error(f"{gpu} has no rows of both --base {args.base} and another commit")
    if head == base:
        p.error(f"--head {args.head} is --base's commit {base}: name two commits")
    if not commit_rows(kernel_rows + step_rows, head, gpu):
        p.error(f"--head {head}: {gpu} has no rows of that commit")
    older = base[:7] in age and head[:7] in age and age[head[:7]] < age[base[:7]]
    print("\n".join([*([f"note: --head {head} is older than --base {base} in this checkout's history: SLOWER and "
                        "BELOW LIGER judge the older commit", ""] if older else []),
                     *kernel_lines(kernel_rows, base, head, gpu, args.points, args.flags_only), "",
                     *([] if args.flags_only else candidate_lines(kernel_rows, base, head, gpu)),
                     *step_lines(step_rows, base, head, gpu)]))
    return 0


if __name__ == "__main__":
    harness.run_main(main, "bench.compare")
