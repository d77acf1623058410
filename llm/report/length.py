"""Length generalization: perplexity against evaluation length, per RoPE variant × scaling, over seeds.

Reads what ``python -m llm.eval_lengths`` wrote into run dirs (``eval_lengths/<label>.json``) and writes,
into a sweep dir (or any dir):

* ``length_report.md`` - perplexity per variant × scaling × length (mean over seeds with a 95% CI over
  seeds), the Δ val loss of each scaling against no scaling for the same variant, length and seed
  (paired by seed where both exist, else Welch), and the Δ of each variant against the reference
  variant (the float32 partial ``torch`` rotation, the project's reference) for the same scaling and
  length: the question the sweep exists for, whether partial rotation extrapolates better than full;
* ``length_report.csv`` - the same, one row per (variant, scaling, length), full precision;
* ``length_curves.png`` - perplexity against evaluation length (log-x, log-y), one line per variant ×
  scaling, the seeds' range as a band;
* ``position_loss.png`` - mean loss against position at the longest length, one line per variant × scaling.

Why perplexity is averaged through the loss: a perplexity is exp(loss), and losses are what is
(close to) normally distributed over seeds, so the mean and its Student-t CI are taken over the seeds'
val losses and exponentiated: the perplexity reported is the geometric mean of the seeds'
perplexities, and its CI the exponentiated CI of the mean loss. A length where one seed's perplexity
explodes then does not drown the others.
"""

from __future__ import annotations

import csv
import json
import logging
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llm.fileio import atomic_open, write_text_atomic
from llm.report.analysis import DEFAULT_MARGIN
from llm.report.errors import NoRunsError
from llm.report.markdown import fmt, md_table, signed
from llm.report.plots import _colors, _new_figure, _save
from llm.report.runs import PathLike, Run, as_float, load_all_runs
from llm.report.stats import WELCH, Comparison, compare_paired, compare_unpaired, t_interval

log = logging.getLogger(__name__)

EVAL_DIR = "eval_lengths"
MD_FILE = "length_report.md"
CSV_FILE = "length_report.csv"
CURVES_FILE = "length_curves.png"
POSITION_FILE = "position_loss.png"
#: The scaling every other one is compared with.
NO_SCALING = "none"
#: The variant every other one is compared with, when the runs have it (``rope.base.label`` of the reference).
REFERENCE_VARIANT = "torch (partial, float32)"
CSV_COLUMNS = ("variant", "scaling", "length", "n", "seeds", "val_loss_mean", "val_loss_ci_low", "val_loss_ci_high",
               "val_ppl", "val_ppl_ci_low", "val_ppl_ci_high", "val_ppl_min", "val_ppl_max", "val_acc_mean",
               "loss_beyond_train_mean", "delta_vs_none", "delta_ci_low", "delta_ci_high", "delta_p", "pairing",
               "paired_seeds", "reference_variant", "delta_vs_reference_variant", "ref_delta_ci_low",
               "ref_delta_ci_high", "ref_delta_p", "ref_pairing")


@dataclass
class LengthResult:
    """One ``eval_lengths/<label>.json``: a run evaluated with one scaling at several lengths."""

    path: Path
    data: dict[str, Any]

    @property
    def variant(self) -> str:
        return str(self.data.get("rope_label") or self.data.get("rope") or "?")

    @property
    def scaling(self) -> str:
        return str(self.data.get("scaling_label") or NO_SCALING)

    @property
    def seed(self) -> int | None:
        s = self.data.get("seed")
        return s if isinstance(s, int) and not isinstance(s, bool) else None

    def at(self, length: int) -> dict | None:
        return next((m for m in self.data.get("lengths", []) if m.get("length") == length), None)

    @property
    def lengths(self) -> list[int]:
        return sorted(int(m["length"]) for m in self.data.get("lengths", []) if "length" in m)


def _per_seed(results: Sequence[LengthResult], length: int, key: str) -> dict[int | None, float]:
    """Seed -> value of ``key`` at ``length``; several results of one seed are averaged."""
    acc: dict[int | None, list[float]] = {}
    for r in results:
        m = r.at(length)
        v = as_float(m.get(key)) if m else None
        if v is not None and not math.isnan(v):
            acc.setdefault(r.seed, []).append(v)
    return {s: statistics.fmean(v) for s, v in acc.items()}


