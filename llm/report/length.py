"""Length generalization: the loss beyond the training length and its degradation, per RoPE variant × scaling ×
evaluation length, over seeds.

Reads what ``python -m llm.eval_lengths`` wrote into run dirs (``eval_lengths/<label>.json``,
:mod:`llm.evaluation.metrics` defines each number) and writes, into a sweep dir (or any dir):

* ``length_report.md`` - per variant × scaling × length, over seeds: the **degradation** (loss at positions
  >= T minus the run's own sliding-window baseline on the same targets; it removes each seed's level), the
  **loss beyond T**, the **gain over the sliding window** (negative: the model uses context longer than T)
  and, beside them, the whole-window perplexity; then the paired comparisons: each scaling against no
  scaling for the same variant (beyond T, and inside T: what the scaling costs the short context), each
  variant against the reference variant (the float32 partial ``torch`` rotation) trained with the same packing
  for the same scaling, and document-aligned training against random windows for the same rotation and scaling
  (degradation, loss beyond T, whole window);
* ``length_report.csv`` - every statistic of every metric, one row per (variant, scaling, length);
* ``length_curves.png`` - degradation, loss beyond T and whole-window perplexity against length;
* ``position_loss.png`` - mean loss against position at the longest length, with each variant's own
  sliding-window baseline.

**Spread and CI are two things**, and the report names each: ``± sd`` is the seeds' standard deviation (how
much one run varies), ``[lo, hi]`` the 95% Student-t confidence interval of the mean over seeds (how well
the mean is known: about ``2.8 sd / sqrt(n)`` wide on each side for 5 seeds). Paired Δs are taken seed by
seed (Welch's test where the seeds do not pair) with the 95% CI of the mean Δ.

Perplexity is averaged through the loss: the mean and CI are taken over the seeds' losses and exponentiated
(the geometric mean of the seeds' perplexities), so one seed's exploding perplexity does not drown the rest.
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
from llm.report.mixed import check_same_data, config_differences, describe_differences
from llm.report.plots import _colors, _new_figure, _save
from llm.report.runs import DEFAULT_PACKING, PathLike, Run, as_float, load_all_runs, with_packing
from llm.report.stats import WELCH, Comparison, compare_paired, compare_unpaired, pairing_seeds, t_interval

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
#: How a variant trained with document-aligned windows is named (after its rotation's label).
DOCUMENTS_SUFFIX = with_packing("", "documents")


def packing_of(variant: str) -> str:
    """The training packing a variant's name carries: ``documents`` or ``random``."""
    return "documents" if variant.endswith(DOCUMENTS_SUFFIX) else "random"


def reference_for(variant: str) -> str:
    """The variant ``variant`` is compared with: the reference rotation trained with the same packing, so that a
    variant comparison never mixes in the packing's effect (that one has its own comparison)."""
    return REFERENCE_VARIANT + (DOCUMENTS_SUFFIX if packing_of(variant) == "documents" else "")


def random_counterpart(variant: str) -> str | None:
    """The random-windows variant of the same rotation a documents variant is compared with (None: not documents)."""
    return variant.removesuffix(DOCUMENTS_SUFFIX) if packing_of(variant) == "documents" else None
#: The per-run metrics the report reads from each length (:mod:`llm.evaluation.metrics`).
METRICS = ("val_loss", "val_acc", "loss_within_train", "loss_beyond_train", "sliding_beyond_train",
           "gain_beyond_train", "baseline_beyond_train", "degradation")
#: The metrics each comparison reports: against no scaling, and against another variant.
VS_NONE = ("loss_beyond_train", "loss_within_train", "val_loss")
VS_VARIANT = ("degradation", "loss_beyond_train", "val_loss")
SUMMARIZED = ("val_loss", "loss_within_train", "loss_beyond_train", "gain_beyond_train", "baseline_beyond_train",
              "degradation")


def _comparison_columns(prefix: str, metrics: Sequence[str]) -> list[str]:
    return [f"{prefix}_{m}_{s}" for m in metrics for s in ("delta", "ci_low", "ci_high", "p")]


