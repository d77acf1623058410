"""``comparison.md``: the report a person reads, verdicts first, details after.

Section order is the order of questions: is my kernel OK (verdicts), what was run (config), what
went wrong (failed runs), the numbers (summary, paired statistics), can I trust them (variance
budget), and the raw material (fidelity, per-seed runs, plots).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from llm.config_keys import flatten
from llm.fileio import write_text_atomic
from llm.report.analysis import METRICS, SHORT_METRICS, Group, GroupComparison, SeedMatch
from llm.report.compare import CURVES_FILE, DELTA_FILE, SPEED_FILE, Report
from llm.report.fidelity import fidelity_rows
from llm.report.mixed import MISSING, describe_data, describe_differences, fmt_value
from llm.report.runs import Run, get_dotted
from llm.report.sharing import concurrent_runs, on_cpu
from llm.report.stats import (
    ALPHA,
    ALPHA_DIFFERENCE,
    BETTER,
    EQUIVALENT,
    INCONCLUSIVE,
    MAX_SEEDS,
    MIN_PARTIAL_PAIRS,
    SINGLE,
    WELCH,
    WORSE,
    Comparison,
    seeds_for_equivalence,
)

MINUS = "\u2212"

#: When the report pairs by seed and when it runs Welch's test instead (:func:`llm.report.stats.pairing_seeds`).
PAIRING_RULE = (f"paired t-test on the seeds both have where they are all the runs of one side, or at least "
                f"{MIN_PARTIAL_PAIRS} seeds and most of each side's runs; otherwise Welch's unequal-variance test "
                "on all the finite runs of both (pairing would leave out runs that Welch can use)")


def fmt(v: float | None, decimals: int) -> str:
    """A number with thousands separators; ``n/a`` for missing or NaN."""
    if v is None or math.isnan(v):
        return "n/a"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return f"{v:,.{decimals}f}"


def fmt_pm(mean: float | None, std: float | None, decimals: int) -> str:
    """``mean ± std``; ``± n/a`` with a single seed (the std is undefined, not 0)."""
    return "n/a" if mean is None else f"{fmt(mean, decimals)} ± {fmt(std, decimals)}"


def _stat_cell(g: Group, metric: str, decimals: int) -> str:
    """``mean ± std`` of ``metric`` over the group's seeds, with its own ``(n=k)`` where fewer than the group's
    n seeds have a finite value (a nan/inf or missing one is left out), so the n column is not read as its n."""
    mean, std, count = g.stats[metric]
    text = fmt_pm(mean, std, decimals)
    return text if mean is None or count == g.n else f"{text} (n={count})"


def signed(v: float | None, decimals: int = 4) -> str:
    """``+0.0003`` / ``−0.0021`` (a true minus sign, so columns of deltas line up and read as numbers)."""
    return "n/a" if v is None else f"{v:+.{decimals}f}".replace("-", MINUS)


def fmt_p(p: float | None) -> str:
    """A p-value to 4 decimals; tiny ones as ``<0.0001`` (more digits would suggest false precision)."""
    if p is None:
        return "n/a"
    return "<0.0001" if p < 1e-4 else f"{p:.4f}"


def md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """A GitHub Markdown table; ``|`` inside cells is escaped so labels and messages cannot break it."""
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return out


def _ci(c: Comparison | tuple[float, float] | None, decimals: int = 4) -> str:
    ci = c.ci if isinstance(c, Comparison) else c
    return "no CI (n=1)" if ci is None else f"[{signed(ci[0], decimals)}, {signed(ci[1], decimals)}]"


def _needed(c: Comparison) -> str:
    """The seeds TOST would need at 80% power if the true Δ were 0: where that is no more than the seeds run, it
    is the observed Δ, not the seed count, that keeps the interval from ±ε. The count is a plan for a true Δ of 0,
    and says so: "about 3 needed" alone reads as "3 seeds settle it", which an observed Δ outside ±ε contradicts."""
    if c.seeds_needed is not None and c.seeds_needed <= c.n:
        return f"enough for equivalence if the true Δ were 0: the observed Δ keeps it outside ±{c.margin:g}"
    count = f"more than {MAX_SEEDS:,}" if c.seeds_needed is None else f"about {c.seeds_needed}"
    outside = f"; the observed Δ is outside ±{c.margin:g}" if abs(c.delta) >= c.margin else ""
    return f"{count} needed for equivalence if the true Δ were 0{outside}"


def _holm_p(c: Comparison) -> str:
    """``p = 0.0012`` for a family of one, ``Holm p = 0.0036 (3 tests)`` for a sweep's implementations."""
    p = fmt_p(c.p_holm)
    p = p if p.startswith("<") else f"= {p}"
    return f"p {p}" if c.n_tests <= 1 else f"Holm p {p} ({c.n_tests} tests)"


