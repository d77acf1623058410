"""Length generalization: the loss beyond the training length and its degradation, per RoPE variant × scaling ×
evaluation length, over seeds.

Reads what ``python -m llm.eval_lengths`` wrote into run dirs (``eval_lengths/<label>.json``,
:mod:`llm.evaluation.metrics` defines each number) and computes every statistic; :mod:`llm.report.length_writers`
writes them, into a sweep dir (or any dir):

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

import json
import logging
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from llm.report.analysis import DEFAULT_MARGIN
from llm.report.errors import NoRunsError
from llm.report.mixed import check_same_data, config_differences, describe_differences
from llm.report.runs import DEFAULT_PACKING, PathLike, Run, as_float, load_all_runs, with_packing
from llm.report.stats import Comparison, compare_paired, compare_unpaired, pairing_seeds, t_interval

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
    #: comparison -> the seeds of this cell and its counterpart together: a pairing on fewer left some out
    seeds_of: dict[str, int] = field(default_factory=dict)

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
            c.seeds_of["vs_none"] = len(set(c.losses) | set(ref.losses))
        reference = reference_for(c.variant)
        ref = None if c.variant == reference else _counterpart(report, c, "vs_reference", reference, c.scaling)
        if ref is not None:
            c.vs_reference, c.reference_seeds = _compare(c, ref, VS_VARIANT)
            c.seeds_of["vs_reference"] = len(set(c.losses) | set(ref.losses))
        counterpart = random_counterpart(c.variant)
        ref = None if counterpart is None else _counterpart(report, c, "vs_random", counterpart, c.scaling)
        if ref is not None:
            c.vs_random, c.random_seeds = _compare(c, ref, VS_VARIANT)
            c.seeds_of["vs_random"] = len(set(c.losses) | set(ref.losses))
    return report