CSV_COLUMNS = ("variant", "scaling", "length", "n", "seeds", "reference_len", "tokens", "documents",
               *(f"{m}_{s}" for m in SUMMARIZED for s in ("mean", "sd", "ci_low", "ci_high")),
               "val_ppl", "val_ppl_ci_low", "val_ppl_ci_high", "val_ppl_min", "val_ppl_max", "val_acc_mean",
               "vs_none_pairing", "vs_none_seeds", *_comparison_columns("vs_none", VS_NONE),
               "reference_variant", "vs_reference_pairing", *_comparison_columns("vs_reference", VS_VARIANT),
               "random_packing_variant", "vs_random_pairing", *_comparison_columns("vs_random", VS_VARIANT))


@dataclass
class LengthResult:
    """One ``eval_lengths/<label>.json``: a run evaluated with one scaling at several lengths."""

    path: Path
    data: dict[str, Any]

    @property
    def rotation(self) -> str:
        return str(self.data.get("rope_label") or self.data.get("rope") or "?")

    @property
    def variant(self) -> str:
        """The rotation's label, marked when the run trained on document-aligned windows."""
        return with_packing(self.rotation, str(self.data.get("packing") or DEFAULT_PACKING))

    @property
    def scaling(self) -> str:
        """The scaling's label, marked for a run fine-tuned from another (``train.init_from``)."""
        label = str(self.data.get("scaling_label") or NO_SCALING)
        if self.data.get("init_from"):
            label += f" · fine-tuned at {self.data.get('train_seq_len')}"
        return label

    @property
    def seed(self) -> int | None:
        s = self.data.get("seed")
        return s if isinstance(s, int) and not isinstance(s, bool) else None

    @property
    def reference_len(self) -> int | None:
        t = self.data.get("reference_len", self.data.get("train_seq_len"))
        return t if isinstance(t, int) else None

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


@dataclass(frozen=True)
class Summary:
    """A metric over seeds: mean, the seeds' standard deviation (spread) and the 95% CI of the mean."""

    n: int
    mean: float | None
    sd: float | None
    ci: tuple[float, float] | None

    @classmethod
    def of(cls, values: Sequence[float]) -> Summary:
        if not values:
            return cls(0, None, None, None)
        mean, lo, hi = t_interval(list(values))
        sd = statistics.stdev(values) if len(values) > 1 else None
        return cls(len(values), mean, sd, None if lo is None else (lo, hi))


@dataclass
class Cell:
    """One (variant, scaling, length): each metric's per-seed values and the comparisons built on them."""

    variant: str
    scaling: str
    length: int
    values: dict[str, dict[int | None, float]]  # metric -> seed -> value
    tokens: int | None = None
    documents: int | None = None
    vs_none: dict[str, Comparison] = field(default_factory=dict)  # against NO_SCALING, same variant and length
    none_seeds: list[int] = field(default_factory=list)
    vs_reference: dict[str, Comparison] = field(default_factory=dict)  # against reference_for(variant)
    vs_random: dict[str, Comparison] = field(default_factory=dict)  # documents packing against random

    @property
    def losses(self) -> dict[int | None, float]:
        return self.values.get("val_loss", {})

    @property
    def n(self) -> int:
        return len(self.losses)

    def summary(self, metric: str) -> Summary:
        return Summary.of(list(self.values.get(metric, {}).values()))

    @property
    def ppl(self) -> tuple[float, float | None, float | None]:
        """exp of the mean val loss over seeds and of its 95% CI: the geometric mean perplexity and its CI."""
        s = self.summary("val_loss")
        lo, hi = s.ci if s.ci else (None, None)
        return _exp(s.mean), None if lo is None else _exp(lo), None if hi is None else _exp(hi)

    @property
    def ppl_range(self) -> tuple[float, float]:
        return _exp(min(self.losses.values())), _exp(max(self.losses.values()))


def _exp(v: float) -> float:
    return math.exp(v) if v < 700 else float("inf")


def _pairing(a: dict, b: dict) -> list | None:
    """Seeds to pair on, else None (Welch): :func:`llm.report.stats.pairing_seeds`."""
    return pairing_seeds(a, b)


