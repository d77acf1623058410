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
seed (Welch's test on all runs where too few seeds pair: :func:`llm.report.stats.pairing_seeds`) with the 95%
CI of the mean Δ.

**Only evaluations on the same targets are averaged or compared.** What an evaluation predicts is set by its
token budget (``tokens``), its T (``reference_len``), its sliding-window baseline (window and stride), the val
split and the documents' order (:class:`Targets`); two evaluations that differ in any of them score other
windows, and their difference would be the windows', not the scaling's or the variant's. So each set of targets
is a row of its own (its differing keys after the scaling: ``none · tokens=2048``) and a row of plots of its own,
and a comparison whose counterpart was evaluated only on other targets is ``n/a``, with a note saying so.

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
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from llm.fileio import atomic_open, write_files_whole, write_text_atomic
from llm.report.analysis import DEFAULT_MARGIN
from llm.report.errors import NoRunsError
from llm.report.markdown import fmt, md_table, seed_list, signed
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
#: The metrics of positions >= T: null (no value) at a length <= T.
BEYOND_T = ("loss_beyond_train", "sliding_beyond_train", "gain_beyond_train", "baseline_beyond_train", "degradation")
SUMMARIZED = ("val_loss", "loss_within_train", "loss_beyond_train", "gain_beyond_train", "baseline_beyond_train",
              "degradation")


def _comparison_columns(prefix: str, metrics: Sequence[str]) -> list[str]:
    return [f"{prefix}_{m}_{s}" for m in metrics for s in ("delta", "ci_low", "ci_high", "p")]


CSV_COLUMNS = ("variant", "scaling", "length", "n", "seeds", "reference_len", "budget", "baseline_window",
               "baseline_stride", "val_stream_tokens", "document_order_seed", "tokens", "documents",
               *(f"{m}_{s}" for m in SUMMARIZED for s in ("mean", "sd", "ci_low", "ci_high")),
               "val_ppl", "val_ppl_ci_low", "val_ppl_ci_high", "val_ppl_min", "val_ppl_max", "val_acc_mean",
               "vs_none_pairing", "vs_none_seeds", *_comparison_columns("vs_none", VS_NONE),
               "reference_variant", "vs_reference_pairing", "vs_reference_seeds",
               *_comparison_columns("vs_reference", VS_VARIANT),
               "random_packing_variant", "vs_random_pairing", "vs_random_seeds",
               *_comparison_columns("vs_random", VS_VARIANT))


def _int(v: object) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


@dataclass(frozen=True)
class Targets:
    """What decides which tokens an evaluation predicts and how its numbers split them: two evaluations that differ
    in any of these score other windows (or other positions as beyond T, or another baseline), so their numbers are
    never averaged or compared (a Δ between them would measure the windows). None: not recorded."""

    tokens: int | None  # the token budget per length: how many windows of the val documents are taken
    reference_len: int | None  # T: positions >= T are beyond it
    baseline_window: int | None
    baseline_stride: int | None
    val_stream_tokens: int | None  # the val split (its length: a cheap fingerprint of the stream windows are cut from)
    document_order_seed: int | None  # the documents' order, which decides the windows a budget takes

    #: How each field is shown where target sets differ: the command's key where it has one.
    SHOWN = {"tokens": "tokens={}", "reference_len": "reference_len={}", "baseline_window": "baseline_window={}",
             "baseline_stride": "baseline_stride={}", "val_stream_tokens": "val split of {} tokens",
             "document_order_seed": "document order seed {}"}

    @classmethod
    def of(cls, data: dict) -> Targets:
        base = data.get("baseline") if isinstance(data.get("baseline"), dict) else {}
        t = data.get("reference_len", data.get("train_seq_len"))
        return cls(_int(data.get("tokens")), _int(t), _int(base.get("window")), _int(base.get("stride")),
                   _int(data.get("val_stream_tokens")), _int(data.get("document_order_seed")))

    def sort_key(self) -> tuple:
        return tuple((v is None, v or 0) for v in (getattr(self, f.name) for f in fields(self)))

    def describe(self, keys: Sequence[str]) -> str:
        """The values of ``keys`` (the fields that differ in a report), e.g. ``tokens=2048``; "" for none."""
        return ", ".join(self.SHOWN[k].format("?" if (v := getattr(self, k)) is None else v) for k in keys)


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
        return self.targets.reference_len

    @property
    def targets(self) -> Targets:
        return Targets.of(self.data)

    def at(self, length: int) -> dict | None:
        return next((m for m in self.data.get("lengths", []) if m.get("length") == length), None)

    @property
    def lengths(self) -> list[int]:
        return sorted(int(m["length"]) for m in self.data.get("lengths", []) if "length" in m)


def _per_seed(results: Sequence[LengthResult], length: int, key: str) -> dict[int | None, float]:
    """Seed -> value of ``key`` at ``length``; several results of one seed are averaged. A nan/inf value (a loss that
    overflowed) is no sample of a mean: it is left out here and named by :func:`_nonfinite_note`."""
    acc: dict[int | None, list[float]] = {}
    for r in results:
        m = r.at(length)
        v = as_float(m.get(key)) if m else None
        if v is not None and math.isfinite(v):
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
    targets: Targets
    tokens: int | None = None
    documents: int | None = None
    vs_none: dict[str, Comparison] = field(default_factory=dict)  # against NO_SCALING, same variant and length
    none_seeds: list[int] = field(default_factory=list)
    vs_reference: dict[str, Comparison] = field(default_factory=dict)  # against reference_for(variant)
    reference_seeds: list[int] = field(default_factory=list)
    vs_random: dict[str, Comparison] = field(default_factory=dict)  # documents packing against random
    random_seeds: list[int] = field(default_factory=list)
    #: comparison (``vs_none``, ...) -> the targets its counterpart was evaluated on, none of them this cell's: n/a
    other_targets: dict[str, list[Targets]] = field(default_factory=dict)

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
    """Seeds to pair on, else None (Welch on all runs): :func:`llm.report.stats.pairing_seeds`."""
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
    def groups(self) -> list[tuple[str, str, Targets]]:
        """(variant, scaling, targets) in table order: random-window variants, then document-aligned ones (each
        packing a block of its own), variants by name, no scaling first within a variant, then its target sets."""
        keys = {(c.variant, c.scaling, c.targets) for c in self.cells}
        return sorted(keys, key=lambda k: (packing_of(k[0]) == "documents", k[0], k[1] != NO_SCALING, k[1],
                                           k[2].sort_key()))

    def cell(self, variant: str, scaling: str, length: int, targets: Targets | None = None) -> Cell | None:
        """The cell of (variant, scaling, length) on ``targets`` (None: on any; the report's first)."""
        return next((c for c in self.cells if (c.variant, c.scaling, c.length) == (variant, scaling, length)
                     and targets in (None, c.targets)), None)

    @property
    def target_sets(self) -> list[Targets]:
        return sorted({c.targets for c in self.cells}, key=Targets.sort_key)

    @property
    def target_fields(self) -> list[str]:
        """The :class:`Targets` fields whose values differ between the report's evaluations (none: one set)."""
        sets = self.target_sets
        return [f for f in Targets.SHOWN if len({getattr(t, f) for t in sets}) > 1]

    def targets_text(self, targets: Targets) -> str:
        return targets.describe(self.target_fields)

    def row_label(self, scaling: str, targets: Targets) -> str:
        """The Scaling column: the scaling, and where the report holds several target sets, this row's."""
        shown = self.targets_text(targets)
        return f"{scaling} · {shown}" if shown else scaling

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


def load_length_results(runs: Sequence[Run]) -> tuple[list[LengthResult], list[str], list[str]]:
    """Every ``eval_lengths/*.json`` of ``runs``, the files that could not be read (named, not fatal), and those of
    a checkpoint before the run's end, left out (named): evaluated while the run trained, or before a resume took
    it further, such a file measures a shorter training than the run's, and averaged as its seed it would stand
    for the finished model."""
    results, unreadable, earlier = [], [], []
    for run in runs:
        ended = run.summary.get("step")
        for path in sorted((run.path / EVAL_DIR).glob("*.json")):
            try:
                data = json.loads(path.read_text())
            except (OSError, ValueError) as e:
                unreadable.append(f"{path} ({type(e).__name__})")
                continue
            if not (isinstance(data, dict) and isinstance(data.get("lengths"), list)):
                unreadable.append(f"{path} (not an eval_lengths result)")
            elif bad := _bad_length_entry(data["lengths"]):
                unreadable.append(f"{path} ({bad})")
            elif isinstance(step := data.get("step"), int) and isinstance(ended, int) and step != ended:
                earlier.append(f"`{path}` (step {step}; the run ended at step {ended}: python -m llm.eval_lengths "
                               f"run={run.path} evaluates its final checkpoint)")
            else:
                results.append(LengthResult(path, data))
    return results, unreadable, earlier


def _bad_length_entry(lengths: list) -> str | None:
    """Why a file's ``lengths`` cannot be read (None: it can): an entry that is not an object with an integer length
    (a hand-edited file) crashed the report or silently lost its seed at that length, so the file is named instead."""
    for i, m in enumerate(lengths):
        if not isinstance(m, dict) or _int(m.get("length")) is None:
            return f"lengths[{i}] is not an object with an integer length"
    return None


def _same_windows(a: Cell, b: Cell) -> bool:
    """Whether two cells of one length predict the same targets: the same :class:`Targets`, or budgets that took the
    same windows there (the windows of a length are the first ``k`` of one fixed order, so equal token counts are
    equal windows: a long length whose documents hold less than either budget takes all of them under both)."""
    if a.length != b.length:
        return False
    return a.targets == b.targets or (replace(a.targets, tokens=None) == replace(b.targets, tokens=None)
                                      and a.tokens is not None and a.tokens == b.tokens)


def _counterpart(report: LengthReport, cell: Cell, attr: str, variant: str, scaling: str) -> Cell | None:
    """The cell ``cell`` is compared with under ``attr``: ``variant`` x ``scaling`` at its length on the same targets
    (its own, else any that took the same windows). Evaluated there only on other targets, there is none, and
    ``cell.other_targets[attr]`` says on which (the table shows n/a rather than a Δ of two sets of windows)."""
    ref = report.cell(variant, scaling, cell.length, cell.targets) or next(
        (c for c in report.cells if (c.variant, c.scaling) == (variant, scaling) and _same_windows(c, cell)), None)
    if ref is None:
        here = (variant, scaling, cell.length)
        others = [c.targets for c in report.cells if (c.variant, c.scaling, c.length) == here]
        if others:
            cell.other_targets[attr] = sorted(set(others), key=Targets.sort_key)
    return ref


def _selection(group: Sequence[LengthResult], length: int) -> tuple[int | None, int | None]:
    """Tokens and documents evaluated at ``length`` (the same for every run of one val split)."""
    for r in group:
        m = r.at(length)
        if m:
            return m.get("val_tokens"), m.get("documents")
    return None, None


def _nonfinite_note(results: Sequence[LengthResult]) -> str | None:
    """A note naming each evaluation's nan/inf values, which the statistics leave out (:func:`_per_seed`)."""
    found = []
    for r in results:
        for m in r.data.get("lengths", []):
            t, length = r.reference_len, m.get("length")
            beyond = t is None or (isinstance(length, int) and length > t)
            # llm.eval_lengths writes a nan/inf as null, which is no value only for a beyond-T metric at L <= T
            bad = [k for k in METRICS if ((v := as_float(m.get(k))) is not None and not math.isfinite(v))
                   or (k in m and m[k] is None and (beyond or k not in BEYOND_T))]
            if bad:
                found.append(f"{r.variant} · {r.scaling} seed {r.seed} at {m.get('length')}: {', '.join(bad)}")
    if not found:
        return None
    return (f"**Note**: {len(found)} evaluation(s) have a nan/inf value, left out of the statistics: "
            f"{'; '.join(found)} (`llm.eval_lengths` writes a nan/inf as null).")


def _mixed_rows(by_group: dict[tuple[str, str, Targets], list[LengthResult]], runs: Sequence[Run]) -> list[str]:
    """A warning per row (variant x scaling) whose runs differ in config beyond the seed: their numbers are averaged
    as seeds of one model, so the report says which keys differ (as the comparison refuses such runs)."""
    by_path = {r.path.resolve(): r for r in runs}
    out = []
    for (variant, scaling, _), group in by_group.items():
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
    results, unreadable, earlier = load_length_results(runs)
    notes = check_same_data(runs)  # runs trained on different data are refused, naming them
    if earlier:
        notes.append(f"**Note**: {len(earlier)} evaluation(s) of a checkpoint before their run's end are left out: "
                     f"{', '.join(earlier)}.")
    left_out = [f"{r.name} ({r.status})" for r in found if not r.completed]
    if left_out:
        notes.append(f"**Note**: {len(left_out)} run(s) did not complete and are left out: {', '.join(left_out)}.")
    if not results:
        if left_out and not runs:  # the runs are there, none completed: not a missing evaluation
            raise NoRunsError(f"no completed run under: {', '.join(map(str, paths))}; the report leaves out runs "
                              f"that did not complete: {', '.join(left_out)} (finish them: train.resume=auto)")
        raise NoRunsError(f"no {EVAL_DIR}/*.json under: {', '.join(map(str, paths))} ({len(runs)} completed run "
                          "dir(s); python -m llm.eval_lengths run=<run dir> writes them)")
    # One cell per set of targets: evaluations of other windows are never averaged as seeds of one number.
    by_group: dict[tuple[str, str, Targets], list[LengthResult]] = {}
    for r in results:
        by_group.setdefault((r.variant, r.scaling, r.targets), []).append(r)
    cells = []
    for (variant, scaling, targets), group in by_group.items():
        for length in sorted({L for r in group for L in r.lengths}):
            values = {m: v for m in METRICS if (v := _per_seed(group, length, m))}
            if values.get("val_loss"):
                cells.append(Cell(variant, scaling, length, values, targets, *_selection(group, length)))
    notes += _mixed_rows(by_group, runs)
    if note := _nonfinite_note(results):
        notes.append(note)
    report = LengthReport([str(p) for p in paths], runs, results, cells, unreadable, notes)
    for c in cells:  # each against its counterpart on the same targets only (_counterpart)
        ref = None if c.scaling == NO_SCALING else _counterpart(report, c, "vs_none", c.variant, NO_SCALING)
        if ref is not None:
            c.vs_none, c.none_seeds = _compare(c, ref, VS_NONE)
        reference = reference_for(c.variant)
        ref = None if c.variant == reference else _counterpart(report, c, "vs_reference", reference, c.scaling)
        if ref is not None:
            c.vs_reference, c.reference_seeds = _compare(c, ref, VS_VARIANT)
        counterpart = random_counterpart(c.variant)
        ref = None if counterpart is None else _counterpart(report, c, "vs_random", counterpart, c.scaling)
        if ref is not None:
            c.vs_random, c.random_seeds = _compare(c, ref, VS_VARIANT)
    return report


# -- writers ----------------------------------------------------------------------------------------------
def _ppl_text(c: Cell | None, n: int | None = None) -> str:
    """``66.57 [61.19, 72.42]``, with ``(n=k)`` where fewer than the row's ``n`` seeds are in the cell."""
    if c is None:
        return "-"
    mean, lo, hi = c.ppl
    digits = 2 if mean < 1000 else 0
    ci = "(n=1)" if lo is None else f"[{fmt(lo, digits)}, {fmt(hi, digits)}]"
    return f"{fmt(mean, digits)} {ci}" + _fewer(c.n, n)


def _fewer(k: int, n: int | None) -> str:
    """`` (n=k)`` where a cell holds fewer seeds than its row's n column says (a seed not evaluated at that length,
    or a nan/inf value left out), so that column is never read as the cell's n; "" otherwise."""
    return f" (n={k})" if n is not None and 1 < k < n else ""


#: Metrics that are differences (signed in tables); the others are losses.
DIFFERENCES = ("gain_beyond_train", "degradation")


def _summary_text(c: Cell | None, metric: str, n: int | None = None) -> str:
    """``+0.1234 ± 0.0200 [+0.1000, +0.1468]``: mean ± the seeds' sd [95% CI of the mean], with ``(n=k)`` where fewer
    than the row's ``n`` seeds have a value; ``-`` if none."""
    s = None if c is None else c.summary(metric)
    if s is None or s.mean is None:
        return "-"
    num = signed if metric in DIFFERENCES else (lambda v: fmt(v, 4))
    sd = "" if s.sd is None else f" ± {fmt(s.sd, 4)}"
    ci = " (n=1)" if s.ci is None else f" [{num(s.ci[0])}, {num(s.ci[1])}]"
    return f"{num(s.mean)}{sd}{ci}{_fewer(s.n, n)}"


def _delta_text(d: Comparison | None, n: int | None = None) -> str:
    """``+0.0123 [lo, hi]``; ``(Welch, 3 vs 5 runs)`` unpaired; ``(2 of 3 seeds paired)`` where the pairing used fewer
    seeds than the cell holds (the counterpart lacks some), so a Δ is never read as over all of the cell's seeds."""
    if d is None:
        return "-"
    ci = "n=1" if d.ci is None else f"[{signed(d.ci[0])}, {signed(d.ci[1])}]"
    fewer = d.method != WELCH and n is not None and d.n < n
    return (f"{signed(d.delta)} {ci}" + (f" (Welch, {d.n} vs {d.n_ref} runs)" if d.method == WELCH else "")
            + (f" ({d.n} of {n} seeds paired)" if fewer else ""))


def _seeds(values: dict) -> str:
    return " ".join(str(s) for s in sorted(values, key=lambda s: (s is None, s)))


def _warnings(report: LengthReport) -> list[str]:
    """What makes numbers of the report not comparable: runs left out or averaged across configs, other budgets or
    reference lengths, one seed averaged."""
    out = list(report.notes)
    sets = report.target_sets
    if len(sets) > 1:
        out.append(f"**Note**: the evaluations were made on {len(sets)} different sets of targets "
                   f"({'; '.join(map(report.targets_text, sets))}): numbers on other windows (or another T or "
                   "baseline) differ by the windows, so each set is a row of its own (after the scaling) and a row of "
                   "plots of its own, and only evaluations on the same targets are averaged or compared (n/a where "
                   "a counterpart was evaluated only on others).")
    old = [r for r in report.results if r.lengths and "degradation" not in r.at(r.lengths[0])]
    if old:
        shown = ", ".join(f"`{r.path}`" for r in old[:3]) + (" ..." if len(old) > 3 else "")
        out.append(f"**Note**: {len(old)} evaluation(s) predate the sliding-window baseline (no degradation or gain; "
                   f"evaluate them again): {shown}")
    seen: dict[tuple, int] = {}
    for r in report.results:
        key = (r.variant, report.row_label(r.scaling, r.targets), r.seed)
        seen[key] = seen.get(key, 0) + 1
    dup = [f"{v} · {s} seed {seed}" for (v, s, seed), k in seen.items() if k > 1]
    if dup:
        out.append(f"**Note**: several evaluations of one seed were averaged: {'; '.join(dup)}.")
    return [line for w in out for line in (w, "")]


def _metric_table(report: LengthReport, metric: str, lengths: Sequence[int]) -> list[str]:
    rows = []
    for variant, scaling, targets in report.groups:
        cells = [report.cell(variant, scaling, L, targets) for L in lengths]
        n = max((c.n for c in cells if c is not None), default=0)
        rows.append([variant, report.row_label(scaling, targets), str(n),
                     *(_summary_text(c, metric, n) for c in cells)])
    return md_table(["Variant", "Scaling", "n", *map(str, lengths)], rows)


def _data_section(report: LengthReport) -> list[str]:
    """Per length: the targets every run was evaluated on (whole documents of the val split)."""
    rows = []
    several = len(report.target_sets) > 1
    for targets in report.target_sets:
        for L in report.lengths:
            r = next((r for r in report.results if r.targets == targets and r.at(L)), None)
            if r is None:
                continue
            m = r.at(L) or {}
            rows.append([*([report.targets_text(targets)] if several else []), str(L), fmt(m.get("val_tokens"), 0),
                         fmt(m.get("windows"), 0), fmt(m.get("documents"), 0), fmt(m.get("eligible_documents"), 0),
                         fmt(m.get("eligible_tokens"), 0)])
    skipped = sorted({(s.get("length"), s.get("reason")) for r in report.results for s in r.data.get("skipped") or []},
                     key=str)
    lines = ["## Evaluation data", "",
             "Windows of length L are whole val documents at least L tokens long (one window per document first, "
             "then further non-overlapping windows of long ones), the same targets for every run and scaling at a "
             "length and budget (`tokens`). Eligible: the val documents that long and the tokens their windows "
             "hold.", ""]
    lines += md_table([*(["Targets"] if several else []), "Length", "tokens", "windows", "documents",
                       "eligible documents", "eligible tokens"], rows)
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
        f"- scalings: {', '.join(dict.fromkeys(s for _, s, _ in report.groups))} "
        "(`factor L/N`: the factor L/N at each length L, at least 1)",
        "",
        *_warnings(report),
        "Cells: mean over seeds `± sd` (the seeds' standard deviation: the spread of single runs) `[lo, hi]` (the "
        "95% Student-t confidence interval of the mean over seeds: how well the mean is known). n = seeds (the "
        "row's most; `(n=k)`: a cell over fewer); `(n=1)`: one seed, no spread or CI. Losses in nats.",
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
    rows = []
    for v, s, t in report.groups:
        n = max((c.n for L in lengths if (c := report.cell(v, s, L, t))), default=0)
        rows.append([v, report.row_label(s, t), str(n), *(_ppl_text(report.cell(v, s, L, t), n) for L in lengths)])
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


def _comparison_table(report: LengthReport, rows: Sequence[tuple[str, str, Targets]], attr: str, metric: str,
                      lengths: Sequence[int]) -> list[str]:
    def text(v: str, s: str, t: Targets, L: int) -> str:
        c = report.cell(v, s, L, t)
        if c is not None and attr in c.other_targets and c.values.get(metric):
            return "n/a"
        return _delta_text(None if c is None else getattr(c, attr).get(metric), None if c is None else c.n)

    return md_table(["Variant", "Scaling", *map(str, lengths)],
                    [[v, report.row_label(s, t), *(text(v, s, t, L) for L in lengths)] for v, s, t in rows])


def _has(report: LengthReport, v: str, s: str, t: Targets, attr: str) -> bool:
    """Whether the row has a comparison under ``attr`` at some length, or one that is n/a for its targets."""
    return any((c := report.cell(v, s, L, t)) is not None and (getattr(c, attr) or attr in c.other_targets)
               for L in report.lengths)


def _other_targets_note(report: LengthReport, rows: Sequence[tuple[str, str, Targets]], attr: str,
                        counterpart: str) -> list[str]:
    """The note under a comparison's tables: which rows are n/a, and on which targets their counterpart was."""
    parts = []
    for v, s, t in rows:
        others = {o for L in report.lengths if (c := report.cell(v, s, L, t)) for o in c.other_targets.get(attr, [])}
        if others:
            shown = "; ".join(report.targets_text(o) for o in sorted(others, key=Targets.sort_key))
            parts.append(f"{v} · {report.row_label(s, t)} (evaluated there only at {shown})")
    if not parts:
        return []
    return ["", f"n/a: no evaluation {counterpart} on the same targets at that length, so no Δ (one on other windows "
            f"would measure the windows): {'; '.join(parts)}. Evaluate both with the same `tokens=`, "
            "`reference_len=` and baseline to compare them."]


def _comparison_sections(report: LengthReport) -> list[str]:
    lengths, beyond = report.lengths, report.beyond_lengths
    pair = ("paired by seed (nats; negative: lower loss); 95% CI of the mean Δ; `(Welch, n vs n_ref runs)`: all runs "
            "unpaired, where too few seeds pair; `n=1`: one seed, no CI (one run's Δ cannot tell the change from "
            "seed-to-seed noise).")
    lines: list[str] = []
    scaled = [(v, s, t) for v, s, t in report.groups if s != NO_SCALING and _has(report, v, s, t, "vs_none")]
    lines += ["", "## Scaling − none, same variant and length", ""]
    if scaled:
        lines += [f"Beyond T (Δ loss at positions >= T, equal to Δ degradation: the baseline is the run's): {pair}", ""]
        lines += _comparison_table(report, scaled, "vs_none", "loss_beyond_train", beyond)
        lines += ["", f"Inside T (Δ loss at positions < T: what the scaling costs the short context): {pair}", ""]
        lines += _comparison_table(report, scaled, "vs_none", "loss_within_train", lengths)
        lines += ["", f"Whole window (Δ mean loss over every position): {pair}", ""]
        lines += _comparison_table(report, scaled, "vs_none", "val_loss", lengths)
        lines += _other_targets_note(report, scaled, "vs_none", "without scaling of the same variant")
    elif any(s != NO_SCALING for _, s, _ in report.groups):  # evaluated, but never beside none at the same length
        lines.append("(no scaling shares a length with an evaluation without scaling of the same variant: evaluate "
                     "`scaling=none` at those lengths to compare them)")
    else:
        lines.append("(no scaling other than none was evaluated)")
    against = [(v, s, t) for v, s, t in report.groups
               if v != reference_for(v) and _has(report, v, s, t, "vs_reference")]
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
        lines += _other_targets_note(report, against, "vs_reference", "of the reference variant with the same scaling")
    packed = [(v, s, t) for v, s, t in report.groups if _has(report, v, s, t, "vs_random")]
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
        lines += _other_targets_note(report, packed, "vs_random", "of the same rotation on random windows")
    return lines


def _comparison_values(comparisons: dict[str, Comparison], metrics: Sequence[str]) -> list[Any]:
    out: list[Any] = []
    for m in metrics:
        d = comparisons.get(m)
        out += [None] * 4 if d is None else [d.delta, *(d.ci if d.ci else (None, None)), d.p]
    return out


def _pairing_text(cell: Cell, attr: str) -> str | None:
    d = next(iter(getattr(cell, attr).values()), None)
    if d is None:
        return "n/a (evaluated only on other targets)" if attr in cell.other_targets else None
    return "unpaired (Welch)" if d.method == WELCH else "paired"


def _csv_rows(report: LengthReport) -> list[list[Any]]:
    rows = []
    for variant, scaling, targets in report.groups:
        for L in report.lengths:
            c = report.cell(variant, scaling, L, targets)
            if c is None:
                continue
            stats = []
            for m in SUMMARIZED:
                s = c.summary(m)
                stats += [s.mean, s.sd, *(s.ci if s.ci else (None, None))]
            ppl, plo, phi = c.ppl
            t = targets
            rows.append([variant, scaling, L, c.n, _seeds(c.losses), t.reference_len, t.tokens, t.baseline_window,
                         t.baseline_stride, t.val_stream_tokens, t.document_order_seed, c.tokens, c.documents,
                         *stats, ppl, plo, phi, *c.ppl_range,
                         _mean_acc(c),
                         _pairing_text(c, "vs_none"), seed_list(c.none_seeds),
                         *_comparison_values(c.vs_none, VS_NONE),
                         reference_for(variant) if c.vs_reference else None, _pairing_text(c, "vs_reference"),
                         seed_list(c.reference_seeds), *_comparison_values(c.vs_reference, VS_VARIANT),
                         random_counterpart(variant) if c.vs_random else None, _pairing_text(c, "vs_random"),
                         seed_list(c.random_seeds), *_comparison_values(c.vs_random, VS_VARIANT)])
    return rows


def _mean_acc(c: Cell) -> float | None:
    """The mean accuracy over the seeds of the cell's losses: a diverged model's accuracy (its loss nan/inf, left out)
    is no sample either."""
    acc = [v for s, v in c.values.get("val_acc", {}).items() if s in c.losses]
    return statistics.fmean(acc) if acc else None


def write_length_csv(report: LengthReport, path: Path) -> None:
    with atomic_open(path) as f:
        w = csv.writer(f)
        w.writerow(CSV_COLUMNS)
        for row in _csv_rows(report):
            w.writerow(["" if v is None else (repr(v) if isinstance(v, float) else v) for v in row])


_STYLES = ("-", "--", "-.", ":", (0, (5, 1, 1, 1, 1, 1)), (0, (1, 3)))


def _styles(report: LengthReport) -> dict[tuple[str, str, Targets], tuple[Any, Any]]:
    """A color per variant and a line style per scaling, so each family reads at a glance."""
    variants = list(dict.fromkeys(v for v, _, _ in report.groups))
    scalings = list(dict.fromkeys(s for _, s, _ in sorted(report.groups, key=lambda g: (g[1] != NO_SCALING, g[1]))))
    colors = dict(zip(variants, _colors(len(variants)), strict=True))
    return {(v, s, t): (colors[v], _STYLES[scalings.index(s) % len(_STYLES)]) for v, s, t in report.groups}


def _set_title(report: LengthReport, targets: Targets) -> str:
    """What a row of panels adds to its titles: its targets, where the report holds several sets."""
    shown = report.targets_text(targets)
    return f" [{shown}]" if shown else ""


def _draw_metric(ax: Any, report: LengthReport, targets: Targets, metric: str, lengths: Sequence[int],
                 exp: bool = False) -> None:
    """One line per variant × scaling on ``targets``: the mean over seeds, its 95% CI as a band (two seeds or
    more)."""
    for (variant, scaling, t), (color, style) in _styles(report).items():
        if t != targets:
            continue
        points = [(L, s) for L in lengths if (c := report.cell(variant, scaling, L, t)) is not None
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
    else:
        ax.text(0.5, 0.5, "no length evaluated here", transform=ax.transAxes, ha="center", color="gray")
    ax.grid(alpha=0.3, which="both")


def plot_length_curves(report: LengthReport, path: Path) -> None:
    """Degradation, loss beyond T and whole-window perplexity against length; bands: 95% CI of the mean. One row of
    panels per set of targets: lines on other windows never share axes, where their gap would be the windows'."""
    from matplotlib.ticker import FuncFormatter

    sets = report.target_sets
    height = 5 * len(sets)
    fig = _new_figure((17, height))
    axes = fig.subplots(len(sets), 3, squeeze=False)
    plain = FuncFormatter(lambda v, _: f"{v:,.4g}")  # 812 rather than 8.12x10^2
    for targets, (ax_deg, ax_beyond, ax_ppl) in zip(sets, axes, strict=True):
        on = _set_title(report, targets)
        t = targets.reference_len
        lengths = sorted({c.length for c in report.cells if c.targets == targets})
        beyond = [L for L in lengths if t is None or L > t]
        _draw_metric(ax_deg, report, targets, "degradation", beyond)
        ax_deg.axhline(0, color="gray", linewidth=1)
        ax_deg.set(xlabel="evaluation length L (tokens)", ylabel="degradation beyond T (nats)",
                   title="loss beyond T − the run's own sliding-window baseline" + on)
        _draw_metric(ax_beyond, report, targets, "loss_beyond_train", beyond)
        ax_beyond.set(xlabel="evaluation length L (tokens)", ylabel="loss at positions >= T (nats)",
                      title="loss beyond the training length" + on)
        _draw_metric(ax_ppl, report, targets, "val_loss", lengths, exp=True)
        if t is not None:
            ax_ppl.axvline(t, color="gray", linestyle=":", linewidth=1)
        ax_ppl.set_yscale("log")
        ax_ppl.yaxis.set_major_formatter(plain)
        low, high = ax_ppl.get_ylim()
        if 0 < low and high / low < 10:  # within a decade the minor ticks are the only ones: label them
            ax_ppl.yaxis.set_minor_formatter(plain)
        ax_ppl.set(xlabel="evaluation length L (tokens; dotted: T)", ylabel="whole-window perplexity",
                   title="whole window (inside and beyond T)" + on)
        ax_ppl.legend(fontsize=7)
    fig.suptitle("mean over seeds; bands: 95% CI of the mean (not the seeds' spread)"
                 + ("; one row per set of targets" if len(sets) > 1 else ""))
    _save(fig, path, rect=(0, 0, 1, 1 - 0.4 / height))


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
    sliding-window baseline (thin dotted): where a scaling stops generalizing, and whether it beats the baseline.
    One panel per set of targets, as in :func:`plot_length_curves`."""
    sets = report.target_sets
    fig = _new_figure((9, 5 * len(sets)))
    axes = fig.subplots(len(sets), 1, squeeze=False)[:, 0]
    styles = _styles(report)
    for targets, ax in zip(sets, axes, strict=True):
        longest = max(c.length for c in report.cells if c.targets == targets)
        drawn, baselines = 0, set()
        for (variant, scaling, t), (color, style) in styles.items():
            if t != targets:
                continue
            group = [r for r in report.results if (r.variant, r.scaling, r.targets) == (variant, scaling, t)]
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
        if targets.reference_len is not None:
            ax.axvline(targets.reference_len, color="gray", linestyle=":", linewidth=1)
        ax.set(xlabel="position (dotted: T)", ylabel="mean loss (nats)",
               title=f"loss against position at length {longest} (mean over seeds){_set_title(report, targets)}")
        ax.grid(alpha=0.3)
        if drawn:
            ax.legend(fontsize=7)
    _save(fig, path)


def write_length_report(report: LengthReport, out_dir: PathLike) -> Path:
    """Write the Markdown, CSV and both plots into ``out_dir``, whole (:func:`llm.fileio.write_files_whole`: an
    interrupt or a failure while plotting leaves ``out_dir`` as it was, never a new Markdown beside an earlier
    report's plots); returns the Markdown's path."""
    return write_files_whole(lambda tmp: _write_length_files(report, tmp), Path(out_dir))


def _write_length_files(report: LengthReport, out: Path) -> Path:
    md = out / MD_FILE
    write_text_atomic(md, length_markdown(report))
    write_length_csv(report, out / CSV_FILE)
    plot_length_curves(report, out / CURVES_FILE)
    plot_position_loss(report, out / POSITION_FILE)
    return md
