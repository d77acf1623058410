"""Compare finished training runs: one row per RoPE implementation, mean ± std over seeds.

A *run dir* is any directory holding ``summary.json`` (found recursively, so a Hydra multirun dir,
a list of run dirs or a mix of both all work). Each run also has ``config.yaml`` (resolved config;
``.hydra/config.yaml`` is the fallback) and ``metrics.jsonl`` (train/val lines).

:func:`compare_runs` writes into ``out_dir``:

* ``comparison.md``  - common config header, the summary table (ordered by mean val loss), the same
  numbers in the short ``Implementation | Training Time (s) | Val Loss | Val Accuracy | Val Perplexity``
  format, and a per-seed detail table;
* ``comparison.csv`` - the summary table with full precision (``*_mean``/``*_std`` columns);
* ``loss_curves.png`` - val loss against step and against training time, mean line per
  implementation, min-max band over seeds;
* ``speed.png`` - tokens/s and training time per implementation, error bars = std over seeds.

Statistics: mean and *sample* standard deviation (ddof=1); with a single seed the std is undefined
(``± n/a`` in the Markdown, empty cell in the CSV) and ``n`` says 1.

Runs whose ``status`` is not ``"completed"`` (interrupted, nonfinite) are *excluded from the
statistics and plots* with a logged warning; they still appear in the per-seed table (with their
status) and in a footnote under the summary table, so nothing silently disappears.

Runs must differ only in the RoPE implementation and the seed: any other config difference
(model, data, tokenizer, ``train.*``, ``optim.*``) raises :class:`MixedRunsError` listing the
differing keys, unless ``allow_mixed=True`` (CLI: ``--allow-mixed``). Keys allowed to differ are in
:data:`IGNORED_KEYS`.
"""

from __future__ import annotations

import csv
import json
import logging
import math
import os
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

SUMMARY_FILE = "summary.json"
METRICS_FILE = "metrics.jsonl"
MD_FILE = "comparison.md"
CSV_FILE = "comparison.csv"
CURVES_FILE = "loss_curves.png"
SPEED_FILE = "speed.png"

#: Config keys (dotted; a key also covers everything below it) that may differ between runs.
IGNORED_KEYS = ("rope", "seed", "logger", "out_dir", "hydra", "train.resume", "sweep", "device")

_MISSING = "<missing>"

# (summary key, column title, decimals)
METRICS: tuple[tuple[str, str, int], ...] = (
    ("train_time_s", "Training Time (s)", 1),
    ("val_loss", "Val Loss", 4),
    ("val_acc", "Val Accuracy", 4),
    ("val_ppl", "Val Perplexity", 2),
    ("tokens_per_s", "tokens/s", 0),
)
SHORT_METRICS = ("train_time_s", "val_loss", "val_acc", "val_ppl")


class CompareError(Exception):
    """The runs cannot be compared (none found, unreadable, or mixed)."""


class NoRunsError(CompareError):
    """No run dir (a dir with summary.json) was found, or none of them completed."""


class MixedRunsError(CompareError):
    """The runs differ in more than rope and seed; ``differences`` maps key -> {value: [run names]}."""

    def __init__(self, message: str, differences: dict[str, dict[str, list[str]]]) -> None:
        super().__init__(message)
        self.differences = differences


# ---------------------------------------------------------------------------------------------
# loading
# ---------------------------------------------------------------------------------------------


@dataclass
class Run:
    """One training run as read from its directory."""

    path: Path
    config: dict[str, Any]
    summary: dict[str, Any]
    metrics: list[dict[str, Any]] = field(default_factory=list)
    name: str = ""

    @property
    def rope(self) -> str:
        return str(self.summary.get("rope") or _get(self.config, "rope.name") or "?")

    @property
    def variant(self) -> str | None:
        v = self.summary.get("variant", _get(self.config, "rope.variant"))
        return None if v is None else str(v)

    @property
    def compute_dtype(self) -> str | None:
        v = self.summary.get("compute_dtype", _get(self.config, "rope.compute_dtype"))
        return None if v is None else str(v)

    @property
    def key(self) -> tuple[str, str | None, str | None]:
        return (self.rope, self.variant, self.compute_dtype)

    @property
    def label(self) -> str:
        return implementation_label(*self.key)

    @property
    def seed(self) -> int | None:
        s = self.summary.get("seed", self.config.get("seed"))
        return None if s is None else int(s)

    @property
    def status(self) -> str:
        return str(self.summary.get("status", "completed"))

    @property
    def completed(self) -> bool:
        return self.status == "completed"

    def value(self, key: str) -> float | None:
        return _as_float(self.summary.get(key))

    def val_curve(self) -> list[tuple[int, float, float | None]]:
        """``(step, val_loss, train_time_s)`` per val line, one per step (the last line for a step wins)."""
        by_step: dict[int, tuple[float, float | None]] = {}
        for m in self.metrics:
            if m.get("kind") != "val":
                continue
            step, loss = m.get("step"), _as_float(m.get("val_loss"))
            if step is None or loss is None:
                continue
            t = _as_float(m.get("train_time_s", m.get("wall_time_s")))
            by_step[int(step)] = (loss, t)
        return [(s, *by_step[s]) for s in sorted(by_step)]