def _compare(cell: Cell, ref: Cell, metrics: Sequence[str]) -> tuple[dict[str, Comparison], list[int]]:
    """Δ of each metric of ``cell`` against ``ref`` (paired by seed where they pair, else Welch), and the seeds."""
    out, paired = {}, []
    for metric in metrics:
        a, b = cell.values.get(metric, {}), ref.values.get(metric, {})
        if not a or not b:
            continue
        seeds = _pairing(a, b)
        if seeds is not None:
            out[metric] = compare_paired([a[s] for s in seeds], [b[s] for s in seeds], DEFAULT_MARGIN,
                                         lower_is_better=True)
            paired = paired or seeds
        else:
            out[metric] = compare_unpaired(list(a.values()), list(b.values()), DEFAULT_MARGIN, lower_is_better=True)
    return out, paired


@dataclass
class LengthReport:
    """Everything the writers need, computed once."""

    inputs: list[str]
    runs: list[Run]
    results: list[LengthResult]
    cells: list[Cell]
    unreadable: list[str]
    notes: list[str] = field(default_factory=list)  # runs left out, configs that differ within a row, data

    @property
    def lengths(self) -> list[int]:
        return sorted({c.length for c in self.cells})

    @property
    def groups(self) -> list[tuple[str, str]]:
        """(variant, scaling) in table order: random-window variants, then document-aligned ones (each packing a
        block of its own), variants by name, no scaling first within a variant."""
        keys = {(c.variant, c.scaling) for c in self.cells}
        return sorted(keys, key=lambda k: (packing_of(k[0]) == "documents", k[0], k[1] != NO_SCALING, k[1]))

    def cell(self, variant: str, scaling: str, length: int) -> Cell | None:
        return next((c for c in self.cells if (c.variant, c.scaling, c.length) == (variant, scaling, length)), None)

    @property
    def unevaluated(self) -> list[Run]:
        done = {r.path.parent.parent.resolve() for r in self.results}
        return [r for r in self.runs if r.path.resolve() not in done]

    def distinct(self, key: str) -> list:
        return sorted({r.data.get(key) for r in self.results if r.data.get(key) is not None}, key=str)

    @property
    def reference_lens(self) -> list[int]:
        return sorted({t for r in self.results if (t := r.reference_len) is not None})

    @property
    def beyond_lengths(self) -> list[int]:
        """The lengths with positions beyond T (T the smallest reference length)."""
        t = min(self.reference_lens, default=0)
        return [L for L in self.lengths if L > t]


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


def _selection(group: Sequence[LengthResult], length: int) -> tuple[int | None, int | None]:
    """Tokens and documents evaluated at ``length`` (the same for every run of one val split)."""
    for r in group:
        m = r.at(length)
        if m:
            return m.get("val_tokens"), m.get("documents")
    return None, None


def _mixed_rows(by_group: dict[tuple[str, str], list[LengthResult]], runs: Sequence[Run]) -> list[str]:
    """A warning per row (variant x scaling) whose runs differ in config beyond the seed: their numbers are averaged
    as seeds of one model, so the report says which keys differ (as the comparison refuses such runs)."""
    by_path = {r.path.resolve(): r for r in runs}
    out = []
    for (variant, scaling), group in by_group.items():
        paths = sorted({r.path.parent.parent.resolve() for r in group} & by_path.keys())
        diffs = config_differences([by_path[p] for p in paths])
        if diffs:
            out.append(f"**Warning**: the runs of {variant} · {scaling} differ in more than the seed, yet are averaged "
                       f"as its seeds: {'; '.join(line.strip() for line in describe_differences(diffs))}")
    return out