@dataclass
class Cell:
    """One (variant, scaling, length): the seeds' val losses and their statistics."""

    variant: str
    scaling: str
    length: int
    losses: dict[int | None, float]  # seed -> val loss
    acc: dict[int | None, float]
    beyond: dict[int | None, float]
    delta: Comparison | None = None  # against NO_SCALING, same variant and length
    paired_seeds: list[int] = field(default_factory=list)
    vs_reference: Comparison | None = None  # against REFERENCE_VARIANT, same scaling and length

    @property
    def n(self) -> int:
        return len(self.losses)

    @property
    def loss_ci(self) -> tuple[float, float | None, float | None]:
        """Mean val loss over seeds and its 95% Student-t CI (None with one seed)."""
        return t_interval(list(self.losses.values()))

    @property
    def ppl(self) -> tuple[float, float | None, float | None]:
        """exp of :attr:`loss_ci`: the geometric mean perplexity over seeds and its 95% CI."""
        return tuple(None if v is None else _exp(v) for v in self.loss_ci)  # type: ignore[return-value]

    @property
    def ppl_range(self) -> tuple[float, float]:
        return _exp(min(self.losses.values())), _exp(max(self.losses.values()))


def _exp(v: float) -> float:
    return math.exp(v) if v < 700 else float("inf")


def _pairing(a: dict, b: dict) -> list | None:
    """Seeds to pair on (shared by both, at least two, or the only seed of both), else None (Welch)."""
    common = sorted(s for s in a.keys() & b.keys() if s is not None)
    if len(common) >= 2 or (common and set(a) == set(b)):
        return common
    return None


def _compare(cell: Cell, ref: Cell) -> tuple[Comparison, list[int]]:
    """Δ val loss of ``cell`` against ``ref``: paired by seed where they pair (and the seeds), else Welch."""
    seeds = _pairing(cell.losses, ref.losses)
    if seeds is not None:
        return compare_paired([cell.losses[s] for s in seeds], [ref.losses[s] for s in seeds], DEFAULT_MARGIN,
                              lower_is_better=True), seeds
    return compare_unpaired(list(cell.losses.values()), list(ref.losses.values()), DEFAULT_MARGIN,
                            lower_is_better=True), []


@dataclass
class LengthReport:
    """Everything the writers need, computed once."""

    inputs: list[str]
    runs: list[Run]
    results: list[LengthResult]
    cells: list[Cell]
    unreadable: list[str]

    @property
    def lengths(self) -> list[int]:
        return sorted({c.length for c in self.cells})

    @property
    def groups(self) -> list[tuple[str, str]]:
        """(variant, scaling) in table order: variants by name, no scaling first within a variant."""
        keys = {(c.variant, c.scaling) for c in self.cells}
        return sorted(keys, key=lambda k: (k[0], k[1] != NO_SCALING, k[1]))

    def cell(self, variant: str, scaling: str, length: int) -> Cell | None:
        return next((c for c in self.cells if (c.variant, c.scaling, c.length) == (variant, scaling, length)), None)

    @property
    def unevaluated(self) -> list[Run]:
        done = {r.path.parent.parent.resolve() for r in self.results}
        return [r for r in self.runs if r.path.resolve() not in done]

    def distinct(self, key: str) -> list:
        return sorted({r.data.get(key) for r in self.results if r.data.get(key) is not None}, key=str)


def load_length_results(runs: Sequence[Run]) -> tuple[list[LengthResult], list[str]]:
    """Every ``eval_lengths/*.json`` of ``runs``, and the files that could not be read (named, not fatal)."""
    results, unreadable = [], []
    for run in runs:
        for path in sorted((run.path / EVAL_DIR).glob("*.json")):
            try:
                data = json.loads(path.read_text())
            except (OSError, ValueError) as e:
                unreadable.append(f"{path} ({type(e).__name__})")
                continue
            if isinstance(data, dict) and isinstance(data.get("lengths"), list):
                results.append(LengthResult(path, data))
            else:
                unreadable.append(f"{path} (not an eval_lengths result)")
    return results, unreadable