def _samples(c: Comparison) -> str:
    """What the test ran on: ``3 seeds`` (paired) or ``5 vs 4 runs`` (Welch)."""
    return f"{c.n} vs {c.n_ref} runs" if c.method == WELCH else f"{c.n} seeds"


def verdict_text(c: Comparison, unit: str = "nats") -> str:
    """The verdict cell: ``better``, ``worse``, ``equivalent within ±ε``, ``inconclusive (n seeds; about N needed)``."""
    eps = f"±{c.margin:g}{' ' + unit if unit else ''}"
    if c.verdict == SINGLE:
        return f"n={c.n}: no CI (add seeds)" if c.method != WELCH else f"n={c.n} vs {c.n_ref}: too few seeds for Welch"
    if c.verdict in (BETTER, WORSE):
        return c.verdict + (f" (but within {eps})" if c.p_tost is not None and c.p_tost < ALPHA else "")
    if c.verdict == EQUIVALENT:
        return f"equivalent within {eps}"
    assert c.verdict == INCONCLUSIVE
    return f"inconclusive ({_samples(c)}; {_needed(c)})"


def margin_text(m: float) -> str:
    """The tightest margin ``m`` to two significant digits, rounded up: TOST calls the pair equivalent at any margin
    above ``m`` and at none below it, so a margin rounded down (0.0048 for 0.00482) would claim an equivalence the
    data do not support."""
    if m <= 0.0 or not math.isfinite(m):
        return f"{m:.2g}"
    shown = float(f"{m:.2g}")
    if shown <= m:
        shown += 10.0 ** (math.floor(math.log10(shown)) - 1)
    return f"{shown:.2g}"


def _supported(c: Comparison, unit: str = "nats") -> str:
    """"the data support ±m" (the tightest margin, from the 90% CI, rounded up), or "" when there is none."""
    if c.tightest_margin is None:
        return ""
    return f"; the data support equivalence within ±{margin_text(c.tightest_margin)}{' ' + unit if unit else ''}"


def _pairing_note(c: Comparison) -> str:
    pc = c.pairing
    if pc is None or pc.helps is not False:
        return ""
    return (f"; pairing by seed did not help (var(paired)/var(unpaired) = {pc.var_ratio:.2f}): Welch 95% CI "
            f"{_ci(pc.welch_ci)}")


def verdict_line(gc: GroupComparison) -> str:
    """One plain-language line per implementation, on val loss (the quality measure the sweep is for)."""
    return _verdict(gc) + _no_spread_note(gc.loss) + _diverged_warning(gc, "val_loss")


def _no_spread_note(c: Comparison) -> str:
    """Where every seed gave the same Δ (paired) or every run on each side the same value (Welch) the interval has
    zero width: the verdict then rests on no measured seed-to-seed noise, which a reader of ``[+0.0000, +0.0000]``
    should be told (runs that are identical up to a shift, as bit-equal training gives, produce it)."""
    if c.ci is None or c.ci[0] != c.ci[1]:
        return ""
    same = "every seed gave the same Δ" if c.method != WELCH else "every run on each side gave the same value"
    what = "the runs are identical" if c.delta == 0.0 else "the runs differ by one shift on every seed"
    return f"; {same}, so the interval has zero width and no seed-to-seed noise was measured: {what}"


