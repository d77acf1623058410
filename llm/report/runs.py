"""Finding and reading run dirs, crashed jobs included, so no run disappears from a report unnoticed.

A *run dir* is any directory holding ``summary.json`` (found recursively, so a Hydra multirun dir, a
list of run dirs or a mix of both all work). Each run also has ``config.yaml`` (resolved config;
``.hydra/config.yaml`` is the fallback), ``metrics.jsonl`` (train/val lines) and, from runs that record
them, ``eval_windows.json`` (the last eval's loss per val window).

A job that died too hard to write ``summary.json`` (killed, out of memory, a segfault) still left
``.hydra/``, ``config.yaml`` or ``metrics.jsonl`` behind: it is loaded as a :class:`Run` with the status
:data:`CRASHED`, so the report lists it and :func:`sweep_failures` counts it.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

import rope
from llm.config_keys import load_run_config
from llm.fileio import read_jsonl
from llm.report.errors import NoRunsError
from llm.run_files import (
    ABORTED,
    COMPLETED,
    CONFIG_FILE,
    EVAL_WINDOWS_FILE,
    INTERRUPTED,
    METRICS_FILE,
    SUMMARY_FILE,
    SummaryError,
    load_summary,
)

log = logging.getLogger(__name__)


# The statuses a run's summary.json records are llm.run_files' (COMPLETED, INTERRUPTED, ...); these are the report's
# own, for what it finds in place of a summary.
#: Status of a job dir without ``summary.json`` (the process died before writing it).
CRASHED = "crashed (no summary.json)"
#: Status of a run whose ``summary.json`` exists but cannot be read as a summary (``llm.run_files.load_summary``).
UNREADABLE = "unreadable summary.json"
#: Status of a job whose process still holds its dir (a sweep still going): neither failed nor done.
RUNNING = "running"
#: Status of a job a sweep's ``multirun.yaml`` lists but that has no dir (the sweep was killed before it).
NOT_STARTED = "not started"
#: The statuses that are no failure (a run stopped on purpose, or not yet run) and the report's word for each: a run
#: stopped by Ctrl-C or SIGTERM counted as failed would send its user looking for a bug.
NOT_FAILURES = {INTERRUPTED: "interrupted", ABORTED: "aborted", RUNNING: "still running", NOT_STARTED: "not started"}
#: The report's word for every other status but completed (failed, nonfinite, config_error, crashed, unreadable).
FAILED_OR_CRASHED = "failed or crashed"
#: The job dir name of the project's sweeps (``conf/config.yaml``): a job is found by its number.
NUMBERED_SUBDIR = "${hydra.job.num}_"

PathLike = str | os.PathLike


def failure_kind(status: str) -> str:
    """What happened to a run of ``status`` (not completed), in the report's words: one of :data:`NOT_FAILURES`'
    words, else :data:`FAILED_OR_CRASHED`."""
    return NOT_FAILURES.get(status, FAILED_OR_CRASHED)


def get_dotted(d: dict[str, Any], dotted: str) -> Any:
    """``d["a"]["b"]`` for ``"a.b"``; None when any level is missing (configs of old runs lack keys)."""
    cur: Any = d
    for part in dotted.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return None
        cur = cur[part]
    return cur


def as_float(v: Any) -> float | None:
    """A summary or metrics value as a float; None for missing values, booleans and non-numeric text.

    Non-finite floats arrive as text (``"nan"``, ``"inf"``: the metrics writer keeps lines valid JSON)
    and come back as floats, so a diverged run shows ``nan`` rather than a gap.
    """
    if v is None or isinstance(v, bool):
        return None
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


#: ``data.packing``'s default: runs trained with it carry no packing mark in their labels.
DEFAULT_PACKING = "random"


def with_packing(label: str, packing: str) -> str:
    """``label`` marked with the training packing (``torch (partial, float32) · documents``), unmarked for the
    default: one spelling for the comparison and the length report."""
    return label if packing == DEFAULT_PACKING else f"{label} · {packing}"


@dataclass
class Run:
    """One training run as read from its directory (or a crashed job, with a synthetic summary)."""

    path: Path
    config: dict[str, Any]
    summary: dict[str, Any]
    metrics: list[dict[str, Any]] = field(default_factory=list)
    name: str = ""
    #: The implementation a run that did not complete belongs to, where the report knows it better than the run's own
    #: record (:func:`llm.report.analysis.group_runs`): a job refused or killed before building its RoPE recorded no
    #: compute dtype, and a job a sweep never started only its ``rope=`` preset (``torch_full``).
    identity: tuple[str, str | None, str | None, str] | None = None
    #: Lines of ``metrics.jsonl`` that did not read (a write cut short by a crash, an edit), skipped: the report names
    #: them, as its curves and per-step numbers leave them out.
    skipped_metric_lines: int = 0

    @property
    def rope(self) -> str:
        return str(self.summary.get("rope") or get_dotted(self.config, "rope.name") or "?")

    @property
    def variant(self) -> str | None:
        v = self.summary.get("variant", get_dotted(self.config, "rope.variant"))
        return None if v is None else str(v)

    @property
    def compute_dtype(self) -> str | None:
        v = self.summary.get("compute_dtype", get_dotted(self.config, "rope.compute_dtype"))
        return None if v is None else str(v)

    @property
    def packing(self) -> str:
        """How its training windows were laid out (``data.packing``; runs from before the key: the default)."""
        return str(get_dotted(self.config, "data.packing") or DEFAULT_PACKING)

    @property
    def key(self) -> tuple[str, str | None, str | None, str]:
        """What groups runs into one implementation: (rope, variant, compute dtype, packing). The packing is part of
        it because a model trained on document-aligned windows is another model, not another seed of the same."""
        if self.identity is not None:
            return self.identity
        return (self.rope, self.variant, self.compute_dtype, self.packing)

    @property
    def label(self) -> str:
        return with_packing(rope.label(*self.key[:3]), self.packing)

    @property
    def seed(self) -> int | None:
        s = self.summary.get("seed", self.config.get("seed"))
        try:
            return None if s is None else int(s)
        except (TypeError, ValueError):
            return None

    @property
    def status(self) -> str:
        """``completed``, ``interrupted``, ``aborted`` (a second Ctrl-C), ``nonfinite``, ``failed``, ``config_error``,
        :data:`CRASHED`, :data:`UNREADABLE` or :data:`RUNNING`."""
        return str(self.summary.get("status", COMPLETED))

    @property
    def completed(self) -> bool:
        return self.status == COMPLETED

    @property
    def message(self) -> str:
        """The first line of the run's own explanation (``summary["message"]``), for one-line listings."""
        text = str(self.summary.get("message") or "").strip()
        return text.splitlines()[0] if text else ""

    def value(self, key: str) -> float | None:
        return as_float(self.summary.get(key))

    @property
    def data_fingerprint(self) -> dict[str, Any] | None:
        """What the run trained and was evaluated on (``summary["data_fingerprint"]``: source, corpus
        fingerprint, tokenizer, split, and ``id``, a hash of the token streams); None for older runs."""
        fp = self.summary.get("data_fingerprint")
        return fp if isinstance(fp, dict) and fp.get("id") else None

    @cached_property
    def windows(self) -> dict[str, Any] | None:
        """``eval_windows.json``: ``{"step", "starts", "loss"}`` of the last eval, when the run saved it
        (None for older runs or an unreadable file)."""
        path = self.path / EVAL_WINDOWS_FILE
        try:
            data = json.loads(path.read_text())
            starts, loss = [int(v) for v in data["starts"]], [float(v) for v in data["loss"]]
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as e:
            log.warning("%s: unreadable (%s); its per-window losses are left out", path, e)
            return None
        if len(starts) != len(loss) or not all(math.isfinite(v) for v in loss):
            log.warning("%s: %d starts for %d losses, or a non-finite loss; left out", path, len(starts), len(loss))
            return None
        return {"step": data.get("step"), "starts": starts, "loss": loss}

    def eval_windows(self) -> dict[str, Any] | None:
        """:attr:`windows` when they belong to the run's final eval (the step summary.json reports)."""
        w = self.windows
        step = self.summary.get("step")
        return w if w is not None and (step is None or w["step"] in (None, step)) else None

    def val_curve(self) -> list[tuple[int, float, float | None]]:
        """``(step, val_loss, train_time_s)`` per val line, one per step (the last line for a step wins)."""
        by_step: dict[int, tuple[float, float | None]] = {}
        for m in self.metrics:
            if m.get("kind") != "val":
                continue
            step, loss = m.get("step"), as_float(m.get("val_loss"))
            if step is None or loss is None:
                continue
            t = as_float(m.get("train_time_s", m.get("wall_time_s")))
            by_step[int(step)] = (loss, t)
        return [(s, *by_step[s]) for s in sorted(by_step)]