def build_length_report(paths: Sequence[PathLike]) -> LengthReport:
    """Load the runs under ``paths`` and their length evaluations; compute every cell's statistics.

    Raises :class:`NoRunsError` when no run under ``paths`` holds an ``eval_lengths`` result, and
    FileNotFoundError for a path that does not exist.
    """
    runs = load_all_runs(paths)
    results, unreadable = load_length_results(runs)
    if not results:
        raise NoRunsError(f"no {EVAL_DIR}/*.json under: {', '.join(map(str, paths))} ({len(runs)} run dir(s); "
                          "python -m llm.eval_lengths run=<run dir> writes them)")
    by_group: dict[tuple[str, str], list[LengthResult]] = {}
    for r in results:
        by_group.setdefault((r.variant, r.scaling), []).append(r)
    cells = []
    for (variant, scaling), group in by_group.items():
        for length in sorted({L for r in group for L in r.lengths}):
            losses = _per_seed(group, length, "val_loss")
            if losses:
                cells.append(Cell(variant, scaling, length, losses, _per_seed(group, length, "val_acc"),
                                  _per_seed(group, length, "loss_beyond_train")))
    report = LengthReport([str(p) for p in paths], runs, results, cells, unreadable)
    for c in cells:
        ref = report.cell(c.variant, NO_SCALING, c.length)
        if c.scaling != NO_SCALING and ref is not None:
            c.delta, c.paired_seeds = _compare(c, ref)
        ref = report.cell(REFERENCE_VARIANT, c.scaling, c.length)
        if c.variant != REFERENCE_VARIANT and ref is not None:
            c.vs_reference = _compare(c, ref)[0]
    return report


# -- writers ----------------------------------------------------------------------------------------------
def _ppl_text(c: Cell | None) -> str:
    if c is None:
        return "-"
    mean, lo, hi = c.ppl
    digits = 2 if mean < 1000 else 0
    ci = "n=1" if lo is None else f"[{fmt(lo, digits)}, {fmt(hi, digits)}]"
    return f"{fmt(mean, digits)} {ci}"


def _delta_text(c: Cell | None, against_variant: bool = False) -> str:
    d = None if c is None else (c.vs_reference if against_variant else c.delta)
    if d is None:
        return "-"
    ci = "n=1" if d.ci is None else f"[{signed(d.ci[0])}, {signed(d.ci[1])}]"
    return f"{signed(d.delta)} {ci}" + (" (Welch)" if d.method == WELCH else "")


def _seeds(values: dict) -> str:
    return " ".join(str(s) for s in sorted(values, key=lambda s: (s is None, s)))


def _warnings(report: LengthReport) -> list[str]:
    """What makes numbers of the report not comparable: other token budgets, results of one seed averaged."""
    out = []
    budgets = report.distinct("tokens")
    if len(budgets) > 1:
        out.append(f"**Warning**: the evaluations used different val token budgets ({', '.join(map(str, budgets))}); "
                   "numbers from different budgets are not on the same tokens.")
    seen: dict[tuple, int] = {}
    for r in report.results:
        key = (r.variant, r.scaling, r.seed)
        seen[key] = seen.get(key, 0) + 1
    dup = [f"{v} · {s} seed {seed}" for (v, s, seed), k in seen.items() if k > 1]
    if dup:
        out.append(f"**Note**: several evaluations of one seed were averaged: {'; '.join(dup)}.")
    return [line for w in out for line in (w, "")]