def _verdict(gc: GroupComparison) -> str:
    c, me, ref = gc.loss, gc.group.label, gc.reference.label
    eps = f"±{c.margin:g} nats"
    n = _test_n(c, gc.matches.get("val_loss"))
    numbers = f"{n}, Δ = {signed(c.delta)} {_ci(c)}"
    windows = ("" if gc.window is None or gc.window.se is None
               else f"; SE over {gc.window.windows} val windows {gc.window.se:.2g}")
    m = gc.matches.get("val_loss")
    if m is not None and (m.nonfinite or m.reference_nonfinite):  # a diverged eval is news, not a pairing detail
        sides = [f"seed(s) {seed_list(m.nonfinite)} of {me}"] * bool(m.nonfinite)
        sides += [f"seed(s) {seed_list(m.reference_nonfinite)} of {ref}"] * bool(m.reference_nonfinite)
        windows += f"; left out, their val loss is nan/inf: {' and '.join(sides)}"
    if c.verdict == SINGLE:
        return f"{me}: one seed only against {ref} ({n}, Δ = {signed(c.delta)}{windows}; no CI: add seeds)"
    tail = _supported(c) + _pairing_note(c)
    if c.verdict in (BETTER, WORSE):
        within = f"; the difference is within {eps}" if c.p_tost is not None and c.p_tost < ALPHA else ""
        return f"{me}: {c.verdict} than {ref} ({numbers}, {_holm_p(c)}{windows}){within}{_pairing_note(c)}"
    if c.verdict == EQUIVALENT:
        return f"{me}: equivalent to {ref} within {eps} ({numbers}{windows}){tail}"
    return f"{me}: inconclusive ({_samples(c)}; {_needed(c)}) against {ref} at {eps} ({numbers}{windows}){tail}"


def _diverged_warning(gc: GroupComparison, metric: str) -> str:
    """`` **but seed(s) 1 of 3 of X ended with a nan/inf val loss ...**`` where the implementation's own runs
    diverged, "" otherwise. The statistics leave such runs out, so without this a kernel that diverged on one seed
    in three reads "equivalent" on the two that did not: the verdict is about its finite runs only, and says so.
    (A diverged reference run is named in the numbers; it says nothing against the implementation.)"""
    m = gc.matches.get(metric)
    if m is None or not m.nonfinite:
        return ""
    what = "val loss" if metric == "val_loss" else metric.replace("_", " ")
    return (f"; **but seed(s) {seed_list(m.nonfinite)} of {gc.group.label} ended with a nan/inf {what} (diverged, "
            f"{len(m.nonfinite)} of its {gc.group.n} run(s)): the verdict covers only its finite runs**")


def _test_n(c: Comparison, m: SeedMatch | None) -> str:
    """The test and what it ran on: ``n=5`` (every run paired), ``n=3 paired, 2 run(s) without a counterpart left
    out``, ``unpaired (Welch), n=5 vs 5`` with the seeds in common named where there were too few to pair on."""
    if c.method == WELCH:
        shared = f" (seeds {seed_list(m.common)} in common: too few to pair)" if m is not None and m.common else ""
        return f"unpaired (Welch), n={c.n} vs {c.n_ref}{shared}"
    left = 0 if m is None else len(m.unmatched) + len(m.reference_only)
    return f"n={c.n} paired, {left} run(s) without a counterpart left out" if left else f"n={c.n}"


def _verdict_section(report: Report) -> list[str]:
    if report.reference is None:
        return ["No reference implementation (`rope=torch`, compute_dtype float32) among the completed runs: "
                "pass `--reference NAME` for verdicts.", ""]
    lines = [f"Verdicts against **{report.reference.label}** (val loss; Δ = implementation − reference, "
             f"95% CI; better/worse: t-test at α = {ALPHA_DIFFERENCE:g}, Holm-adjusted over the implementations; "
             f"equivalent: TOST at ±{report.margin:g} nats, α = {ALPHA:g}):", ""]
    lines += [f"- {verdict_line(c)}" for c in report.comparisons if "val_loss" in c.metrics]
    if not report.comparisons:
        lines.append("- (no other implementation completed)")
    if report.diffs and report.comparisons:  # --allow-mixed: the Δ is not the implementation's alone
        keys = ", ".join(f"`{k}`" for k in report.diffs)
        lines += ["", f"**These runs also differ in {keys}** (`--allow-mixed`, see Mixed runs below): each Δ is the "
                  "implementation's and that difference's together, and the verdicts do not separate them."]
    return [*lines, ""]