#: Files of a run dir that may stand for it on a command line (``scripts.compare run/summary.json``).
RUN_DIR_FILES = (SUMMARY_FILE, METRICS_FILE, CONFIG_FILE)


def search_root(path: PathLike) -> Path:
    """The dir ``path`` names for a search: itself, or the run dir of one of its :data:`RUN_DIR_FILES`.

    Raises :class:`FileNotFoundError` for a path that does not exist and :class:`NoRunsError` for any other file:
    its parent would be searched whole (all of /tmp for a stray file there), and mixed into the report."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"no such file or directory: {p}")
    if not p.is_file():
        return p
    if p.name in RUN_DIR_FILES:
        return p.parent
    raise NoRunsError(f"argument DIR: {p} is a file, not a run dir or a sweep dir (give a dir, or a run's "
                      f"{SUMMARY_FILE})")


def find_run_dirs(paths: Iterable[PathLike]) -> list[Path]:
    """Every run dir (a dir containing ``summary.json``) at or below ``paths``, sorted, without duplicates.

    Raises :class:`FileNotFoundError` for a path that does not exist (:func:`search_root`).
    """
    found: dict[Path, None] = {}
    for p in paths:
        p = search_root(p)
        if (p / SUMMARY_FILE).is_file():
            found[p.resolve()] = None
        for s in sorted(p.rglob(SUMMARY_FILE)):
            if s.is_file():
                found[s.parent.resolve()] = None
    return sorted(found)


def _looks_like_job_dir(d: Path) -> bool:
    """A Hydra job dir or a training run dir: ``.hydra/``, ``metrics.jsonl``, or a config naming a rope.

    A bare ``config.yaml`` only counts when it is a training config, so e.g. the repository's ``conf/``
    is not taken for a crashed job.
    """
    if (d / ".hydra").is_dir() or (d / METRICS_FILE).is_file():
        return True
    cfg = d / CONFIG_FILE
    if not cfg.is_file():
        return False
    try:
        import yaml

        return isinstance(data := yaml.safe_load(cfg.read_text()), dict) and "rope" in data
    except Exception:  # unreadable YAML next to nothing else: not evidence of a job
        return False


def find_crashed_dirs(paths: Iterable[PathLike]) -> list[Path]:
    """Job dirs at or below ``paths`` that have ``.hydra/``, ``config.yaml`` or ``metrics.jsonl`` but no summary.

    Hidden dirs (``.hydra`` itself holds a ``config.yaml``), ``wandb`` dirs (wandb writes its own
    ``config.yaml``) and anything inside a run or job dir are not searched: only the job dirs themselves.
    """
    found: dict[Path, None] = {}
    for p in paths:
        root = search_root(p)
        for dirpath, dirnames, filenames in os.walk(root):
            here = Path(dirpath)
            if SUMMARY_FILE in filenames or _looks_like_job_dir(here):
                if SUMMARY_FILE not in filenames:
                    found[here.resolve()] = None
                dirnames[:] = []  # a job dir's insides (checkpoints/, wandb/) are not jobs
                continue
            dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d != "wandb")
    runs = find_run_dirs(paths)
    return sorted(d for d in found if not any(d in r.parents for r in runs))  # a parent of runs is no job


def _load_metrics(run_dir: Path) -> tuple[list[dict[str, Any]], int]:
    """The records of the run's ``metrics.jsonl`` and how many lines did not read (skipped, not fatal: a line cut
    short by a killed run)."""
    path = run_dir / METRICS_FILE
    out, bad = read_jsonl(path)
    if bad:
        log.warning("%s: skipped %d unreadable line(s)", path, bad)
    return out, bad


def load_run(run_dir: PathLike) -> Run:
    """Read one run dir (summary, config, metrics); an unparsable summary gives status :data:`UNREADABLE`."""
    run_dir = Path(run_dir)
    try:
        summary = load_summary(run_dir)
        if (problem := _summary_problem(summary)) is not None:
            raise SummaryError(f"{run_dir / SUMMARY_FILE}: {problem}")
    except SummaryError as e:  # listed with the reason, never a traceback: the file is the user's
        summary = {"status": UNREADABLE, "message": str(e)}
    metrics, skipped = _load_metrics(run_dir)
    if (running := _still_running(run_dir, metrics)) is not None:  # a resumed job's earlier summary is not its end
        summary = running
    # a job refused or stopped before its first step records no config: nothing is missing there
    started = bool(metrics) or summary.get("status") in (COMPLETED, UNREADABLE)
    return Run(path=run_dir, config=load_run_config(run_dir, warn=started), summary=summary, metrics=metrics,
               skipped_metric_lines=skipped)


def _summary_problem(summary: dict[str, Any]) -> str | None:
    """Why a JSON object is no summary the trainer writes, or None: every one records its status (without it the
    run read as completed, its values missing, beside its implementation as a second row of the same label), and a
    completed run's seed is an integer (another grouped the run as seed None; a job refused for its config records
    the seed as typed, ``seed=abc``)."""
    if not isinstance(summary.get("status"), str):
        return "no status: not a summary.json the trainer writes"
    seed = summary.get("seed")
    if summary["status"] == COMPLETED and seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        return f"seed {seed!r} is not an integer"
    return None


def _last_step(metrics: list[dict[str, Any]]) -> int | None:
    return max((m["step"] for m in metrics if isinstance(m.get("step"), int)), default=None)


def _still_running(job_dir: Path, metrics: list[dict[str, Any]]) -> dict[str, Any] | None:
    """A :data:`RUNNING` summary where a live process holds the job's dir, else None."""
    from llm.training.run_dir import lock_holder

    if (pid := lock_holder(job_dir)) is None:
        return None
    step = _last_step(metrics)
    return {"status": RUNNING, "step": step,
            "message": f"still running (pid {pid}); last step logged: {'none yet' if step is None else step}"}