def implementation_label(rope: str, variant: str | None, compute_dtype: str | None) -> str:
    """Readable row name: ``torch (partial, float32)``, ``triton_v4 (full, float32)``, ``none``."""
    if rope == "none":
        return "none"
    parts = [p for p in (variant, compute_dtype) if p not in (None, "", "none", "None")]
    return f"{rope} ({', '.join(parts)})" if parts else rope


def find_run_dirs(paths: Iterable[str | os.PathLike]) -> list[Path]:
    """Every run dir (a dir containing ``summary.json``) at or below ``paths``, sorted, without duplicates.

    Raises :class:`FileNotFoundError` for a path that does not exist.
    """
    found: dict[Path, None] = {}
    for p in paths:
        p = Path(p)
        if not p.exists():
            raise FileNotFoundError(f"no such file or directory: {p}")
        if p.is_file():  # a summary.json (or any file) given directly: its directory
            p = p.parent
        if (p / SUMMARY_FILE).is_file():
            found[p.resolve()] = None
        for s in sorted(p.rglob(SUMMARY_FILE)):
            if s.is_file():
                found[s.parent.resolve()] = None
    return sorted(found)


def _load_config(run_dir: Path) -> dict[str, Any]:
    from omegaconf import OmegaConf

    for candidate in (run_dir / "config.yaml", run_dir / ".hydra" / "config.yaml"):
        if not candidate.is_file():
            continue
        cfg = OmegaConf.load(candidate)
        try:
            out = OmegaConf.to_container(cfg, resolve=True)
        except Exception:  # e.g. ${hydra:...} interpolations outside a Hydra app: compare them verbatim
            out = OmegaConf.to_container(cfg, resolve=False)
        return out if isinstance(out, dict) else {}
    log.warning("%s: no config.yaml or .hydra/config.yaml; its config counts as missing", run_dir)
    return {}