def _common_section(runs: Sequence[Run], section: str) -> str:
    """``k=v, ...`` for the keys under ``section``; keys whose value varies show ``{a | b}``."""
    flat = [flatten(r.config.get(section)) if isinstance(r.config.get(section), dict) else {} for r in runs]
    keys = sorted({k for f in flat for k in f}, key=lambda k: (k != "name", k))
    items = []
    for k in keys:
        values = list(dict.fromkeys(fmt_value(f[k]) if k in f else MISSING for f in flat))
        items.append(f"{k}={values[0]}" if len(values) == 1 else f"{k}={{{' | '.join(values)}}}")
    return ", ".join(items) if items else "n/a"


def _distinct(values: Iterable[Any]) -> str:
    vals = [str(v) for v in dict.fromkeys(v for v in values if v is not None)]
    return ", ".join(vals) if vals else "n/a"


def _device(run: Run) -> Any:
    return run.summary.get("device", run.config.get("device"))


def _devices(runs: Iterable[Run]) -> list[str]:
    """The distinct devices the completed runs trained on, in order of appearance.

    Only a completed run's own record counts (``summary["device"]``, the device's name): a job refused or
    failed before training recorded at most the config's ``device=auto``, which names no device.
    """
    return [str(d) for d in dict.fromkeys(r.summary.get("device") for r in runs if r.completed) if d is not None]


def _config_section(report: Report) -> list[str]:
    runs = [r for r in report.runs if r.config]
    n_done = sum(r.completed for r in report.runs)
    lines = [
        f"{len(report.runs)} run(s), {n_done} completed, {sum(g.n > 0 for g in report.groups)} implementation(s); "
        "inputs: " + ", ".join(f"`{p}`" for p in report.inputs),
        "",
        "Common config:",
        "",
        f"- model: {_common_section(runs, 'model')}",
        f"- data: {_common_section(runs, 'data')}; "
        f"tokenizer: {_distinct(get_dotted(r.config, 'tokenizer.name') for r in runs)}",
        f"- steps: {_distinct(get_dotted(r.config, 'train.max_steps') for r in runs)} (train.max_steps); "
        f"batch_size={_distinct(get_dotted(r.config, 'train.batch_size') for r in runs)}, "
        f"grad_accum={_distinct(get_dotted(r.config, 'train.grad_accum') for r in runs)}",
        f"- device: {', '.join(_devices(report.runs)) or 'n/a'}",
        f"- git commit: {_distinct(r.summary.get('git_commit') for r in report.runs)}",
    ]
    fingerprints = _distinct(r.summary.get("code_fingerprint") for r in report.runs)
    if fingerprints != "n/a":  # the code's own hash: runs of one code match even where .git was a stale copy
        lines[-1] += f"; code fingerprint: {fingerprints}"
    devices = _devices(report.runs)
    if len(devices) > 1:
        lines += ["", f"**Runs from {len(devices)} devices** (the Per-seed table names each run's): a pair of runs "
                  "on two devices also differs by the devices' arithmetic (kernel choices, reduction orders), and "
                  "times and tokens/s compare only between runs on one device that ran alone or equally shared."]
    shared = {k: n for k, n in concurrent_runs(report.runs).items() if n > 1}
    if shared:
        what = _shared_kind(report.runs, shared)
        lines += ["", f"**Shared {what}**: {len(shared)} run(s) trained while other runs used the same {what} (up "
                  f"to {max(shared.values())} at once; the Per-seed table says how many): their Training Time and "
                  f"tokens/s measure a share of a {what}, not the implementation. Compare speed between runs that "
                  "ran alone, or with `python -m bench.step`."]
    if report.diffs:
        lines += ["", "**Mixed runs (`--allow-mixed`)**: these config keys differ between runs:", "", "```"]
        lines += [*describe_differences(report.diffs), "```"]
    data = _distinct(describe_data(fp) for r in report.runs if r.completed and (fp := r.data_fingerprint))
    if data != "n/a":
        lines.insert(lines.index("Common config:") + 4, f"- data fingerprint: {data}")
    for note in report.data_notes:
        lines += ["", note]
    return lines


def _failures_section(report: Report) -> list[str]:
    failed = report.failures
    if not failed:
        return []
    lines = ["", "## Failed or incomplete runs", "",
             f"{len(failed)} run(s) did not complete: they are left out of the statistics and plots.", ""]
    rows = [[f"`{r.name}`", r.label, "?" if r.seed is None else str(r.seed), r.status, r.message or "-"]
            for r in failed]
    return lines + md_table(["Job dir", "Implementation", "Seed", "Status", "Message"], rows)