def load_crashed_run(job_dir: PathLike) -> Run:
    """A job dir without ``summary.json`` as a :data:`CRASHED` run (:data:`RUNNING` while its process holds the dir);
    the message says how far it got."""
    job_dir = Path(job_dir)
    metrics, skipped = _load_metrics(job_dir)
    step = _last_step(metrics)
    got = "nothing logged to metrics.jsonl" if step is None else f"last step logged: {step}"
    summary = _still_running(job_dir, metrics) or {
        "status": CRASHED, "step": step, "message": f"the job died before writing summary.json; {got}"}
    return Run(path=job_dir, config=load_run_config(job_dir, warn=False), summary=summary, metrics=metrics,
               skipped_metric_lines=skipped)


def never_started(sweep_dir: Path) -> list[Run]:
    """The jobs the sweep in ``sweep_dir`` asked for (its ``multirun.yaml``) that have no dir there, as
    :data:`NOT_STARTED` runs: a sweep killed midway leaves no trace of the jobs it had not reached, and a report
    over what is there would silently cover a subset. Only for Hydra's basic sweeper and numbered job dirs, whose
    expansion is known here; nothing where ``multirun.yaml`` cannot be read or expanded."""
    from llm.sweep_jobs import BASIC_SWEEPER, expand, saved_sweep, sweep_arguments

    if not (sweep_dir / "multirun.yaml").is_file():
        return []
    try:
        hydra = saved_sweep(sweep_dir)
        numbered = str((hydra.get("sweep") or {}).get("subdir") or "").startswith(NUMBERED_SUBDIR)
        if not numbered or (hydra.get("sweeper") or {}).get("_target_") != BASIC_SWEEPER:
            return []
        jobs = expand(sweep_arguments(hydra))
        # what a job that sets no rope= or seed= trains: the sweep's own config (multirun.yaml's top level)
        base = OmegaConf.load(sweep_dir / "multirun.yaml")
        default_rope, default_seed = OmegaConf.select(base, "rope.name"), OmegaConf.select(base, "seed")
    except Exception as e:  # noqa: BLE001 - an old or hand-made multirun.yaml: the report covers what is there
        log.debug("%s: the sweep's jobs could not be listed: %s", sweep_dir, e)
        return []
    present = {d.name.split("_", 1)[0] for d in sweep_dir.iterdir() if d.is_dir()}
    shared = set.intersection(*(set(job) for job in jobs)) if jobs else set()
    missing = []
    for num, overrides in enumerate(jobs):
        if str(num) in present:
            continue
        given = dict(o.lstrip("+").split("=", 1) for o in overrides if "=" in o)
        rope_name, seed = given.get("rope", default_rope), given.get("seed", default_seed)
        name = f"{num}_{rope_name or '?'}_s{'?' if seed is None else seed}"
        swept = " ".join(o for o in overrides if o not in shared)  # what sets the job apart
        summary = {"status": NOT_STARTED, "rope": rope_name, "seed": seed,
                   "message": f"the sweep never started it ({swept})"}
        # the rope settings a job sets itself (a sweep over rope.variant=partial,full): its implementation
        summary |= {key: given[f"rope.{key}"] for key in ("variant", "compute_dtype") if f"rope.{key}" in given}
        config = {"data": {"packing": given["data.packing"]}} if "data.packing" in given else {}
        missing.append(Run(path=sweep_dir / name, config=config, summary=summary, metrics=[]))
    return missing


