"""From loaded runs to the numbers a report shows: groups per implementation, the reference, comparisons.

Runs are grouped by implementation (rope, variant, compute dtype). Only completed runs enter the
statistics; the others stay in their group's ``excluded`` list so the report can list them.

Each implementation is compared with one *reference* group (:func:`select_reference`), seed by seed
(see :func:`compare_group`); the numbers themselves come from :mod:`llm.report.stats`.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from omegaconf import OmegaConf

from llm.config_schema import CONF_DIR
from llm.report.errors import ReferenceNotFoundError
from llm.report.runs import DEFAULT_PACKING, Run
from llm.report.stats import (
    PAIRED,
    Comparison,
    compare_paired,
    compare_unpaired,
    holm,
    mean_std,
    pairing_seeds,
    seeds_for_effect,
    t_interval,
)

log = logging.getLogger(__name__)

# (summary key, column title, decimals)
METRICS: tuple[tuple[str, str, int], ...] = (
    ("train_time_s", "Training Time (s)", 1),
    ("val_loss", "Val Loss", 4),
    ("val_acc", "Val Accuracy", 4),
    ("val_ppl", "Val Perplexity", 2),
    ("tokens_per_s", "tokens/s", 0),
)
SHORT_METRICS = ("train_time_s", "val_loss", "val_acc", "val_ppl")

#: Metrics compared against the reference: (summary key, lower is better).
COMPARED: tuple[tuple[str, bool], ...] = (("val_loss", True), ("val_acc", False))

DEFAULT_MARGIN = 0.01  # nats of val loss
DEFAULT_ACC_MARGIN = 0.005  # val accuracy, absolute (0.5 percentage points)


def margin_problem(value: object, accuracy: bool = False) -> str | None:
    """Why ``value`` cannot be an equivalence margin (``... must be ...``), or None: the one rule of the report's
    Python call, ``scripts.compare``'s flags and the sweep callback's settings. A positive finite number (a negative
    one would turn every verdict, an infinite one make every pair equivalent); of accuracy, a fraction, below 1."""
    try:
        number = None if isinstance(value, bool) else float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        number = None
    if number is None or not (number > 0 and math.isfinite(number)):
        return "must be a positive finite number" + (" below 1 (accuracy is a fraction)" if accuracy else "")
    if accuracy and number >= 1:
        return "must be a positive number below 1 (accuracy is a fraction; 0.005 is half a point)"
    return None


Key = tuple[str, str | None, str | None, str]


def _by_seed(r: Run) -> tuple[bool, int, str]:
    return (r.seed is None, r.seed or 0, r.name)


@dataclass
class Group:
    """All runs of one implementation (rope, variant, compute dtype, packing)."""

    key: Key
    runs: list[Run]  # completed runs: the ones the statistics use
    excluded: list[Run]  # runs with status != completed (crashed jobs included)
    stats: dict[str, tuple[float | None, float | None, int]] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return self.runs[0].label if self.runs else (self.excluded[0].label if self.excluded else "?")

    @property
    def n(self) -> int:
        """Samples: distinct seeds, plus each completed run without a seed (a repeated seed is one draw)."""
        return len({r.seed for r in self.runs if r.seed is not None}) + sum(r.seed is None for r in self.runs)

    @property
    def seeds(self) -> list[int | None]:
        return [r.seed for r in self.runs]

    def mean(self, metric: str) -> float | None:
        return self.stats[metric][0]

    def std(self, metric: str) -> float | None:
        return self.stats[metric][1]

    def per_seed(self, metric: str) -> dict[int, float]:
        """Seed -> value of the completed runs; several runs of one seed are averaged into one value."""
        return {s: float(np.mean(v)) for s, v in self._seed_values(metric).items()}

    def _seed_values(self, metric: str) -> dict[int, list[float]]:
        acc: dict[int, list[float]] = {}
        for r in self.runs:
            v = r.value(metric)
            if r.seed is not None and v is not None and math.isfinite(v):
                acc.setdefault(r.seed, []).append(v)
        return dict(sorted(acc.items()))

    def nonfinite_seeds(self, metric: str) -> list[int]:
        """Seeds whose completed runs all ended at a nan or ±inf ``metric`` (an eval that diverged): no sample of
        the statistics, and named apart from seeds that have no run to pair with."""
        finite = self._seed_values(metric)
        bad = {r.seed for r in self.runs if r.seed is not None and r.seed not in finite
               and (v := r.value(metric)) is not None and not math.isfinite(v)}
        return sorted(bad)

    def samples(self, metric: str) -> list[float | None]:
        """One value per seed (its runs averaged) and one per run without a seed: what mean ± std are over, so a
        seed run again (a sweep extended by more seeds, with one repeated as a check) is not counted twice."""
        return [*self.per_seed(metric).values(), *(r.value(metric) for r in self.runs if r.seed is None)]

    def repeated_seeds(self) -> dict[int, list[float]]:
        """Seeds with more than one completed run: their final val losses."""
        return {s: v for s, v in self._seed_values("val_loss").items() if len(v) > 1}

    def summary_mean(self, key: str) -> float | None:
        """Mean of a summary value over completed runs that have it (None when none has: old runs)."""
        return mean_std(r.value(key) for r in self.runs)[0]


def _sort_key(value: float | None) -> float:
    return math.inf if value is None or math.isnan(value) else value


def group_runs(runs: Sequence[Run]) -> list[Group]:
    """Group runs by implementation and compute statistics; ordered by mean val loss (best first), implementations
    with a seed whose val loss is nan/inf last: their mean is over the seeds that did not diverge, and ranked by it
    a kernel that diverged once could head the table."""
    groups: dict[Key, Group] = {}
    done = {r.key for r in runs if r.completed}
    for r in runs:
        if not r.completed and (key := _incomplete_key(r, done)) != r.key:
            r.identity = key
        g = groups.setdefault(r.key, Group(key=r.key, runs=[], excluded=[]))
        (g.runs if r.completed else g.excluded).append(r)
    for g in groups.values():
        g.runs.sort(key=_by_seed)
        g.excluded.sort(key=_by_seed)
        for metric, _, _ in METRICS:
            g.stats[metric] = mean_std(g.samples(metric))
        _note_repeats(g)
    return sorted(groups.values(),
                  key=lambda g: (bool(g.nonfinite_seeds("val_loss")), _sort_key(g.mean("val_loss")), g.label))


def _incomplete_key(r: Run, done: set[Key]) -> Key:
    """The implementation a run that did not complete belongs to. Its own record may not say it as a completed run's
    does: a completed run records the compute dtype its built RoPE reports (``triton_v4``: float32), a job refused or
    killed before that only its config's (none but torch's), and a job a sweep never started only its ``rope=``
    preset (``torch_full``, read from ``conf/rope/``). Grouped as recorded, such a job would stand as an
    implementation of its own (``triton_v4 (partial)`` beside ``triton_v4 (partial, float32)``), and the
    implementation it failed for would count no excluded run. So it joins the one completed implementation its
    record fits (rope, packing, and its variant and compute dtype where recorded), else keeps its own key (a
    preset's resolved)."""
    name, variant, dtype, packing = r.key
    preset = _rope_preset(name) if name != "?" else None
    if preset is not None:  # what the run's record leaves out is its preset's (a preset names no packing)
        name, variant, dtype = preset[0], variant or preset[1], dtype or preset[2]
    fits = [k for k in done if k[0] == name and k[3] == packing
            and (name == "none" or variant is None or k[1] == variant) and (dtype is None or k[2] == dtype)]
    return fits[0] if len(fits) == 1 else (name, variant, dtype, packing)


def _note_repeats(g: Group) -> None:
    """Say which seeds ran more than once and whether their runs agree: on the deterministic recipe a repeated
    seed must end at the same val loss, so a difference means the runs are not reproducible (or not the same)."""
    for seed, losses in g.repeated_seeds().items():
        if max(losses) == min(losses):
            log.info("%s: seed %d ran %d times, to the same val loss: one sample", g.label, seed, len(losses))
        else:
            log.warning("%s: seed %d ran %d times and ended at different val losses (%s): averaged into one sample; "
                        "runs of one seed on a deterministic recipe should agree", g.label, seed, len(losses),
                        ", ".join(repr(v) for v in losses))  # every digit: they may differ in the last one


def repeat_notes(groups: Sequence[Group], mixed: bool) -> list[str]:
    """The report's notes on seeds that ran more than once and ended apart: each was averaged into one sample, which
    the report must say as the log does (a reader of the file sees no log). Runs of different configs
    (``mixed``: ``--allow-mixed``) with one seed are such runs too: their sample averages the configs."""
    notes = []
    for g in groups:
        for seed, losses in g.repeated_seeds().items():
            if max(losses) != min(losses):
                why = ("runs of different configs (--allow-mixed) that share a seed are averaged alike" if mixed
                       else "runs of one seed on a deterministic recipe should agree")
                notes.append(f"**Repeated seed**: {g.label}, seed {seed}: {len(losses)} runs ended at different val "
                             f"losses ({', '.join(f'{v:.4f}' for v in losses)}), averaged into one sample; {why}.")
    return notes


def _default_reference(groups: Sequence[Group]) -> Group | None:
    """The float32 ``torch`` group; with several variants or packings, ``partial`` on random windows (the project's
    defaults) before the one with the most seeds: a failed seed must not switch the reference and flip every Δ."""
    refs = [g for g in groups if g.n and g.key[0] == "torch" and g.key[2] == "float32"]
    refs.sort(key=lambda g: (g.key[1] != "partial", g.key[3] != DEFAULT_PACKING, -g.n, g.label))
    return refs[0] if refs else None


def reference_fallback_note(groups: Sequence[Group], ref: Group | None) -> str | None:
    """A note where the default reference is not ``torch (partial)`` on random windows because those runs all failed:
    every Δ then means something else, which the reader must be told (the header alone names the new reference)."""
    usual = [g for g in groups if g.key[0] == "torch" and g.key[1:] == ("partial", "float32", DEFAULT_PACKING)]
    if ref is None or not usual or usual[0] is ref or usual[0].n:
        return None
    return (f"**Reference**: {usual[0].label} has no completed run ({len(usual[0].excluded)} failed), so every Δ is "
            f"against {ref.label}; give --reference to choose another.")


def _rope_preset(name: str) -> tuple[str, str, str | None] | None:
    """(rope, variant, compute dtype or None) of the ``rope=<name>`` preset ``conf/rope/<name>.yaml``, if one exists:
    what ``--reference torch_full`` means, as the sweep that trained it was given."""
    path = CONF_DIR / "rope" / f"{name}.yaml"
    if "/" in name or not path.is_file():
        return None
    cfg = OmegaConf.load(path)
    return str(cfg.get("name")), str(cfg.get("variant", "partial")), cfg.get("compute_dtype")


def select_reference(groups: Sequence[Group], name: str | None = None) -> Group | None:
    """The group every other implementation is compared with.

    ``name`` is a full label (``"torch (partial, bfloat16)"``), a registry name (``"triton_v4"``, which must then
    match exactly one implementation with completed runs) or a ``rope=`` preset (``"torch_full"``, and ``"torch"``
    where the runs have both variants: its file's variant and compute dtype). Without ``name``: the
    ``torch`` float32 group (None if the runs have none). Raises :class:`ReferenceNotFoundError`.
    """
    if name is None:
        return _default_reference(groups)
    done = [g for g in groups if g.n]
    have = ", ".join(repr(g.label) for g in done) or "none"
    exact = [g for g in done if g.label == name]
    matches = exact or [g for g in done if g.key[0] == name]
    preset = _rope_preset(name) if len(matches) != 1 else None
    if preset is not None:  # torch_full, or torch (partial, float32) where torch names several
        rope_name, variant, compute_dtype = preset
        matches = [g for g in done if g.key[:2] == (rope_name, variant)
                   and compute_dtype in (None, g.key[2])] or matches
    if len(matches) > 1 and len({g.key[:3] for g in matches}) == 1:  # one implementation on several packings
        matches = [g for g in matches if g.key[3] == DEFAULT_PACKING] or matches  # as the default reference does
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise ReferenceNotFoundError(f"reference {name!r} matches no implementation with completed runs; have: {have}")
    labels = ", ".join(repr(g.label) for g in matches)
    raise ReferenceNotFoundError(f"reference {name!r} matches several implementations ({labels}); give the full label")


@dataclass(frozen=True)
class WindowDelta:
    """Δ val loss per val window of the final eval, averaged over the paired seeds.

    The val set is one fixed sample of windows, the same for every run, so the seed t-test cannot see how
    Δ would move on another sample of the same text (the window × implementation interaction). ``se`` is
    the standard error of the mean Δ over windows: std over windows of the seed-averaged Δ, over √windows.
    """

    windows: int
    seeds: int  # paired seeds whose runs both saved the final eval's windows
    mean: float
    se: float | None  # None with a single window


@dataclass(frozen=True)
class SeedMatch:
    """How one metric's seeds were matched against the reference's. Each metric has its own: a seed whose val loss
    is nan pairs on its accuracy, so the val loss and accuracy tables may rest on different seeds."""

    seeds: list[int] = field(default_factory=list)  # the paired seeds (empty when unpaired)
    unmatched: list[int | None] = field(default_factory=list)  # the implementation's seeds without a reference value
    reference_only: list[int | None] = field(default_factory=list)  # the reference's seeds without an impl value
    nonfinite: list[int] = field(default_factory=list)  # the implementation's seeds whose value is nan/inf
    reference_nonfinite: list[int] = field(default_factory=list)  # the reference's seeds whose value is nan/inf
    common: list[int] = field(default_factory=list)  # seeds both have a value of: ``seeds``, or (unpaired) too few


@dataclass
class GroupComparison:
    """One implementation against the reference: per compared metric, plus how the seeds were matched."""

    group: Group
    reference: Group
    metrics: dict[str, Comparison]  # keyed by summary key (val_loss, val_acc)
    matches: dict[str, SeedMatch]  # keyed as ``metrics``
    window: WindowDelta | None = None  # None when the runs saved no per-window losses (older runs) or unpaired

    @property
    def loss(self) -> Comparison:
        return self.metrics["val_loss"]

    @property
    def seeds(self) -> list[int]:
        """The seeds val loss was paired on (empty when unpaired)."""
        return self.matches.get("val_loss", SeedMatch()).seeds

    @property
    def unmatched(self) -> list[int | None]:
        """The implementation's seeds without a reference run's val loss."""
        return self.matches.get("val_loss", SeedMatch()).unmatched

    @property
    def reference_only(self) -> list[int | None]:
        """The reference's seeds without a val loss of the implementation (left out of a pairing)."""
        return self.matches.get("val_loss", SeedMatch()).reference_only

    @property
    def seeds_for_margin(self) -> int | None:
        """Paired seeds for the better/worse verdict's t-test (at :attr:`Comparison.detect_alpha`, as the MDE) to
        detect a Δ val loss of ±ε at 80% power (σ = paired std)."""
        c = self.loss
        return None if c.sd is None else seeds_for_effect(c.sd, c.margin, alpha=c.detect_alpha)

    @property
    def seed_se(self) -> float | None:
        """Standard error of the mean paired Δ val loss over seeds (``s_d / √n``), beside :attr:`window`'s SE."""
        c = self.loss
        return None if c.sd is None or c.method != PAIRED else c.sd / math.sqrt(c.n)


def _pairing(group: Group, ref: Group, metric: str) -> list[int] | None:
    """The seeds to pair on, or None for Welch on all finite runs (:func:`llm.report.stats.pairing_seeds`)."""
    runs = (len(_finite(group.samples(metric))), len(_finite(ref.samples(metric))))
    return pairing_seeds(group.per_seed(metric), ref.per_seed(metric), runs)


def _windows_by_seed(group: Group) -> dict[int, dict]:
    """Seed -> its final eval's per-window losses (``starts``, ``loss``); a seed's runs that saved the same windows
    averaged window by window, as :meth:`Group.per_seed` averages their final losses."""
    acc: dict[int, list[dict]] = {}
    for r in group.runs:
        w = r.eval_windows() if r.seed is not None else None
        if w is not None:
            acc.setdefault(r.seed, []).append(w)
    out = {}
    for seed, ws in acc.items():
        same = [w for w in ws if w["starts"] == ws[0]["starts"] and len(w["loss"]) == len(ws[0]["loss"])]
        out[seed] = {"starts": ws[0]["starts"], "loss": np.mean([np.asarray(w["loss"], dtype=float) for w in same],
                                                                axis=0)}
    return out


def window_delta(group: Group, ref: Group, seeds: Sequence[int]) -> WindowDelta | None:
    """:class:`WindowDelta` over the ``seeds`` whose runs both saved per-window losses of the same windows
    (same start offsets) at their final eval; None when no seed has them."""
    mine, theirs = _windows_by_seed(group), _windows_by_seed(ref)
    deltas = []
    for s in seeds:
        a, b = mine.get(s), theirs.get(s)
        if a is None or b is None or a["starts"] != b["starts"] or len(a["loss"]) != len(b["loss"]):
            continue
        deltas.append(a["loss"] - b["loss"])
    if not deltas or len({len(d) for d in deltas}) != 1:
        return None
    per_window = np.mean(deltas, axis=0)
    se = float(np.std(per_window, ddof=1) / math.sqrt(len(per_window))) if len(per_window) > 1 else None
    return WindowDelta(len(per_window), len(deltas), float(np.mean(per_window)), se)


def _finite(values: Sequence[float | None]) -> list[float]:
    return [v for v in values if v is not None and math.isfinite(v)]


def _distinct(seeds: Sequence[int | None]) -> list[int | None]:
    return list(dict.fromkeys(seeds))


def compare_group(group: Group, ref: Group, margin: float, acc_margin: float) -> GroupComparison:
    """Every :data:`COMPARED` metric of ``group`` against ``ref`` (paired by seed where enough seeds match, else Welch
    on all finite runs: :func:`llm.report.stats.pairing_seeds`), and per metric how the seeds were matched
    (:class:`SeedMatch`): seeds whose value is nan/inf are named as such, not as unmatched."""
    out: dict[str, Comparison] = {}
    matches: dict[str, SeedMatch] = {}
    for metric, lower_is_better in COMPARED:
        eps = margin if metric == "val_loss" else acc_margin
        mine, theirs = group.per_seed(metric), ref.per_seed(metric)
        bad, ref_bad = group.nonfinite_seeds(metric), ref.nonfinite_seeds(metric)
        paired = _pairing(group, ref, metric)
        common = sorted(mine.keys() & theirs.keys())
        left = {*common, *bad, *ref_bad}  # a seed with a nan/inf on either side is named as that, not unmatched
        unmatched = [s for s in _distinct(group.seeds) if s not in left]
        reference_only = [s for s in _distinct(ref.seeds) if s not in left]
        if paired is not None:
            out[metric] = compare_paired([mine[s] for s in paired], [theirs[s] for s in paired], eps, lower_is_better)
            matches[metric] = SeedMatch(paired, unmatched, reference_only, bad, ref_bad, common)
            continue
        values, ref_values = (_finite(g.samples(metric)) for g in (group, ref))  # a repeated seed is one sample
        if values and ref_values:
            out[metric] = compare_unpaired(values, ref_values, eps, lower_is_better)
        matches[metric] = SeedMatch([], unmatched, reference_only, bad, ref_bad, common)
    seeds = matches["val_loss"].seeds
    return GroupComparison(group, ref, out, matches, window_delta(group, ref, seeds) if seeds else None)


def compare_groups(groups: Sequence[Group], ref: Group | None, margin: float,
                   acc_margin: float) -> list[GroupComparison]:
    """Every group with completed runs but ``ref`` against ``ref``; each metric's verdicts then decided
    together, at p-values Holm-adjusted over the implementations (:func:`llm.report.stats.holm`)."""
    if ref is None:
        return []
    comparisons = [compare_group(g, ref, margin, acc_margin) for g in groups if g.n and g is not ref]
    for metric, _ in COMPARED:
        present = [gc for gc in comparisons if metric in gc.metrics]
        for gc, decided in zip(present, holm([gc.metrics[metric] for gc in present]), strict=True):
            gc.metrics[metric] = decided
    return comparisons


def _curve_by_seed(group: Group) -> dict[int, dict[int, float]]:
    """Seed -> {step: val loss}; several runs of one seed are averaged step by step."""
    acc: dict[int, dict[int, list[float]]] = {}
    for r in group.runs:
        if r.seed is None:
            continue
        for step, loss, _ in r.val_curve():
            acc.setdefault(r.seed, {}).setdefault(step, []).append(loss)
    return {s: {step: float(np.mean(v)) for step, v in c.items()} for s, c in acc.items()}


def paired_delta_curve(cmp: GroupComparison) -> list[tuple[int, int, float, float | None, float | None]]:
    """``(step, n, mean Δ, CI low, CI high)`` of Δ val loss (impl − reference) over the paired seeds.

    A seed contributes at a step only when both its runs logged an eval there; the 95% CI is the
    Student-t interval over those seeds (None with one seed).
    """
    mine, theirs = _curve_by_seed(cmp.group), _curve_by_seed(cmp.reference)
    per_step: dict[int, list[float]] = {}
    for s in cmp.seeds:
        a, b = mine.get(s, {}), theirs.get(s, {})
        for step in a.keys() & b.keys():
            per_step.setdefault(step, []).append(a[step] - b[step])
    return [(step, len(d), *t_interval(d)) for step, d in sorted(per_step.items())]