def _summary_section(report: Report) -> list[str]:
    lines = [
        "",
        "## Summary",
        "",
        "Mean ± sample standard deviation (ddof=1) over seeds; `± n/a` when there is a single seed. "
        "n = number of seeds (completed runs); a cell over fewer (a nan/inf value left out) says its own n. "
        "Ordered by mean val loss, best first; an implementation with a seed whose val loss is nan/inf comes last.",
        "",
    ]
    header = ["Implementation", *(title for _, title, _ in METRICS), "n"]
    rows = [[g.label, *(_stat_cell(g, m, d) for m, _, d in METRICS), str(g.n)] for g in report.groups if g.n]
    lines += md_table(header, rows)
    excluded = [r for g in report.groups for r in g.excluded]
    if excluded:
        lines += [
            "",
            "Not included in the statistics or plots (status != completed): "
            + "; ".join(f"{r.label} seed {r.seed} (`{r.name}`, {r.status}"
                        f"{'' if r.summary.get('step') is None else ' at step ' + str(r.summary['step'])})"
                        for r in excluded),
        ]
    return lines


def _metric_cells(c: Comparison | None, unit: str) -> list[str]:
    """Δ, its 95% CI, the t-test's p, Holm's p, TOST's p, the tightest margin and the verdict of one metric."""
    if c is None:
        return ["n/a"] * 7
    holm = "n/a" if c.p_holm is None else fmt_p(c.p_holm) + (f" ({c.n_tests})" if c.n_tests > 1 else "")
    tight = "n/a" if c.tightest_margin is None else f"±{margin_text(c.tightest_margin)}"
    return [signed(c.delta), _ci(c), fmt_p(c.p), holm, fmt_p(c.p_tost), tight, verdict_text(c, unit)]


def seed_list(seeds: Iterable[Any]) -> str:
    """Seeds as the reports print them: ``0 1 4``."""
    return " ".join(map(str, seeds))


def _nonfinite_text(gc: GroupComparison, metric: str) -> str:
    """``non-finite: 2; reference non-finite: 3``: the seeds whose final ``metric`` is nan/inf, left out; "" if none."""
    m = gc.matches.get(metric)
    if m is None:
        return ""
    parts = [f"non-finite: {seed_list(m.nonfinite)}"] * bool(m.nonfinite)
    parts += [f"reference non-finite: {seed_list(m.reference_nonfinite)}"] * bool(m.reference_nonfinite)
    return "; ".join(parts)


def _pairing_cell(gc: GroupComparison, metric: str = "val_loss") -> str:
    """How ``metric``'s seeds were matched: each metric its own (a seed whose val loss is nan still pairs on its
    accuracy), with the seeds left out for a nan/inf value named apart from those without a counterpart."""
    c, m = gc.metrics[metric], gc.matches[metric]
    pairing = f"paired (seeds {seed_list(m.seeds)})" if c.method != WELCH else WELCH
    if m.common and c.method == WELCH:
        pairing += f"; seeds in common: {seed_list(m.common)} (too few to pair)"
    if m.unmatched and c.method != WELCH:
        pairing += f"; unmatched: {seed_list(m.unmatched)}"
    if m.reference_only and c.method != WELCH:
        pairing += f"; reference only: {seed_list(m.reference_only)}"
    bad = _nonfinite_text(gc, metric)
    return pairing + (f"; {bad}" if bad else "")


def _paired_row(gc: GroupComparison, metric: str, unit: str) -> list[str]:
    """One row of a paired-statistics table (n/a cells where the metric was never logged)."""
    c = gc.metrics.get(metric)
    if c is None:
        return [gc.group.label, f"n/a (no final {metric})", "n/a", *["n/a"] * 7]
    n = f"{c.n}" if c.method != WELCH else f"{c.n} vs {c.n_ref}"
    cells = _metric_cells(c, unit)
    m = gc.matches.get(metric)
    if m is not None and m.nonfinite:  # the verdict is about the finite runs: say so where the verdict is read
        cells[-1] += f" (finite runs only: seed(s) {seed_list(m.nonfinite)} diverged)"
    return [gc.group.label, _pairing_cell(gc, metric), n, *cells]