def build_length_report(paths: Sequence[PathLike]) -> LengthReport:
    """Load the runs under ``paths`` and their length evaluations; compute every cell's statistics.

    Raises :class:`NoRunsError` when no run under ``paths`` holds an ``eval_lengths`` result, and
    FileNotFoundError for a path that does not exist.
    """
    found = load_all_runs(paths)
    runs = [r for r in found if r.completed]
    results, unreadable = load_length_results(runs)
    notes = check_same_data(runs)  # runs trained on different data are refused, naming them
    left_out = [f"{r.name} ({r.status})" for r in found if not r.completed]
    if left_out:
        notes.append(f"**Note**: {len(left_out)} run(s) did not complete and are left out: {', '.join(left_out)}.")
    if not results:
        if left_out and not runs:  # the runs are there, none completed: not a missing evaluation
            raise NoRunsError(f"no completed run under: {', '.join(map(str, paths))}; the report leaves out runs "
                              f"that did not complete: {', '.join(left_out)} (finish them: train.resume=auto)")
        raise NoRunsError(f"no {EVAL_DIR}/*.json under: {', '.join(map(str, paths))} ({len(runs)} completed run "
                          "dir(s); python -m llm.eval_lengths run=<run dir> writes them)")
    by_group: dict[tuple[str, str], list[LengthResult]] = {}
    for r in results:
        by_group.setdefault((r.variant, r.scaling), []).append(r)
    cells = []
    for (variant, scaling), group in by_group.items():
        for length in sorted({L for r in group for L in r.lengths}):
            values = {m: v for m in METRICS if (v := _per_seed(group, length, m))}
            if values.get("val_loss"):
                cells.append(Cell(variant, scaling, length, values, *_selection(group, length)))
    notes += _mixed_rows(by_group, runs)
    report = LengthReport([str(p) for p in paths], runs, results, cells, unreadable, notes)
    for c in cells:
        ref = report.cell(c.variant, NO_SCALING, c.length)
        if c.scaling != NO_SCALING and ref is not None:
            c.vs_none, c.none_seeds = _compare(c, ref, VS_NONE)
        ref = report.cell(reference_for(c.variant), c.scaling, c.length)
        if c.variant != reference_for(c.variant) and ref is not None:
            c.vs_reference = _compare(c, ref, VS_VARIANT)[0]
        counterpart = random_counterpart(c.variant)
        ref = None if counterpart is None else report.cell(counterpart, c.scaling, c.length)
        if ref is not None:
            c.vs_random = _compare(c, ref, VS_VARIANT)[0]
    return report


# -- writers ----------------------------------------------------------------------------------------------
def _ppl_text(c: Cell | None) -> str:
    if c is None:
        return "-"
    mean, lo, hi = c.ppl
    digits = 2 if mean < 1000 else 0
    ci = "n=1" if lo is None else f"[{fmt(lo, digits)}, {fmt(hi, digits)}]"
    return f"{fmt(mean, digits)} {ci}"


#: Metrics that are differences (signed in tables); the others are losses.
DIFFERENCES = ("gain_beyond_train", "degradation")


def _summary_text(c: Cell | None, metric: str) -> str:
    """``+0.1234 ± 0.0200 [+0.1000, +0.1468]``: mean ± the seeds' sd [95% CI of the mean]; ``-`` if none."""
    s = None if c is None else c.summary(metric)
    if s is None or s.mean is None:
        return "-"
    num = signed if metric in DIFFERENCES else (lambda v: fmt(v, 4))
    sd = "" if s.sd is None else f" ± {fmt(s.sd, 4)}"
    ci = " (n=1)" if s.ci is None else f" [{num(s.ci[0])}, {num(s.ci[1])}]"
    return f"{num(s.mean)}{sd}{ci}"


def _delta_text(d: Comparison | None) -> str:
    if d is None:
        return "-"
    ci = "n=1" if d.ci is None else f"[{signed(d.ci[0])}, {signed(d.ci[1])}]"
    return f"{signed(d.delta)} {ci}" + (" (Welch)" if d.method == WELCH else "")


def _seeds(values: dict) -> str:
    return " ".join(str(s) for s in sorted(values, key=lambda s: (s is None, s)))


def _warnings(report: LengthReport) -> list[str]:
    """What makes numbers of the report not comparable: runs left out or averaged across configs, other budgets or
    reference lengths, one seed averaged."""
    out = list(report.notes)
    budgets = report.distinct("tokens")
    if len(budgets) > 1:
        out.append(f"**Warning**: the evaluations used different token budgets ({', '.join(map(str, budgets))}); "
                   "numbers from different budgets are not on the same targets.")
    if len(report.reference_lens) > 1:
        ts = ", ".join(map(str, report.reference_lens))
        out.append(f"**Warning**: the evaluations split at different lengths T ({ts}); beyond-T numbers and "
                   "degradations of different T are not on the same targets "
                   "(`reference_len=` sets T).")
    old = [r for r in report.results if r.lengths and "degradation" not in r.at(r.lengths[0])]
    if old:
        shown = ", ".join(f"`{r.path}`" for r in old[:3]) + (" ..." if len(old) > 3 else "")
        out.append(f"**Note**: {len(old)} evaluation(s) predate the sliding-window baseline (no degradation or gain; "
                   f"evaluate them again): {shown}")
    seen: dict[tuple, int] = {}
    for r in report.results:
        key = (r.variant, r.scaling, r.seed)
        seen[key] = seen.get(key, 0) + 1
    dup = [f"{v} · {s} seed {seed}" for (v, s, seed), k in seen.items() if k > 1]
    if dup:
        out.append(f"**Note**: several evaluations of one seed were averaged: {'; '.join(dup)}.")
    return [line for w in out for line in (w, "")]