def load_all_runs(paths: Sequence[PathLike]) -> list[Run]:
    """Every run and crashed job at or below ``paths`` (possibly none), named relative to their common parent."""
    dirs = find_run_dirs(paths)
    crashed = find_crashed_dirs(paths)
    return _named([load_run(d) for d in dirs] + [load_crashed_run(d) for d in crashed])


def _named(runs: list[Run]) -> list[Run]:
    """``runs`` named relative to their common parent, sorted by name."""
    if not runs:
        return []
    base = Path(os.path.commonpath([str(r.path) for r in runs]))
    for r in runs:
        rel = r.path.relative_to(base) if r.path != base else Path(r.path.name)
        r.name = str(rel) if str(rel) != "." else r.path.name
    return sorted(runs, key=lambda r: r.name)


def load_runs(paths: Sequence[PathLike]) -> list[Run]:
    """:func:`load_all_runs` and the jobs that never started (:func:`never_started`) of the sweeps given or found below
    them (a parent of sweeps is searched as its runs are: a killed sweep under it must not shrink to the jobs it
    reached), refusing (:class:`NoRunsError`) when there is nothing at all to report on."""
    sweeps = {search_root(p).resolve() for p in paths}
    sweeps |= {m.parent.resolve() for p in paths for m in search_root(p).rglob("multirun.yaml") if m.is_file()}
    runs = _named(load_all_runs(paths) + [r for d in sorted(sweeps) for r in never_started(d)])
    if not any(r.status not in (CRASHED, NOT_STARTED) for r in runs):
        raise NoRunsError(
            f"no run dirs (directories with {SUMMARY_FILE}) under: {', '.join(map(str, paths))}"
            + (f" ({len(runs)} crashed job dir(s) without one)" if runs else "")
        )
    return runs


def sweep_failures(sweep_dir: PathLike) -> list[tuple[Path, str, str]]:
    """``(job dir, status, message)`` for every job under ``sweep_dir`` that did not complete.

    Covers runs whose ``summary.json`` says anything but ``completed`` and job dirs that crashed
    before writing one (status :data:`CRASHED`). The training entry point uses it to give a sweep
    with failed jobs a non-zero exit code. Raises :class:`FileNotFoundError` if ``sweep_dir`` is missing.
    """
    return [(r.path, r.status, r.message) for r in load_all_runs([sweep_dir]) if not r.completed]