def _paired_section(report: Report) -> list[str]:
    if report.reference is None or not report.comparisons:
        return []
    ref = report.reference
    lines = [
        "",
        f"## Paired statistics against {ref.label}",
        "",
        f"Δ = implementation − {ref.label} (its {ref.n} seed(s); each row's n says on how many its test ran): per "
        "seed, then averaged, in a paired row; the difference of "
        "the two means over all their runs in an unpaired (Welch) row. Each column names its test. "
        f"95% CI and p: the {PAIRING_RULE}; the Pairing and n columns say which ran, on how many seeds or runs. "
        "Holm p: that p adjusted by Holm's method over the implementations "
        f"of the sweep (how many in brackets); **better/worse** when it is below {ALPHA_DIFFERENCE:g} (lower loss, "
        f"higher accuracy is better). TOST p: two one-sided t-tests at ±ε; **equivalent** when it is below "
        f"{ALPHA:g} (the 90% CI inside ±ε). Tightest margin: the largest |end| of the 90% CI, the smallest ε "
        "the same data would call equivalent. inconclusive: seeds TOST would need at 80% power if the true Δ "
        "were 0, at the observed paired std (unpaired: at √(s_impl² + s_ref²), no gain from pairing assumed).",
        "",
    ]
    header = ["Implementation", "Pairing", "n", "Δ {m}", "95% CI (t-test)", "p (t-test)", "Holm p (t-test)",
              "TOST p (±{eps})", "Tightest margin (90% CI)", "Verdict"]
    for metric, title, eps, unit in (("val_loss", "val loss", report.margin, "nats"),
                                     ("val_acc", "val acc", report.acc_margin, "")):
        rows = [_paired_row(gc, metric, unit) for gc in report.comparisons]
        lines += [f"**{title.capitalize()}** (ε = ±{eps:g}{' ' + unit if unit else ''}):", ""]
        lines += md_table([h.format(m=title, eps=f"{eps:g}") for h in header], rows) + [""]
        flat = [gc.group.label for gc in report.comparisons if _zero_width(gc.metrics.get(metric))]
        if flat:
            chance = ", which an accuracy, counted in whole tokens, can show by chance with few seeds" * (
                metric == "val_acc")
            lines += [f"Zero-width intervals ({', '.join(flat)}): every seed gave the same Δ, so no seed-to-seed noise "
                      "was measured; p and the verdict are then the limit as the noise goes to 0 (p = 0 for a Δ that "
                      f"is not 0){chance}.", ""]
    return lines[:-1]


def _zero_width(c: Comparison | None) -> bool:
    return c is not None and c.ci is not None and c.ci[0] == c.ci[1]


def _pairing_section(report: Report) -> list[str]:
    checked = [gc for gc in report.comparisons if "val_loss" in gc.metrics and gc.loss.pairing is not None]
    if not checked:
        return []
    lines = [
        "",
        "## Pairing check (val loss)",
        "",
        "Pairing by seed pays only when a seed steers the implementation's run and the reference's alike. "
        "corr: Pearson correlation of their final val losses over the paired seeds. Variance ratio: "
        "var(impl − ref) / (var(impl) + var(ref)), the paired Δ's variance over what it would be for "
        "independent runs; below 1 pairing helps, at or above 1 it gains nothing, and the Welch interval of "
        "the same runs (taken as unpaired) is shown beside the paired one.",
        "",
    ]
    rows = []
    for gc in checked:
        c, pc = gc.loss, gc.loss.pairing
        assert pc is not None
        helps = "n/a" if pc.helps is None else ("yes" if pc.helps else "**no**")
        rows.append([gc.group.label, str(c.n), fmt(pc.corr, 2), fmt(pc.var_ratio, 2), helps, _ci(c),
                     _ci(pc.welch_ci)])
    return lines + md_table(["Implementation", "n", "corr(impl, ref)", "var(paired)/var(unpaired)",
                             "Pairing helps", "95% CI (paired t)", "95% CI (Welch, same runs)"], rows)


def _has(runs: Iterable[Run], key: str) -> bool:
    return any(r.summary.get(key) is not None for r in runs)


def _seeds(n: int | None) -> str:
    return f"more than {MAX_SEEDS:,}" if n is None else str(n)