def _metric_table(report: LengthReport, metric: str, lengths: Sequence[int]) -> list[str]:
    rows = []
    for variant, scaling in report.groups:
        cells = [report.cell(variant, scaling, L) for L in lengths]
        n = max((c.n for c in cells if c is not None), default=0)
        rows.append([variant, scaling, str(n), *(_summary_text(c, metric) for c in cells)])
    return md_table(["Variant", "Scaling", "n", *map(str, lengths)], rows)


def _data_section(report: LengthReport) -> list[str]:
    """Per length: the targets every run was evaluated on (whole documents of the val split)."""
    rows = []
    for L in report.lengths:
        r = next((r for r in report.results if r.at(L)), None)
        m = r.at(L) if r else {}
        rows.append([str(L), fmt(m.get("val_tokens"), 0), fmt(m.get("windows"), 0), fmt(m.get("documents"), 0),
                     fmt(m.get("eligible_documents"), 0), fmt(m.get("eligible_tokens"), 0)])
    skipped = sorted({(s.get("length"), s.get("reason")) for r in report.results for s in r.data.get("skipped") or []},
                     key=str)
    lines = ["## Evaluation data", "",
             "Windows of length L are whole val documents at least L tokens long (one window per document first, "
             "then further non-overlapping windows of long ones), the same targets for every run and scaling at a "
             "length. Eligible: the val documents that long and the tokens their windows hold.", ""]
    lines += md_table(["Length", "tokens", "windows", "documents", "eligible documents", "eligible tokens"], rows)
    lines += [f"- skipped: {reason}" for _, reason in skipped]
    return [*lines, ""]


def length_markdown(report: LengthReport) -> str:
    lengths, beyond = report.lengths, report.beyond_lengths
    n_runs = len({r.path.parent.parent for r in report.results})
    baselines = {(b.get("window"), b.get("stride")) for r in report.results
                 if isinstance(b := r.data.get("baseline"), dict)}
    t = ", ".join(map(str, report.reference_lens)) or "n/a"
    lines = [
        "# Length generalization",
        "",
        f"{len(report.runs)} run(s), {n_runs} evaluated ({len(report.results)} evaluation(s)); inputs: "
        + ", ".join(f"`{p}`" for p in report.inputs),
        "",
        f"- T (positions >= T are beyond the training length): {t}; training lengths (model.seq_len): "
        f"{', '.join(map(str, report.distinct('train_seq_len'))) or 'n/a'}",
        f"- target tokens per length (budget): {', '.join(map(str, report.distinct('tokens'))) or 'n/a'}",
        "- sliding-window baseline: " + ("; ".join(f"windows of {w} tokens, stride {s}" for w, s in sorted(baselines))
                                         or "n/a"),
        f"- scalings: {', '.join(dict.fromkeys(s for _, s in report.groups))} "
        "(`factor L/N`: the factor L/N at each length L, at least 1)",
        "",
        *_warnings(report),
        "Cells: mean over seeds `± sd` (the seeds' standard deviation: the spread of single runs) `[lo, hi]` (the "
        "95% Student-t confidence interval of the mean over seeds: how well the mean is known). n = seeds; "
        "`(n=1)`: one seed, no spread or CI. Losses in nats.",
        "",
        *_data_section(report),
        "## Degradation beyond T, by evaluation length",
        "",
        "Loss at positions >= T at length L minus the run's own sliding-window baseline on the same targets (the run "
        "as trained, each target predicted from its last T tokens). 0: length L costs nothing; the baseline is the "
        "same for every scaling of a run, so it removes the seed's level from comparisons.",
        "",
    ]
    lines += _metric_table(report, "degradation", beyond) if beyond else ["(no length beyond T was evaluated)"]
    lines += ["", "## Loss beyond T", "", "Mean loss at positions >= T of the windows of length L.", ""]
    lines += _metric_table(report, "loss_beyond_train", beyond) if beyond else ["(none)"]
    lines += ["", "## Gain over the sliding window", "",
              "Loss beyond T minus the same model's loss on the same targets from only the last T tokens (its own "
              "scaling, windows of T). Negative: the model uses context longer than T; positive: the longer "
              "context hurts it.", ""]
    lines += _metric_table(report, "gain_beyond_train", beyond) if beyond else ["(none)"]
    lines += ["", "## Whole-window perplexity", "",
              "exp(mean loss over every position of the window, inside and beyond T), the geometric mean over seeds "
              "[exp of the 95% CI of the mean loss]. It mixes what a scaling costs inside T with how it extends: read "
              "it beside the tables above. Lengths draw on different documents (the long ones are fewer).", ""]
    rows = [[v, s, str(max((c.n for L in lengths if (c := report.cell(v, s, L))), default=0)),
             *(_ppl_text(report.cell(v, s, L)) for L in lengths)] for v, s in report.groups]
    lines += md_table(["Variant", "Scaling", "n", *map(str, lengths)], rows)
    lines += _comparison_sections(report)
    missing = report.unevaluated
    if missing or report.unreadable:
        lines += ["", "## Not evaluated", ""]
        lines += [f"- `{r.name}` ({r.label}, seed {r.seed}): {r.status}, no {EVAL_DIR}/*.json" for r in missing]
        lines += [f"- unreadable: `{u}`" for u in report.unreadable]
    lines += ["", "## Plots", "", f"![degradation, loss beyond T and perplexity against length]({CURVES_FILE})", "",
              f"![loss against position at the longest length]({POSITION_FILE})", ""]
    return "\n".join(lines)