def _load_metrics(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / METRICS_FILE
    if not path.is_file():
        return []
    out, bad = [], 0
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:  # e.g. a line cut short by a killed run
            bad += 1
            continue
        if isinstance(obj, dict):
            out.append(obj)
    if bad:
        log.warning("%s: skipped %d unreadable line(s)", path, bad)
    return out


def load_run(run_dir: str | os.PathLike) -> Run:
    """Read one run dir (summary, config, metrics)."""
    run_dir = Path(run_dir)
    try:
        summary = json.loads((run_dir / SUMMARY_FILE).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise CompareError(f"{run_dir / SUMMARY_FILE}: cannot read ({e})") from e
    if not isinstance(summary, dict):
        raise CompareError(f"{run_dir / SUMMARY_FILE}: expected a JSON object")
    return Run(path=run_dir, config=_load_config(run_dir), summary=summary, metrics=_load_metrics(run_dir))


def load_runs(run_dirs: Sequence[str | os.PathLike]) -> list[Run]:
    """Find and load every run at or below ``run_dirs``; names them relative to their common parent."""
    dirs = find_run_dirs(run_dirs)
    if not dirs:
        raise NoRunsError(f"no run dirs (directories with {SUMMARY_FILE}) under: {', '.join(map(str, run_dirs))}")
    runs = [load_run(d) for d in dirs]
    base = Path(os.path.commonpath([str(d) for d in dirs]))
    for r in runs:
        rel = r.path.relative_to(base) if r.path != base else Path(r.path.name)
        r.name = str(rel) if str(rel) != "." else r.path.name
    return runs


# ---------------------------------------------------------------------------------------------
# mixed-run check
# ---------------------------------------------------------------------------------------------


def _flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(d, dict):
        out: dict[str, Any] = {}
        for k, v in d.items():
            out.update(_flatten(v, f"{prefix}{k}."))
        if not d and prefix:
            out[prefix[:-1]] = {}
        return out
    return {prefix[:-1]: d}


def _get(d: dict[str, Any], dotted: str) -> Any:
    cur: Any = d
    for part in dotted.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return None
        cur = cur[part]
    return cur


def _ignored(key: str) -> bool:
    return any(key == p or key.startswith(p + ".") for p in IGNORED_KEYS)


def _fmt_value(v: Any) -> str:
    return v if isinstance(v, str) else json.dumps(v)


def config_differences(runs: Sequence[Run]) -> dict[str, dict[str, list[str]]]:
    """Config keys (outside :data:`IGNORED_KEYS`) whose values differ: key -> {value: [run names]}."""
    flat = [_flatten(r.config) for r in runs]
    keys = sorted({k for f in flat for k in f if not _ignored(k)})
    diffs: dict[str, dict[str, list[str]]] = {}
    for k in keys:
        values: dict[str, list[str]] = {}
        for r, f in zip(runs, flat, strict=True):
            values.setdefault(_fmt_value(f[k]) if k in f else _MISSING, []).append(r.name)
        if len(values) > 1:
            diffs[k] = values
    return diffs


def _describe_differences(diffs: dict[str, dict[str, list[str]]], max_names: int = 4) -> list[str]:
    lines = []
    for k, values in diffs.items():
        parts = []
        for v, names in values.items():
            more = f", +{len(names) - max_names} more" if len(names) > max_names else ""
            shown = ", ".join(names[:max_names]) + more
            parts.append(f"{v} ({shown})")
        lines.append(f"  {k}: " + "; ".join(parts))
    return lines


def check_not_mixed(runs: Sequence[Run]) -> None:
    """Raise :class:`MixedRunsError` if the runs differ in anything but rope and seed (see IGNORED_KEYS)."""
    diffs = config_differences(runs)
    if not diffs:
        return
    msg = "\n".join(
        [
            f"refusing to compare runs that differ in more than rope and seed "
            f"({len(diffs)} differing config key(s): {', '.join(diffs)}):",
            *_describe_differences(diffs),
            "Pass --allow-mixed (compare_runs(..., allow_mixed=True)) to compare them anyway.",
        ]
    )
    raise MixedRunsError(msg, diffs)


# ---------------------------------------------------------------------------------------------
# statistics
# ---------------------------------------------------------------------------------------------


def _as_float(v: Any) -> float | None:
    if v is None or isinstance(v, bool):
        return None
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def mean_std(values: Iterable[float | None]) -> tuple[float | None, float | None, int]:
    """Mean, sample std (ddof=1; None for fewer than 2 values) and count of the non-missing values."""
    vals = [v for v in values if v is not None and not math.isnan(v)]
    if not vals:
        return None, None, 0
    mean = statistics.fmean(vals)
    std = statistics.stdev(vals) if len(vals) > 1 else None
    return mean, std, len(vals)


@dataclass
class Group:
    """All runs of one implementation (rope, variant, compute dtype)."""

    key: tuple[str, str | None, str | None]
    runs: list[Run]  # completed runs: the ones the statistics use
    excluded: list[Run]  # runs with status != completed
    stats: dict[str, tuple[float | None, float | None, int]] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return implementation_label(*self.key)

    @property
    def n(self) -> int:
        return len(self.runs)

    @property
    def seeds(self) -> list[int | None]:
        return [r.seed for r in self.runs]

    def mean(self, metric: str) -> float | None:
        return self.stats[metric][0]

    def std(self, metric: str) -> float | None:
        return self.stats[metric][1]


def _sort_key(value: float | None) -> float:
    return math.inf if value is None or math.isnan(value) else value


def group_runs(runs: Sequence[Run]) -> list[Group]:
    """Group runs by implementation and compute statistics; ordered by mean val loss (best first)."""
    groups: dict[tuple, Group] = {}
    for r in runs:
        g = groups.setdefault(r.key, Group(key=r.key, runs=[], excluded=[]))
        (g.runs if r.completed else g.excluded).append(r)
    for g in groups.values():
        g.runs.sort(key=lambda r: (r.seed is None, r.seed or 0, r.name))
        g.excluded.sort(key=lambda r: (r.seed is None, r.seed or 0, r.name))
        for metric, _, _ in METRICS:
            g.stats[metric] = mean_std(r.value(metric) for r in g.runs)
        seeds = [s for s in g.seeds if s is not None]
        if len(seeds) != len(set(seeds)):
            log.warning("%s: the same seed appears more than once (%s); each run counts in n", g.label, seeds)
    return sorted(groups.values(), key=lambda g: (_sort_key(g.mean("val_loss")), g.label))


# ---------------------------------------------------------------------------------------------
# output
# ---------------------------------------------------------------------------------------------


def _fmt(v: float | None, decimals: int) -> str:
    if v is None or math.isnan(v):
        return "n/a"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return f"{v:,.{decimals}f}"


def _fmt_pm(mean: float | None, std: float | None, decimals: int) -> str:
    if mean is None:
        return "n/a"
    return f"{_fmt(mean, decimals)} ± {_fmt(std, decimals)}"


def _md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return out


def _common_section(runs: Sequence[Run], section: str) -> str:
    """``k=v, ...`` for the keys under ``section``; keys whose value varies show ``{a | b}``."""
    flat = [_flatten(r.config.get(section)) if isinstance(r.config.get(section), dict) else {} for r in runs]
    keys = sorted({k for f in flat for k in f}, key=lambda k: (k != "name", k))
    items = []
    for k in keys:
        values = list(dict.fromkeys(_fmt_value(f[k]) if k in f else _MISSING for f in flat))
        items.append(f"{k}={values[0]}" if len(values) == 1 else f"{k}={{{' | '.join(values)}}}")
    return ", ".join(items) if items else "n/a"


def _distinct(values: Iterable[Any]) -> str:
    vals = [str(v) for v in dict.fromkeys(v for v in values if v is not None)]
    return ", ".join(vals) if vals else "n/a"


def write_markdown(path: Path, runs: Sequence[Run], groups: Sequence[Group], diffs: dict, inputs: Sequence) -> None:
    n_done = sum(r.completed for r in runs)
    lines = [
        "# RoPE implementation comparison",
        "",
        f"{len(runs)} run(s), {n_done} completed, {len(groups)} implementation(s); inputs: "
        + ", ".join(f"`{p}`" for p in inputs),
        "",
        "Common config:",
        "",
        f"- model: {_common_section(runs, 'model')}",
        f"- data: {_common_section(runs, 'data')}; "
        f"tokenizer: {_distinct(_get(r.config, 'tokenizer.name') for r in runs)}",
        f"- steps: {_distinct(_get(r.config, 'train.max_steps') for r in runs)} (train.max_steps); "
        f"batch_size={_distinct(_get(r.config, 'train.batch_size') for r in runs)}, "
        f"grad_accum={_distinct(_get(r.config, 'train.grad_accum') for r in runs)}",
        f"- device: {_distinct(r.summary.get('device', r.config.get('device')) for r in runs)}",
        f"- git commit: {_distinct(r.summary.get('git_commit') for r in runs)}",
    ]
    if diffs:
        lines += ["", "**Mixed runs (`--allow-mixed`)**: these config keys differ between runs:", "", "```"]
        lines += [*_describe_differences(diffs), "```"]

    lines += [
        "",
        "## Summary",
        "",
        "Mean ± sample standard deviation (ddof=1) over seeds; `± n/a` when there is a single seed. "
        "n = number of seeds (completed runs). Ordered by mean val loss, best first.",
        "",
    ]
    header = ["Implementation", *(title for _, title, _ in METRICS), "n"]
    rows = [[g.label, *(_fmt_pm(*g.stats[m][:2], d) for m, _, d in METRICS), str(g.n)] for g in groups if g.n]
    lines += _md_table(header, rows)
    excluded = [r for g in groups for r in g.excluded]
    if excluded:
        lines += [
            "",
            "Not included in the statistics or plots (status != completed): "
            + "; ".join(f"{r.label} seed {r.seed} (`{r.name}`, {r.status} at step {r.summary.get('step')})"
                        for r in excluded),
        ]

    short = [(m, t, d) for m, t, d in METRICS if m in SHORT_METRICS]
    lines += ["", "## Results (short format)", ""]
    lines += _md_table(
        ["Implementation", *(t for _, t, _ in short)],
        [[g.label, *(_fmt_pm(*g.stats[m][:2], d) for m, _, d in short)] for g in groups if g.n],
    )

    fidelity = fidelity_rows(runs)
    if fidelity:
        lines += [
            "",
            "## Fidelity: same seed against the float32 reference",
            "",
            "Absolute difference in val loss between each run and the `torch` (float32) run with the same seed "
            "and variant, over the evals both logged. Implementations of the same function stay close (with "
            "`train.deterministic=true` a second `torch` run is at exactly 0); the bfloat16 reference shows "
            "what a lower compute precision does.",
            "",
        ]
        lines += _md_table(["Implementation", "Seed", "Evals", "max \\|Δ val loss\\|", "at step", "final \\|Δ\\|"],
                           fidelity)

    lines += ["", "## Per-seed runs", ""]
    detail = []
    for g in groups:
        for r in [*g.runs, *g.excluded]:
            detail.append(
                [g.label, str(r.seed), r.status, str(r.summary.get("step", "n/a")),
                 *(_fmt(r.value(m), d) for m, _, d in METRICS), f"`{r.name}`"]
            )
    lines += _md_table(["Implementation", "Seed", "Status", "Step", *(t for _, t, _ in METRICS), "Run"], detail)
    lines += ["", f"![val loss curves]({CURVES_FILE})", "", f"![speed]({SPEED_FILE})", ""]
    path.write_text("\n".join(lines))


def _is_reference(r: Run) -> bool:
    return r.rope == "torch" and r.compute_dtype == "float32"


def fidelity_rows(runs: Sequence[Run]) -> list[list[str]]:
    """Per run: how far its val-loss curve is from the float32 ``torch`` run of the same seed and variant.

    The first reference run (by name) of each (variant, seed) is the yardstick; every other completed
    run with that key is measured against it, a repeated reference run included (the noise floor).
    """
    done = sorted((r for r in runs if r.completed), key=lambda r: r.name)
    refs: dict[tuple, tuple[Run, dict[int, float]]] = {}  # (variant, seed) -> (run, step -> val loss)
    for r in done:
        if _is_reference(r) and (r.variant, r.seed) not in refs:
            refs[(r.variant, r.seed)] = (r, {s: v for s, v, _ in r.val_curve()})
    rows = []
    for r in done:
        ref, theirs = refs.get((r.variant, r.seed), (None, None))
        if ref is None or ref is r:
            continue
        mine = {s: v for s, v, _ in r.val_curve()}
        steps = sorted(mine.keys() & theirs.keys())
        if not steps:
            continue
        deltas = [abs(mine[s] - theirs[s]) for s in steps]
        worst = max(range(len(steps)), key=deltas.__getitem__)
        rows.append([r.label, str(r.seed), str(len(steps)), f"{deltas[worst]:.5f}", str(steps[worst]),
                     f"{deltas[-1]:.5f}"])
    return rows


def write_csv(path: Path, groups: Sequence[Group]) -> None:
    fields = ["implementation", "rope", "variant", "compute_dtype", "n", "seeds"]
    for m, _, _ in METRICS:
        fields += [f"{m}_mean", f"{m}_std"]
    fields.append("n_excluded")
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(fields)
        for g in groups:
            if not g.n:
                continue
            row: list[Any] = [g.label, g.key[0], g.key[1] or "", g.key[2] or "", g.n, " ".join(str(s) for s in g.seeds)]
            for m, _, _ in METRICS:
                mean, std, _ = g.stats[m]
                row += ["" if mean is None else repr(mean), "" if std is None else repr(std)]
            row.append(len(g.excluded))
            w.writerow(row)


def _new_figure():
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 4), dpi=100)
    FigureCanvasAgg(fig)  # Agg, without touching pyplot's global backend
    return fig