def length_markdown(report: LengthReport) -> str:
    lengths = report.lengths
    header = ["Variant", "Scaling", "n", *map(str, lengths)]
    n_runs = len({r.path.parent.parent for r in report.results})
    lines = [
        "# Length generalization",
        "",
        f"{len(report.runs)} run(s), {n_runs} evaluated ({len(report.results)} evaluation(s)); inputs: "
        + ", ".join(f"`{p}`" for p in report.inputs),
        "",
        f"- training length (model.seq_len): {', '.join(map(str, report.distinct('train_seq_len'))) or 'n/a'}",
        f"- val tokens at every length (the same tokens): {', '.join(map(str, report.distinct('tokens'))) or 'n/a'}",
        f"- scalings: {', '.join(dict.fromkeys(s for _, s in report.groups))} "
        "(`factor L/N`: the factor L/N at each length L, at least 1)",
        "",
        *_warnings(report),
        "Perplexity = exp(mean val loss over seeds), the geometric mean of the seeds' perplexities; 95% CI = exp "
        "of the Student-t CI of the mean loss over seeds (`n=1`: one seed, no CI). n = seeds.",
        "",
        "## Perplexity by evaluation length",
        "",
    ]
    rows = []
    for variant, scaling in report.groups:
        cells = [report.cell(variant, scaling, L) for L in lengths]
        n = max((c.n for c in cells if c is not None), default=0)
        rows.append([variant, scaling, str(n), *(_ppl_text(c) for c in cells)])
    lines += md_table(header, rows)
    compared = [(v, s) for v, s in report.groups if s != NO_SCALING]
    lines += ["", "## Δ val loss against no scaling", "",
              "Scaling − none, same variant and length, paired by seed (nats; negative: the scaling helps); "
              "95% CI; `(Welch)` where the seeds do not pair.", ""]
    if compared:
        lines += md_table(["Variant", "Scaling", *map(str, lengths)],
                          [[v, s, *(_delta_text(report.cell(v, s, L)) for L in lengths)] for v, s in compared])
    else:
        lines.append("(no scaling other than none was evaluated)")
    against = [(v, s) for v, s in report.groups if v != REFERENCE_VARIANT
               and any(report.cell(v, s, L) and report.cell(v, s, L).vs_reference for L in lengths)]
    if against:
        lines += ["", f"## Δ val loss against {REFERENCE_VARIANT}", "",
                  f"Variant − {REFERENCE_VARIANT}, same scaling and length, paired by seed (nats; negative: the "
                  "variant does better); 95% CI; `(Welch)` where the seeds do not pair. A variant evaluated "
                  "without some scaling (none rotates nothing to scale) has no row for it.", ""]
        lines += md_table(["Variant", "Scaling", *map(str, lengths)],
                          [[v, s, *(_delta_text(report.cell(v, s, L), True) for L in lengths)] for v, s in against])
    missing = report.unevaluated
    if missing or report.unreadable:
        lines += ["", "## Not evaluated", ""]
        lines += [f"- `{r.name}` ({r.label}, seed {r.seed}): {r.status}, no {EVAL_DIR}/*.json" for r in missing]
        lines += [f"- unreadable: `{u}`" for u in report.unreadable]
    lines += ["", "## Plots", "", f"![perplexity against evaluation length]({CURVES_FILE})", "",
              f"![loss against position at the longest length]({POSITION_FILE})", ""]
    return "\n".join(lines)


def _csv_rows(report: LengthReport) -> list[list[Any]]:
    rows = []
    for variant, scaling in report.groups:
        for L in report.lengths:
            c = report.cell(variant, scaling, L)
            if c is None:
                continue
            mean, lo, hi = c.loss_ci
            ppl, plo, phi = c.ppl
            d = c.delta
            rows.append([variant, scaling, L, c.n, _seeds(c.losses), mean, lo, hi, ppl, plo, phi, *c.ppl_range,
                         statistics.fmean(c.acc.values()) if c.acc else None,
                         statistics.fmean(c.beyond.values()) if c.beyond else None,
                         None if d is None else d.delta, None if d is None or d.ci is None else d.ci[0],
                         None if d is None or d.ci is None else d.ci[1], None if d is None else d.p,
                         None if d is None else ("unpaired (Welch)" if d.method == WELCH else "paired"),
                         " ".join(map(str, c.paired_seeds)), *_reference_cells(c)])
    return rows


def _reference_cells(c: Cell) -> list[Any]:
    r = c.vs_reference
    if r is None:
        return [None] * 6
    return [REFERENCE_VARIANT, r.delta, None if r.ci is None else r.ci[0], None if r.ci is None else r.ci[1], r.p,
            "unpaired (Welch)" if r.method == WELCH else "paired"]


def write_length_csv(report: LengthReport, path: Path) -> None:
    with atomic_open(path) as f:
        w = csv.writer(f)
        w.writerow(CSV_COLUMNS)
        for row in _csv_rows(report):
            w.writerow(["" if v is None else (repr(v) if isinstance(v, float) else v) for v in row])


_STYLES = ("-", "--", "-.", ":", (0, (5, 1, 1, 1, 1, 1)), (0, (1, 3)))