def _comparison_table(report: LengthReport, rows: Sequence[tuple[str, str]], attr: str, metric: str,
                      lengths: Sequence[int]) -> list[str]:
    def text(v: str, s: str, L: int) -> str:
        c = report.cell(v, s, L)
        return _delta_text(None if c is None else getattr(c, attr).get(metric))

    return md_table(["Variant", "Scaling", *map(str, lengths)], [[v, s, *(text(v, s, L) for L in lengths)]
                                                               for v, s in rows])


def _has(report: LengthReport, v: str, s: str, attr: str) -> bool:
    return any((c := report.cell(v, s, L)) is not None and getattr(c, attr) for L in report.lengths)


def _comparison_sections(report: LengthReport) -> list[str]:
    lengths, beyond = report.lengths, report.beyond_lengths
    pair = "paired by seed (nats; negative: lower loss); 95% CI of the mean Δ; `(Welch)` where the seeds do not pair."
    lines: list[str] = []
    scaled = [(v, s) for v, s in report.groups if s != NO_SCALING and _has(report, v, s, "vs_none")]
    lines += ["", "## Scaling − none, same variant and length", ""]
    if scaled:
        lines += [f"Beyond T (Δ loss at positions >= T, equal to Δ degradation: the baseline is the run's): {pair}", ""]
        lines += _comparison_table(report, scaled, "vs_none", "loss_beyond_train", beyond)
        lines += ["", f"Inside T (Δ loss at positions < T: what the scaling costs the short context): {pair}", ""]
        lines += _comparison_table(report, scaled, "vs_none", "loss_within_train", lengths)
        lines += ["", f"Whole window (Δ mean loss over every position): {pair}", ""]
        lines += _comparison_table(report, scaled, "vs_none", "val_loss", lengths)
    elif any(s != NO_SCALING for _, s in report.groups):  # evaluated, but never beside none at the same length
        lines.append("(no scaling shares a length with an evaluation without scaling of the same variant: evaluate "
                     "`scaling=none` at those lengths to compare them)")
    else:
        lines.append("(no scaling other than none was evaluated)")
    against = [(v, s) for v, s in report.groups if v != reference_for(v) and _has(report, v, s, "vs_reference")]
    if against:
        lines += ["", f"## Variant − {REFERENCE_VARIANT}, same packing, scaling and length", "",
                  "Each variant against the reference rotation trained with the same packing (a variant named "
                  f"`…{DOCUMENTS_SUFFIX}` against `{reference_for(DOCUMENTS_SUFFIX)}`, the others against "
                  f"`{REFERENCE_VARIANT}`). Degradation (the headline: each run against its own level): {pair} A "
                  "variant evaluated without some scaling (none rotates nothing to scale) has no row for it.", ""]
        lines += _comparison_table(report, against, "vs_reference", "degradation", beyond)
        lines += ["", f"Loss beyond T: {pair}", ""]
        lines += _comparison_table(report, against, "vs_reference", "loss_beyond_train", beyond)
        lines += ["", f"Whole window: {pair}", ""]
        lines += _comparison_table(report, against, "vs_reference", "val_loss", lengths)
    packed = [(v, s) for v, s in report.groups if _has(report, v, s, "vs_random")]
    if packed:
        lines += ["", "## Document-aligned − random training windows, same rotation and scaling", "",
                  "Each run trained on windows laid out by document (positions restarting at each document, "
                  "attention inside it) against the run of the same rotation and seed trained on random windows of "
                  "the stream (the same windows at every step: the layout is the only difference). "
                  f"Degradation (each run against its own sliding-window level): {pair}", ""]
        lines += _comparison_table(report, packed, "vs_random", "degradation", beyond)
        lines += ["", f"Loss beyond T (the runs' levels included): {pair}", ""]
        lines += _comparison_table(report, packed, "vs_random", "loss_beyond_train", beyond)
        lines += ["", f"Whole window: {pair}", ""]
        lines += _comparison_table(report, packed, "vs_random", "val_loss", lengths)
    return lines