def _colors(n: int) -> list:
    from matplotlib import colormaps

    cmap = colormaps["tab10"]
    return [cmap(i % 10) for i in range(n)]


def plot_loss_curves(path: Path, groups: Sequence[Group]) -> None:
    """Val loss vs step and vs training time: mean over seeds, min-max band."""
    fig = _new_figure()
    ax_step, ax_time = fig.subplots(1, 2)
    any_curve = False
    for g, color in zip(groups, _colors(len(groups)), strict=True):
        per_step: dict[int, list[tuple[float, float | None]]] = {}
        for r in g.runs:
            for step, loss, t in r.val_curve():
                per_step.setdefault(step, []).append((loss, t))
        if not per_step:
            continue
        any_curve = True
        steps = sorted(per_step)
        mean = [statistics.fmean(v[0] for v in per_step[s]) for s in steps]
        lo = [min(v[0] for v in per_step[s]) for s in steps]
        hi = [max(v[0] for v in per_step[s]) for s in steps]
        ax_step.plot(steps, mean, color=color, label=f"{g.label} (n={g.n})")
        ax_step.fill_between(steps, lo, hi, color=color, alpha=0.2, linewidth=0)
        timed = [(s, statistics.fmean(t for _, t in per_step[s] if t is not None)) for s in steps
                 if any(t is not None for _, t in per_step[s])]
        if timed:
            idx = {s: i for i, s in enumerate(steps)}
            ts = [t for _, t in timed]
            ax_time.plot(ts, [mean[idx[s]] for s, _ in timed], color=color, label=g.label)
            ax_time.fill_between(ts, [lo[idx[s]] for s, _ in timed], [hi[idx[s]] for s, _ in timed],
                                 color=color, alpha=0.2, linewidth=0)
    ax_step.set(xlabel="step", ylabel="val loss", title="val loss vs step")
    ax_time.set(xlabel="training time (s, mean over seeds)", ylabel="val loss", title="val loss vs training time")
    for ax in (ax_step, ax_time):
        ax.grid(alpha=0.3)
        if not any_curve:
            ax.text(0.5, 0.5, "no val lines in metrics.jsonl", ha="center", va="center", transform=ax.transAxes)
    if any_curve:
        ax_step.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)