def _styles(report: LengthReport) -> dict[tuple[str, str], tuple[Any, Any]]:
    """A color per variant and a line style per scaling, so each family reads at a glance."""
    variants = list(dict.fromkeys(v for v, _ in report.groups))
    scalings = list(dict.fromkeys(s for _, s in sorted(report.groups, key=lambda g: (g[1] != NO_SCALING, g[1]))))
    colors = dict(zip(variants, _colors(len(variants)), strict=True))
    return {(v, s): (colors[v], _STYLES[scalings.index(s) % len(_STYLES)]) for v, s in report.groups}


def _train_lengths(report: LengthReport) -> list[int]:
    return [int(t) for t in report.distinct("train_seq_len") if isinstance(t, int)]


def plot_length_curves(report: LengthReport, path: Path) -> None:
    """Perplexity against evaluation length (log-x, log-y): geometric mean over seeds, the seeds' range as a band."""
    from matplotlib.ticker import FuncFormatter

    fig = _new_figure((9, 5))
    ax = fig.subplots()
    for (variant, scaling), (color, style) in _styles(report).items():
        cells = [c for L in report.lengths if (c := report.cell(variant, scaling, L)) is not None]
        if not cells:
            continue
        xs = [c.length for c in cells]
        n = max(c.n for c in cells)
        ax.plot(xs, [c.ppl[0] for c in cells], color=color, linestyle=style, marker="o", markersize=3,
                label=f"{variant} · {scaling} (n={n})")
        ax.fill_between(xs, [c.ppl_range[0] for c in cells], [c.ppl_range[1] for c in cells], color=color,
                        alpha=0.12, linewidth=0)
    for t in _train_lengths(report):
        ax.axvline(t, color="gray", linestyle=":", linewidth=1)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    plain = FuncFormatter(lambda v, _: f"{v:,.4g}")  # 812 rather than 8.12x10^2
    ax.yaxis.set_major_formatter(plain)
    low, high = ax.get_ylim()
    if 0 < low and high / low < 10:  # within a decade the minor ticks are the only ones: label them
        ax.yaxis.set_minor_formatter(plain)
    ax.set_xticks(report.lengths, [str(L) for L in report.lengths])
    ax.set(xlabel="evaluation length (tokens; dotted: training length)", ylabel="val perplexity",
           title="perplexity against evaluation length (geometric mean over seeds; band: seeds' range)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    _save(fig, path)


def _mean_buckets(results: Sequence[LengthResult], length: int) -> list[tuple[float, float]]:
    """(bucket mid-position, loss averaged over seeds) at ``length``, over the buckets every result has."""
    per_start: dict[int, tuple[int, list[float]]] = {}
    for r in results:
        m = r.at(length)
        for b in (m or {}).get("buckets", []):
            loss = as_float(b.get("loss"))
            if loss is not None:
                per_start.setdefault(int(b["start"]), (int(b["end"]), []))[1].append(loss)
    return [((s + e) / 2, statistics.fmean(v)) for s, (e, v) in sorted(per_start.items())]


def plot_position_loss(report: LengthReport, path: Path) -> None:
    """Mean val loss against position at the longest length evaluated: where each variant × scaling breaks."""
    longest = max(report.lengths)
    fig = _new_figure((9, 5))
    ax = fig.subplots()
    drawn = 0
    for (variant, scaling), (color, style) in _styles(report).items():
        group = [r for r in report.results if (r.variant, r.scaling) == (variant, scaling)]
        points = _mean_buckets(group, longest)
        if not points:
            continue
        drawn += 1
        n = len({r.seed for r in group if r.at(longest)})
        ax.plot([p[0] for p in points], [p[1] for p in points], color=color, linestyle=style,
                label=f"{variant} · {scaling} (n={n})")
    for t in _train_lengths(report):
        ax.axvline(t, color="gray", linestyle=":", linewidth=1)
    ax.set(xlabel="position (dotted: training length)", ylabel="mean val loss (nats)",
           title=f"loss against position at length {longest} (mean over seeds)")
    ax.grid(alpha=0.3)
    if drawn:
        ax.legend(fontsize=7)
    _save(fig, path)


def write_length_report(report: LengthReport, out_dir: PathLike) -> Path:
    """Write the Markdown, CSV and both plots into ``out_dir``; returns the Markdown's path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    md = out / MD_FILE
    write_text_atomic(md, length_markdown(report))
    write_length_csv(report, out / CSV_FILE)
    plot_length_curves(report, out / CURVES_FILE)
    plot_position_loss(report, out / POSITION_FILE)
    return md