def _comparison_values(comparisons: dict[str, Comparison], metrics: Sequence[str]) -> list[Any]:
    out: list[Any] = []
    for m in metrics:
        d = comparisons.get(m)
        out += [None] * 4 if d is None else [d.delta, *(d.ci if d.ci else (None, None)), d.p]
    return out


def _pairing_text(comparisons: dict[str, Comparison]) -> str | None:
    d = next(iter(comparisons.values()), None)
    return None if d is None else ("unpaired (Welch)" if d.method == WELCH else "paired")


def _csv_rows(report: LengthReport) -> list[list[Any]]:
    rows = []
    for variant, scaling in report.groups:
        for L in report.lengths:
            c = report.cell(variant, scaling, L)
            if c is None:
                continue
            stats = []
            for m in SUMMARIZED:
                s = c.summary(m)
                stats += [s.mean, s.sd, *(s.ci if s.ci else (None, None))]
            ppl, plo, phi = c.ppl
            ref_t = sorted({r.reference_len for r in report.results if (r.variant, r.scaling) == (variant, scaling)
                            and r.reference_len is not None})
            rows.append([variant, scaling, L, c.n, _seeds(c.losses), " ".join(map(str, ref_t)), c.tokens, c.documents,
                         *stats, ppl, plo, phi, *c.ppl_range,
                         statistics.fmean(c.values["val_acc"].values()) if c.values.get("val_acc") else None,
                         _pairing_text(c.vs_none), " ".join(map(str, c.none_seeds)),
                         *_comparison_values(c.vs_none, VS_NONE),
                         reference_for(variant) if c.vs_reference else None, _pairing_text(c.vs_reference),
                         *_comparison_values(c.vs_reference, VS_VARIANT),
                         random_counterpart(variant) if c.vs_random else None, _pairing_text(c.vs_random),
                         *_comparison_values(c.vs_random, VS_VARIANT)])
    return rows


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


def _draw_metric(ax: Any, report: LengthReport, metric: str, lengths: Sequence[int], exp: bool = False) -> None:
    """One line per variant × scaling: the mean over seeds, its 95% CI as a band (two seeds or more)."""
    for (variant, scaling), (color, style) in _styles(report).items():
        points = [(L, s) for L in lengths if (c := report.cell(variant, scaling, L)) is not None
                  and (s := c.summary(metric)).mean is not None]
        if not points:
            continue
        f = _exp if exp else (lambda v: v)
        xs = [L for L, _ in points]
        ax.plot(xs, [f(s.mean) for _, s in points], color=color, linestyle=style, marker="o", markersize=3,
                label=f"{variant} · {scaling} (n={max(s.n for _, s in points)})")
        band = [(L, s.ci) for L, s in points if s.ci is not None]
        if band:
            ax.fill_between([L for L, _ in band], [f(ci[0]) for _, ci in band], [f(ci[1]) for _, ci in band],
                            color=color, alpha=0.12, linewidth=0)
    ax.set_xscale("log", base=2)
    if lengths:
        ax.set_xticks(list(lengths), [str(L) for L in lengths])
    ax.grid(alpha=0.3, which="both")