def _budget_row(report: Report, g: Group, with_eval: bool) -> list[str]:
    gc = report.comparison(g)
    c = gc.loss if gc is not None and "val_loss" in gc.metrics else None
    if g is report.reference:
        cells = ["(reference)", *[""] * 8]
    elif gc is not None and c is not None and c.method != WELCH and c.sd is not None:
        tost = seeds_for_equivalence(c.sd, c.margin)
        window = gc.window
        cells = [fmt(c.sd, 4), fmt(c.sd_upper, 4), fmt(c.mde, 4), fmt(c.mde_upper, 4), _seeds(gc.seeds_for_margin),
                 _seeds(tost), fmt(gc.seed_se, 4), "n/a" if window is None else fmt(window.se, 4),
                 "n/a" if window is None else str(window.windows)]
    elif c is not None and c.method == WELCH:  # the MDE of the Welch test the verdict ran; nothing paired to show
        cells = ["n/a (unpaired)", "n/a", fmt(c.mde, 4), *["n/a"] * 6]
    else:
        cells = ["n/a", *["n/a"] * 8]
    if c is not None and c.method == WELCH:  # the MDE's n: what its test ran on
        n = f"{c.n} vs {c.n_ref} runs (unpaired)"
    else:
        n = str(g.n) if c is None or c.n == g.n else f"{g.n} ({c.n} paired)"
    row = [g.label, n, fmt(g.std("val_loss"), 4), *cells]
    if with_eval:
        row += [fmt(g.summary_mean("val_loss_se"), 4), _distinct(r.summary.get("val_tokens") for r in g.runs)]
    return row


def _budget_section(report: Report) -> list[str]:
    done = [g for g in report.groups if g.n]
    with_eval = _has(report.runs, "val_loss_se") or _has(report.runs, "val_tokens")
    eps = f"{report.margin:g}"
    tested = [gc.loss for gc in report.comparisons if "val_loss" in gc.metrics and gc.loss.p is not None]
    alpha = tested[0].detect_alpha if tested else ALPHA_DIFFERENCE  # one Holm family: the same for every row
    several = tested and tested[0].n_tests > 1
    # a family's level as the fraction it is (0.01/3), not its decimals (0.00333333)
    alpha_text = f"{ALPHA_DIFFERENCE:g}/{tested[0].n_tests}" if several else f"{alpha:g}"
    family = (f"α = {ALPHA_DIFFERENCE:g} / {tested[0].n_tests} implementations = {alpha:.3g}, Holm's first step: a "
              "p below it is called better/worse whatever the others' p" if several else f"α = {alpha:g}")
    lines = [
        "",
        "## Variance budget",
        "",
        "Seed std: sample std of the final val loss over seeds. Paired std: std over seeds of Δ (same seed; "
        "pairing cancels what a seed does to both runs), and its one-sided 95% upper confidence bound "
        "(chi-square; 4.4× the estimate with 3 seeds, since a std from few seeds is itself uncertain). MDE "
        "(t-test): the smallest true Δ the better/worse verdict detects with 80% power with these seeds: its "
        f"paired t-test (Welch's test on the n runs for a row marked unpaired), two-sided, at {family}; at the "
        "paired std and at its upper bound (what the sweep can promise). Seeds for MDE ≤ ε "
        "(t-test): paired seeds for that test to detect a Δ of ε. Seeds for equivalence (TOST): paired seeds "
        "for TOST at ±ε to reach 80% power if the true Δ were 0: the two answer different questions (find a "
        f"difference of ε = {eps}, or show there is none larger). SE of Δ over seeds: paired std / √n, what "
        "the seed CI is built on. SE of Δ over val windows: the standard error of the mean Δ over the final "
        "eval's windows (seed-averaged): the val set is one fixed sample of text, so the seed CI does not "
        "include how Δ would move on other text; when this SE is comparable to the seed SE, a larger val set "
        "(train.eval_batches) matters as much as more seeds.",
    ]
    header = ["Implementation", "n", "Seed std (val loss)", "Paired std of Δ", "Paired std, 95% upper bound",
              f"MDE (t-test, 80%, α={alpha_text})", "MDE at the upper bound", f"Seeds for MDE ≤ {eps} (t-test)",
              f"Seeds for equivalence at ±{eps} (TOST, 80%)", "SE of Δ over seeds", "SE of Δ over val windows",
              "Val windows"]
    if with_eval:
        lines[-1] += (" Final val loss SE: standard error of the mean loss over the fixed val windows "
                      "(the noise of one eval of one run).")
        header += ["Final val loss SE", "Val tokens"]
    return [*lines, "", *md_table(header, [_budget_row(report, g, with_eval) for g in done])]


