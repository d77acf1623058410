"""``comparison.md``: the report a person reads, verdicts first, details after.

Section order is the order of questions: is my kernel OK (verdicts), what was run (config), what
went wrong (failed runs), the numbers (summary, paired statistics), can I trust them (variance
budget), and the raw material (fidelity, per-seed runs, plots).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from llm.config_keys import flatten
from llm.fileio import write_text_atomic
from llm.report.analysis import METRICS, SHORT_METRICS, Group, GroupComparison
from llm.report.compare import CURVES_FILE, DELTA_FILE, SPEED_FILE, Report
from llm.report.fidelity import fidelity_rows
from llm.report.mixed import MISSING, describe_differences, fmt_value
from llm.report.runs import Run, get_dotted
from llm.report.stats import BETTER, EQUIVALENT, INCONCLUSIVE, MAX_SEEDS, SINGLE, WELCH, WORSE, Comparison

MINUS = "\u2212"


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


def _ci(c: Comparison, decimals: int = 4) -> str:
    return "no CI (n=1)" if c.ci is None else f"[{signed(c.ci[0], decimals)}, {signed(c.ci[1], decimals)}]"


def _needed(c: Comparison) -> str:
    return f"more than {MAX_SEEDS:,}" if c.seeds_needed is None else f"about {c.seeds_needed}"


def verdict_text(c: Comparison, unit: str = "nats") -> str:
    """The verdict cell: ``better``, ``worse``, ``equivalent within ±ε``, ``inconclusive (n seeds; about N needed)``."""
    eps = f"±{c.margin:g}{' ' + unit if unit else ''}"
    if c.verdict == SINGLE:
        return f"n={c.n}: no CI (add seeds)" if c.method != WELCH else f"n={c.n} vs {c.n_ref}: too few seeds for Welch"
    if c.verdict in (BETTER, WORSE):
        return c.verdict + (f" (but within {eps})" if c.p_tost is not None and c.p_tost < 0.05 else "")
    if c.verdict == EQUIVALENT:
        return f"equivalent within {eps}"
    assert c.verdict == INCONCLUSIVE
    return f"inconclusive ({c.n} seeds; {_needed(c)} needed)"


def verdict_line(gc: GroupComparison) -> str:
    """One plain-language line per implementation, on val loss (the quality measure the sweep is for)."""
    c, me, ref = gc.loss, gc.group.label, gc.reference.label
    eps = f"±{c.margin:g} nats"
    n = f"unpaired (Welch), n={c.n} vs {c.n_ref}" if c.method == WELCH else f"n={c.n}"
    numbers = f"{n}, Δ = {signed(c.delta)} {_ci(c)}"
    if c.verdict == SINGLE:
        return f"{me}: one seed only against {ref} ({n}, Δ = {signed(c.delta)}; no CI: add seeds)"
    if c.verdict in (BETTER, WORSE):
        within = f"; the difference is within {eps}" if c.p_tost is not None and c.p_tost < 0.05 else ""
        p = fmt_p(c.p)
        return f"{me}: {c.verdict} than {ref} ({numbers}, p {p if p.startswith('<') else '= ' + p}){within}"
    if c.verdict == EQUIVALENT:
        return f"{me}: equivalent to {ref} within {eps} ({numbers})"
    return f"{me}: inconclusive ({c.n} seeds; {_needed(c)} needed) against {ref} at {eps} ({numbers})"


def _verdict_section(report: Report) -> list[str]:
    if report.reference is None:
        return ["No reference implementation (`rope=torch`, compute_dtype float32) among the completed runs: "
                "pass `--reference NAME` for verdicts.", ""]
    lines = [f"Verdicts against **{report.reference.label}** (val loss; Δ = implementation − reference, "
             f"95% CI; equivalence margin ±{report.margin:g} nats):", ""]
    lines += [f"- {verdict_line(c)}" for c in report.comparisons if "val_loss" in c.metrics]
    if not report.comparisons:
        lines.append("- (no other implementation completed)")
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
    """The distinct devices the runs report, in order of appearance."""
    return [str(d) for d in dict.fromkeys(_device(r) for r in runs) if d is not None]


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
        f"- device: {_distinct(_device(r) for r in report.runs)}",
        f"- git commit: {_distinct(r.summary.get('git_commit') for r in report.runs)}",
    ]
    devices = _devices(report.runs)
    if len(devices) > 1:
        lines += ["", f"**Runs from {len(devices)} devices** (the Per-seed table names each run's): a pair of runs "
                  "on two devices also differs by the devices' arithmetic (kernel choices, reduction orders), and "
                  "times and tokens/s compare only between runs on one device that ran alone or equally shared."]
    if report.diffs:
        lines += ["", "**Mixed runs (`--allow-mixed`)**: these config keys differ between runs:", "", "```"]
        lines += [*describe_differences(report.diffs), "```"]
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
        "n = number of seeds (completed runs). Ordered by mean val loss, best first.",
        "",
    ]
    header = ["Implementation", *(title for _, title, _ in METRICS), "n"]
    rows = [[g.label, *(fmt_pm(*g.stats[m][:2], d) for m, _, d in METRICS), str(g.n)] for g in report.groups if g.n]
    lines += md_table(header, rows)
    excluded = [r for g in report.groups for r in g.excluded]
    if excluded:
        lines += [
            "",
            "Not included in the statistics or plots (status != completed): "
            + "; ".join(f"{r.label} seed {r.seed} (`{r.name}`, {r.status} at step {r.summary.get('step', 'n/a')})"
                        for r in excluded),
        ]
    return lines


def _paired_row(gc: GroupComparison) -> list[str]:
    """One row of the paired-statistics table (n/a cells where a metric was never logged)."""
    if "val_loss" not in gc.metrics:
        return [gc.group.label, "n/a (no final val loss)", *["n/a"] * 10]
    pairing = (f"paired (seeds {' '.join(map(str, gc.seeds))})" if gc.loss.method != WELCH else WELCH)
    if gc.unmatched and gc.loss.method != WELCH:
        pairing += f"; unmatched: {' '.join(map(str, gc.unmatched))}"
    n = f"{gc.loss.n}" if gc.loss.method != WELCH else f"{gc.loss.n} vs {gc.loss.n_ref}"
    row = [gc.group.label, pairing, n]
    for metric, unit in (("val_loss", "nats"), ("val_acc", "")):
        c = gc.metrics.get(metric)
        if c is None:
            row += ["n/a"] * (5 if metric == "val_loss" else 4)
            continue
        row += [signed(c.delta), _ci(c), fmt_p(c.p)]
        if metric == "val_loss":
            row.append(fmt_p(c.p_tost))
        row.append(verdict_text(c, unit))
    return row


def _paired_section(report: Report) -> list[str]:
    if report.reference is None or not report.comparisons:
        return []
    ref = report.reference
    lines = [
        "",
        f"## Paired statistics against {ref.label}",
        "",
        f"Δ = implementation − {ref.label} (n={ref.n}), per seed, then averaged. 95% CI: Student t over the "
        "paired seeds; p: paired t-test (Welch's unequal-variance test on the unpaired values when the seeds "
        f"do not match). Equivalence: TOST at ±{report.margin:g} nats of val loss and "
        f"±{report.acc_margin:g} of val accuracy (both one-sided tests reject at α = 0.05, i.e. the 90% CI "
        "lies inside the margin). better/worse: the 95% CI excludes 0 and p < 0.05 (lower loss, higher "
        "accuracy is better). inconclusive: seeds needed for TOST at 80% power if the true Δ were 0, "
        "at the observed paired std.",
        "",
    ]
    header = ["Implementation", "Pairing", "n", "Δ val loss", "95% CI", "p", f"TOST p (±{report.margin:g})",
              "Verdict (loss)", "Δ val acc", "95% CI", "p", "Verdict (acc)"]
    return lines + md_table(header, [_paired_row(gc) for gc in report.comparisons])


def _has(runs: Iterable[Run], key: str) -> bool:
    return any(r.summary.get(key) is not None for r in runs)


def _budget_row(report: Report, g: Group, with_eval: bool) -> list[str]:
    gc = report.comparison(g)
    c = gc.loss if gc is not None and "val_loss" in gc.metrics else None
    paired = c is not None and c.method != WELCH
    if g is report.reference:
        cells = ["(reference)", "", ""]
    elif paired and c is not None:
        needed = gc.seeds_for_margin if gc is not None else None
        more = f"more than {MAX_SEEDS:,}"
        cells = [fmt(c.sd, 4), fmt(c.mde, 4), "n/a" if c.sd is None else (str(needed) if needed else more)]
    else:
        cells = ["n/a (unpaired)" if c is not None else "n/a", "n/a", "n/a"]
    row = [g.label, str(g.n), fmt(g.std("val_loss"), 4), *cells]
    if with_eval:
        row += [fmt(g.summary_mean("val_loss_se"), 4), _distinct(r.summary.get("val_tokens") for r in g.runs)]
    return row


def _budget_section(report: Report) -> list[str]:
    done = [g for g in report.groups if g.n]
    with_eval = _has(report.runs, "val_loss_se") or _has(report.runs, "val_tokens")
    lines = [
        "",
        "## Variance budget",
        "",
        "Seed std: sample std of the final val loss over seeds. Paired std: std over seeds of Δ (same seed; "
        "pairing cancels what a seed does to both runs). MDE: the smallest true Δ the paired t-test "
        f"(two-sided, α = 0.05) detects with 80% power with these seeds; above ε = {report.margin:g} the "
        "sweep cannot resolve a difference of ε: add seeds (the next column says how many paired seeds would).",
    ]
    header = ["Implementation", "n", "Seed std (val loss)", "Paired std of Δ", "MDE (80%, α=0.05)",
              f"Seeds for MDE ≤ {report.margin:g}"]
    if with_eval:
        lines[-1] += (" Final val loss SE: standard error of the mean loss over the fixed val windows "
                      "(the noise of one eval; when it is far below the seed std, more eval batches would not "
                      "help, more seeds would).")
        header += ["Final val loss SE", "Val tokens"]
    return [*lines, "", *md_table(header, [_budget_row(report, g, with_eval) for g in done])]


def _short_section(report: Report) -> list[str]:
    short = [(m, t, d) for m, t, d in METRICS if m in SHORT_METRICS]
    lines = ["", "## Results (short format)", ""]
    return lines + md_table(
        ["Implementation", *(t for _, t, _ in short)],
        [[g.label, *(fmt_pm(*g.stats[m][:2], d) for m, _, d in short)] for g in report.groups if g.n],
    )


def _fidelity_section(report: Report) -> list[str]:
    rows = fidelity_rows(report.runs)
    if not rows:
        return []
    lines = [
        "",
        "## Fidelity: same seed against the float32 reference",
        "",
        "Absolute difference in val loss between each run and the `torch` (float32) run with the same seed "
        "and variant, over the evals both logged. Implementations of the same function stay close (with "
        "`train.deterministic=true` a second `torch` run is at exactly 0); the bfloat16 reference shows "
        "what a lower compute precision does.",
        "",
    ]
    return lines + md_table(["Implementation", "Seed", "Evals", "max \\|Δ val loss\\|", "at step", "final \\|Δ\\|"],
                            rows)


def _per_seed_section(report: Report) -> list[str]:
    with_se, with_tokens = _has(report.runs, "val_loss_se"), _has(report.runs, "val_tokens")
    header = ["Implementation", "Seed", "Status", "Step", *(t for _, t, _ in METRICS)]
    with_device = len(_devices(report.runs)) > 1
    header += ["Val loss SE"] * with_se + ["Val tokens"] * with_tokens + ["Device"] * with_device + ["Run"]
    detail = []
    for g in report.groups:
        for r in [*g.runs, *g.excluded]:
            row = [g.label, str(r.seed), r.status, str(r.summary.get("step", "n/a")),
                   *(fmt(r.value(m), d) for m, _, d in METRICS)]
            row += [fmt(r.value("val_loss_se"), 4)] * with_se + [fmt(r.value("val_tokens"), 0)] * with_tokens
            row += [str(_device(r) or "n/a")] * with_device
            detail.append([*row, f"`{r.name}`"])
    return ["", "## Per-seed runs", "", *md_table(header, detail)]


def render_markdown(report: Report) -> str:
    """The whole ``comparison.md`` text."""
    lines = ["# RoPE implementation comparison", "", *_verdict_section(report), *_config_section(report)]
    for section in (_failures_section, _summary_section, _paired_section, _budget_section, _short_section,
                    _fidelity_section, _per_seed_section):
        lines += section(report)
    lines += ["", f"![val loss curves]({CURVES_FILE})", "", f"![speed]({SPEED_FILE})", ""]
    if report.comparisons:
        lines += [f"![paired Δ val loss]({DELTA_FILE})", ""]
    return "\n".join(lines)


def write_markdown(path: Path, report: Report) -> None:
    """Write ``comparison.md`` atomically (a reader, or a sweep killed mid-report, never sees half of it)."""
    write_text_atomic(path, render_markdown(report))