def plot_speed(path: Path, groups: Sequence[Group]) -> None:
    """Bars of tokens/s and training time per implementation, error bars = sample std over seeds."""
    fig = _new_figure()
    axes = fig.subplots(1, 2)
    shown = [g for g in groups if g.n]
    colors = _colors(len(groups))[: len(shown)]
    labels = [g.label for g in shown]
    x = list(range(len(shown)))
    for ax, metric, title in ((axes[0], "tokens_per_s", "tokens/s (higher is better)"),
                              (axes[1], "train_time_s", "training time (s, lower is better)")):
        means = [g.mean(metric) or 0.0 for g in shown]
        errs = [g.std(metric) or 0.0 for g in shown]
        ax.bar(x, means, yerr=errs, capsize=4, color=colors)
        ax.set_xticks(x, labels, rotation=20, ha="right", fontsize=8)
        ax.set_title(title)
        ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)


def default_out_dir(paths: Sequence[str | os.PathLike]) -> Path:
    """The single dir given; else the common parent of the dirs given (cwd if that is the filesystem root)."""
    if len(paths) == 1:
        p = Path(paths[0])
        return p.parent if p.is_file() else p
    try:
        common = Path(os.path.commonpath([str(Path(p).resolve()) for p in paths]))
    except ValueError:
        return Path.cwd()
    return Path.cwd() if common == Path(common.anchor) else common