def plot_length_curves(report: LengthReport, path: Path) -> None:
    """Degradation, loss beyond T and whole-window perplexity against length; bands: 95% CI of the mean."""
    from matplotlib.ticker import FuncFormatter

    fig = _new_figure((17, 5))
    ax_deg, ax_beyond, ax_ppl = fig.subplots(1, 3)
    beyond = report.beyond_lengths
    _draw_metric(ax_deg, report, "degradation", beyond)
    ax_deg.axhline(0, color="gray", linewidth=1)
    ax_deg.set(xlabel="evaluation length L (tokens)", ylabel="degradation beyond T (nats)",
               title="loss beyond T − the run's own sliding-window baseline")
    _draw_metric(ax_beyond, report, "loss_beyond_train", beyond)
    ax_beyond.set(xlabel="evaluation length L (tokens)", ylabel="loss at positions >= T (nats)",
                  title="loss beyond the training length")
    _draw_metric(ax_ppl, report, "val_loss", report.lengths, exp=True)
    for t in report.reference_lens:
        ax_ppl.axvline(t, color="gray", linestyle=":", linewidth=1)
    ax_ppl.set_yscale("log")
    plain = FuncFormatter(lambda v, _: f"{v:,.4g}")  # 812 rather than 8.12x10^2
    ax_ppl.yaxis.set_major_formatter(plain)
    low, high = ax_ppl.get_ylim()
    if 0 < low and high / low < 10:  # within a decade the minor ticks are the only ones: label them
        ax_ppl.yaxis.set_minor_formatter(plain)
    ax_ppl.set(xlabel="evaluation length L (tokens; dotted: T)", ylabel="whole-window perplexity",
               title="whole window (inside and beyond T)")
    ax_ppl.legend(fontsize=7)
    fig.suptitle("mean over seeds; bands: 95% CI of the mean (not the seeds' spread)")
    _save(fig, path)


def _mean_buckets(results: Sequence[LengthResult], length: int, key: str) -> list[tuple[float, float]]:
    """(bucket mid-position, ``key`` averaged over seeds) at ``length``, over the buckets the results have."""
    per_start: dict[int, tuple[int, list[float]]] = {}
    for r in results:
        m = r.at(length)
        for b in (m or {}).get("buckets", []):
            value = as_float(b.get(key))
            if value is not None:
                per_start.setdefault(int(b["start"]), (int(b["end"]), []))[1].append(value)
    return [((s + e) / 2, statistics.fmean(v)) for s, (e, v) in sorted(per_start.items())]


def plot_position_loss(report: LengthReport, path: Path) -> None:
    """Mean loss against position at the longest length, each variant × scaling, and each variant's own
    sliding-window baseline (thin dotted): where a scaling stops generalizing, and whether it beats the baseline."""
    longest = max(report.lengths)
    fig = _new_figure((9, 5))
    ax = fig.subplots()
    drawn, baselines = 0, set()
    for (variant, scaling), (color, style) in _styles(report).items():
        group = [r for r in report.results if (r.variant, r.scaling) == (variant, scaling)]
        points = _mean_buckets(group, longest, "loss")
        if not points:
            continue
        drawn += 1
        n = len({r.seed for r in group if r.at(longest)})
        ax.plot([p[0] for p in points], [p[1] for p in points], color=color, linestyle=style,
                label=f"{variant} · {scaling} (n={n})")
        base = _mean_buckets(group, longest, "baseline")
        if base and variant not in baselines:
            baselines.add(variant)
            ax.plot([p[0] for p in base], [p[1] for p in base], color=color, linestyle=":", linewidth=0.8,
                    label=f"{variant}: own sliding-window baseline")
    for t in report.reference_lens:
        ax.axvline(t, color="gray", linestyle=":", linewidth=1)
    ax.set(xlabel="position (dotted: T)", ylabel="mean loss (nats)",
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