def _short_section(report: Report) -> list[str]:
    short = [(m, t, d) for m, t, d in METRICS if m in SHORT_METRICS]
    lines = ["", "## Results (short format)", ""]
    return lines + md_table(
        ["Implementation", *(t for _, t, _ in short)],
        [[g.label, *(_stat_cell(g, m, d) for m, _, d in short)] for g in report.groups if g.n],
    )


def _fidelity_section(report: Report) -> list[str]:
    rows = fidelity_rows(report.runs)
    if not rows:
        return []
    lines = [
        "",
        "## Fidelity: same seed against the float32 reference",
        "",
        "Absolute difference in val loss between each run and the `torch` (float32) run with the same seed, "
        "variant and packing, over the evals both logged. Implementations of the same function stay close (with "
        "`train.deterministic=true` a second `torch` run is at exactly 0); the bfloat16 reference shows "
        "what a lower compute precision does.",
        "",
    ]
    return lines + md_table(["Implementation", "Seed", "Evals", "max \\|Δ val loss\\|", "at step", "final \\|Δ\\|"],
                            rows)


def _run_value(v: float | None, decimals: int) -> str:
    """One run's value: as :func:`fmt`, but a value it logged as nan is ``nan`` (it diverged), not ``n/a`` (which
    reads as never logged); inf is already ``inf``."""
    return "nan" if v is not None and math.isnan(v) else fmt(v, decimals)


def _shared_kind(runs: Sequence[Run], counted: Mapping[Path, int]) -> str:
    """``GPU`` or ``CPU`` where every counted run trained on that kind, else ``device``: what the runs shared."""
    kinds = {"CPU" if on_cpu(r) else "GPU" for r in runs if r.path in counted}
    return kinds.pop() if len(kinds) == 1 else "device"


def _per_seed_section(report: Report) -> list[str]:
    with_se, with_tokens = _has(report.runs, "val_loss_se"), _has(report.runs, "val_tokens")
    header = ["Implementation", "Seed", "Status", "Step", *(t for _, t, _ in METRICS)]
    with_device = len(_devices(report.runs)) > 1
    concurrent = concurrent_runs(report.runs)
    with_shared = any(n > 1 for n in concurrent.values())
    header += ["Val loss SE"] * with_se + ["Val tokens"] * with_tokens + ["Device"] * with_device
    header += [f"Runs on its {_shared_kind(report.runs, concurrent)} at once"] * with_shared + ["Run"]
    detail = []
    for g in report.groups:
        for r in [*g.runs, *g.excluded]:
            row = [g.label, str(r.seed), r.status, str(r.summary.get("step", "n/a")),
                   *(_run_value(r.value(m), d) for m, _, d in METRICS)]
            row += [fmt(r.value("val_loss_se"), 4)] * with_se + [fmt(r.value("val_tokens"), 0)] * with_tokens
            row += [str(_device(r) or "n/a")] * with_device
            row += [str(concurrent.get(r.path, "n/a"))] * with_shared
            detail.append([*row, f"`{r.name}`"])
    return ["", "## Per-seed runs", "", *md_table(header, detail)]


def render_markdown(report: Report) -> str:
    """The whole ``comparison.md`` text."""
    lines = ["# RoPE implementation comparison", "", *_verdict_section(report), *_config_section(report)]
    for section in (_failures_section, _summary_section, _paired_section, _pairing_section, _budget_section,
                    _short_section, _fidelity_section, _per_seed_section):
        lines += section(report)
    lines += ["", f"![val loss curves]({CURVES_FILE})", "", f"![speed]({SPEED_FILE})", ""]
    if report.comparisons:
        lines += [f"![paired Δ val loss]({DELTA_FILE})", ""]
    return "\n".join(lines)


def write_markdown(path: Path, report: Report) -> None:
    """Write ``comparison.md`` atomically (a reader, or a sweep killed mid-report, never sees half of it)."""
    write_text_atomic(path, render_markdown(report))