def compare_runs(
    run_dirs: Sequence[str | os.PathLike] | str | os.PathLike,
    out_dir: str | os.PathLike | None = None,
    allow_mixed: bool = False,
) -> Path:
    """Compare the runs at or below ``run_dirs`` and write the report into ``out_dir``.

    ``run_dirs`` may be run dirs, multirun dirs or any parent of them (searched recursively for
    ``summary.json``). ``out_dir`` defaults to :func:`default_out_dir`. Returns the path of
    ``comparison.md`` (``comparison.csv``, ``loss_curves.png`` and ``speed.png`` sit next to it).

    Raises :class:`NoRunsError` when nothing (completed) is found, :class:`MixedRunsError` when the
    runs differ in more than rope and seed and ``allow_mixed`` is false.
    """
    if isinstance(run_dirs, (str, os.PathLike)):
        run_dirs = [run_dirs]
    run_dirs = list(run_dirs)
    runs = load_runs(run_dirs)
    diffs = config_differences(runs)
    if diffs and not allow_mixed:
        check_not_mixed(runs)
    elif diffs:
        log.warning("comparing mixed runs (allow_mixed): %s differ", ", ".join(diffs))
    for r in runs:
        if not r.completed:
            log.warning("%s: status %r, left out of the statistics and plots", r.name, r.status)
    if not any(r.completed for r in runs):
        raise NoRunsError(f"none of the {len(runs)} run(s) completed (statuses: {_distinct(r.status for r in runs)})")

    groups = group_runs(runs)
    out = Path(out_dir) if out_dir is not None else default_out_dir(run_dirs)
    out.mkdir(parents=True, exist_ok=True)
    md = out / MD_FILE
    write_markdown(md, runs, groups, diffs, [str(p) for p in run_dirs])
    write_csv(out / CSV_FILE, groups)
    plot_loss_curves(out / CURVES_FILE, groups)
    plot_speed(out / SPEED_FILE, groups)
    log.info("wrote %s, %s, %s, %s in %s", MD_FILE, CSV_FILE, CURVES_FILE, SPEED_FILE, out)
    return md
