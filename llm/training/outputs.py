"""What a run writes: ``metrics.jsonl`` (flushed line by line), ``summary.json``, ``config.yaml``, wandb,
``eval_windows.json`` (the newest eval's loss per val window, for the report's per-window statistics) and
with ``train.sample_every`` ``samples.jsonl`` (the model's greedy continuations of fixed prompts).

Writing each metrics line as it comes means a crash or Ctrl-C never loses what was already measured.
Only rank 0 writes; the other ranks get :class:`NullOutputs`, an object with the same methods that
does nothing, so the training loop has no ``if is_main`` branches.
"""

from __future__ import annotations

import errno
import json
import logging
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from llm.fileio import DiskFullError, read_jsonl, write_json_atomic, write_text_atomic
from llm.run_files import CONFIG_FILE, EVAL_WINDOWS_FILE, METRICS_FILE, SAMPLES_FILE, SUMMARY_FILE

log = logging.getLogger(__name__)

#: The columns of the samples table (wandb) and the keys of its rows in samples.jsonl.
SAMPLE_COLUMNS = ("step", "prompt", "text")


def holds_a_run(path: Path) -> bool:
    """Whether ``path`` is a run dir (its config, or its checkpoints/), not a folder of runs or anything else:
    what ``run=`` and ``train.init_from=`` refuse as "not a run dir" before looking for a checkpoint."""
    return (path / CONFIG_FILE).is_file() or (path / "checkpoints").is_dir()


def _clean(v: Any) -> Any:
    """JSON-safe scalars: non-finite floats become strings so the line stays valid JSON."""
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    return v


def truncate_metrics(path: Path, step: int) -> None:
    """Keep only lines up to ``step`` (they are logged again, identically, after a resume).

    A torn line (a crash mid-write) is dropped with a warning instead of blocking every later resume.
    """
    if not path.exists():
        return
    records, dropped = read_jsonl(path)
    if dropped:
        log.warning(f"{path}: dropped {dropped} unreadable line(s) (a write cut short by a crash)")
    write_text_atomic(path, "".join(json.dumps(r) + "\n" for r in records if r.get("step", 0) <= step))


class MetricsWriter:
    """Appends one JSON object per call to ``path`` and flushes it to disk at once."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._f = open(self.path, "a", buffering=1)

    def write(self, record: Mapping[str, Any]) -> None:
        try:
            self._f.write(json.dumps({k: _clean(v) for k, v in record.items()}) + "\n")
            self._f.flush()
            os.fsync(self._f.fileno())
        except OSError as e:
            if e.errno in (errno.ENOSPC, errno.EDQUOT):
                raise DiskFullError(self.path) from e
            raise

    def close(self) -> None:
        try:
            self._f.close()
        except OSError:
            pass


class Tracker:
    """wandb run for one training run (a no-op when ``logger=none`` or mode=disabled).

    The mode is ``logger.wandb.mode``, whose default (conf/logger/wandb.yaml) is ``$WANDB_MODE``, else offline:
    wandb's own switch is honoured, and a mode named on the command line wins over it. The mode used is logged.

    Best effort once the config was accepted: wandb is a copy of what ``metrics.jsonl`` and ``summary.json`` hold,
    so a wandb that cannot start its run (its dir not writable, no network) or fails mid-run (its service process
    gone) is said in one warning line and the run trains on without it, instead of failing with a traceback.

    A resume that trains on from its checkpoint's step (``resume_step``) rewinds the wandb run to that step
    (``wandb.init(resume_from="<id>?_step=<step>")``), as ``metrics.jsonl`` is cut back to it: the steps trained
    again replace the ones logged after the checkpoint. Resumed plainly, wandb would keep the first values of those
    steps (it drops a row whose step is not above the run's last). See :meth:`_init`.
    """

    def __init__(self, logger_cfg: Mapping, run_dir: Path, name: str, group: str, config: dict,
                 resume_id: str | None = None, resume_step: int | None = None) -> None:
        self.run = None
        self._id = resume_id  # kept when wandb fails: the checkpoint saves it, so a resume continues that wandb run
        wcfg = logger_cfg.get("wandb") if logger_cfg.get("name") == "wandb" else None
        if not wcfg:
            return
        mode = wcfg.get("mode", "offline")
        env = os.environ.get("WANDB_MODE")
        over = f", not $WANDB_MODE={env}" if env else ""
        source = "from $WANDB_MODE" if env == mode else f"logger.wandb.mode{over}"
        if mode == "disabled":
            log.info(f"wandb: disabled ({source}), nothing is logged to wandb")
            return
        import wandb

        os.environ.setdefault("WANDB_SILENT", "true")
        group = str(wcfg.get("group") or group)  # sweep.name may be a number; wandb takes a string only
        args = dict(project=wcfg.get("project", "ropelab"), entity=wcfg.get("entity"), group=group, name=name,
                    config=config, dir=str(run_dir), mode=mode, tags=list(wcfg.get("tags") or []), id=resume_id)
        try:
            self.run = self._init(wandb, args, resume_id, resume_step)
        except Exception as e:  # noqa: BLE001 - the run's own files do not need wandb
            self._give_up("could not start its run", e)
            return
        self._id = self.run.id
        log.info(f"wandb: {mode} mode ({source}), project {wcfg.get('project', 'ropelab')}, group {group}")

    @staticmethod
    def _init(wandb: Any, args: dict, resume_id: str | None, resume_step: int | None) -> Any:
        """``wandb.init``: a new run, the run ``resume_id`` rewound to ``resume_step``, or, without a step (a resume
        that trains nothing) or where the rewind fails, that run resumed as it is.

        A rewind is a server feature that can be refused (W&B's preview of it, a server without it, a run the server
        never received), so a failed one is said in one warning line and the run is resumed as it is; offline, wandb
        records the rewind and ``wandb sync`` asks the server for it, after uploading the run's earlier segments."""

        def init(**how: Any) -> Any:  # new Settings each time: wandb.init writes its arguments into the ones it gets
            return wandb.init(**args, **how, settings=wandb.Settings(console="off"))

        if resume_id is None:
            return init()
        if resume_step is None:
            return init(resume="allow")
        try:
            return init(resume_from=f"{resume_id}?_step={resume_step}")
        except Exception as e:  # noqa: BLE001 - the resume below still continues the run's curves
            failed = e
        try:  # the failed init still holds the run's id in wandb's service, which refuses a second init with it
            wandb.teardown()
        except (Exception, SystemExit):  # noqa: BLE001 - the init below says whether wandb can go on
            pass
        run = init(resume="allow")
        kept = range(resume_step + 1, run.starting_step)  # the steps wandb's run already holds past the checkpoint
        span = f"step {kept[0]}" if len(kept) == 1 else f"steps {kept[0]}-{kept[-1]}" if kept else ""
        lines = str(failed).strip().splitlines()
        log.warning(f"wandb: could not rewind run {resume_id} to step {resume_step} ({type(failed).__name__}"
                    f"{': ' + lines[0] if lines else ''}); resumed it as it is: "
                    + (f"the dashboard keeps the first values of {span} (metrics.jsonl holds those trained again)"
                       if span else "it holds no step past the checkpoint"))
        return run

    def _give_up(self, what: str, error: BaseException) -> None:
        """Say once that wandb failed, and log nothing more to it in this run."""
        lines = str(error).strip().splitlines()
        log.warning(f"wandb: {what} ({type(error).__name__}{': ' + lines[0] if lines else ''}); the run goes on "
                    "without wandb, metrics.jsonl and summary.json hold everything it measures")
        if self.run is not None:  # its service may be gone: wandb's exit hook would then print a traceback at exit
            import wandb

            try:
                wandb.teardown()
            except (Exception, SystemExit):  # noqa: BLE001 - the failure was said above; nothing more to do
                pass
        self.run = None

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> None:
        """``fn(*args, **kwargs)`` on the live wandb run; a failure turns wandb off (:meth:`_give_up`)."""
        if self.run is None:
            return
        try:
            fn(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 - a tracker failure must not end the training
            self._give_up(what, e)

    @property
    def run_id(self) -> str | None:
        return self._id

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        if self.run is not None:
            self._call(f"logging step {step} failed", self.run.log, dict(metrics), step=step)

    def log_table(self, key: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], step: int) -> None:
        """A table under ``key`` at ``step``; the latest one logged is the one a dashboard shows."""
        if self.run is not None:
            import wandb

            table = wandb.Table(columns=list(columns), data=[list(r) for r in rows])
            self._call(f"logging the {key} table at step {step} failed", self.run.log, {key: table}, step=step)

    def summary(self, metrics: Mapping[str, Any]) -> None:
        if self.run is not None:
            self._call("updating the summary failed", self.run.summary.update, dict(metrics))

    def finish(self, exit_code: int = 0) -> None:
        if self.run is not None:
            self._call("finishing the run failed", self.run.finish, exit_code=exit_code)
            self.run = None


def _val_names(values: Mapping[str, Any]) -> dict[str, Any]:
    """``val_loss`` -> ``val/loss``: the tracker's names of the val metrics (one panel group on a dashboard)."""
    return {(f"val/{k.removeprefix('val_')}" if k.startswith("val_") else k): v for k, v in values.items()}


def tracker_summary(summary: Mapping[str, Any]) -> dict[str, Any]:
    """The run's summary as the tracker keeps it: the final val metrics under the names they were logged by
    (``val/loss``, not a second ``val_loss`` beside it), keys without a value left out, but for ``message``, sent
    empty: wandb merges a resumed run's summary into the earlier one's, whose "stopped at step N" would stay."""
    kept = {k: v for k, v in summary.items() if v is not None}
    return _val_names({**kept, "message": kept.get("message", "")} if "message" in summary else kept)


class RunOutputs:
    """Rank 0's outputs of one run: the metrics file, the tracker, the summary and the resolved config."""

    def __init__(self, run_dir: Path, tracker: Tracker) -> None:
        self.run_dir = run_dir
        self.metrics = MetricsWriter(run_dir / METRICS_FILE)
        self.tracker = tracker
        self.samples: MetricsWriter | None = None  # opened on the first samples: no empty file otherwise
        # every sample so far (a resumed run's too): the table grows, so its latest version holds them all
        self.sample_rows = [[r.get(c) for c in SAMPLE_COLUMNS] for r in read_jsonl(run_dir / SAMPLES_FILE)[0]]

    @property
    def tracker_id(self) -> str | None:
        return self.tracker.run_id

    def write_config(self, yaml_text: str) -> None:
        write_text_atomic(self.run_dir / CONFIG_FILE, yaml_text)

    def log_train(self, record: dict) -> None:
        self.metrics.write(record)
        self.tracker.log({f"train/{k}": v for k, v in record.items() if k not in ("kind", "step")}, record["step"])

    def log_val(self, record: dict) -> None:
        self.metrics.write(record)
        self.tracker.log(_val_names({k: v for k, v in record.items() if k.startswith("val_")}), record["step"])

    def write_eval_windows(self, step: int, seq_len: int, starts: Sequence[int], losses: Sequence[float]) -> None:
        """``eval_windows.json``: the eval at ``step``, each window's start in the val stream and mean token loss
        (replaced atomically at every eval, so it holds the newest; the final eval's once the run ends)."""
        write_json_atomic(self.run_dir / EVAL_WINDOWS_FILE, {"step": step, "seq_len": seq_len, "starts": list(starts),
                                                             "loss": [_clean(float(v)) for v in losses]})

    def log_samples(self, step: int, records: list[dict]) -> None:
        """The model's continuations at ``step``: one ``samples.jsonl`` line each, and the wandb table."""
        if self.samples is None:
            self.samples = MetricsWriter(self.run_dir / SAMPLES_FILE)
        for record in records:
            self.samples.write({"step": step, **record})
        self.sample_rows += [[step, r["prompt"], r["text"]] for r in records]
        self.tracker.log_table("samples", SAMPLE_COLUMNS, self.sample_rows, step)

    def begin(self) -> None:
        """Remove the ``summary.json`` of an earlier command (a resumed run's last stop): a run that trains has none
        until it ends, so a kill -9 from here on leaves no record of an end it did not reach at the step it reached."""
        (self.run_dir / SUMMARY_FILE).unlink(missing_ok=True)

    def finish(self, summary: dict, exit_code: int) -> None:
        """Write ``summary.json`` and close everything; a full disk is logged, not raised (metrics stay)."""
        try:
            # non-finite values as metrics.jsonl writes them ("nan"): valid JSON, and the report reads them back
            write_json_atomic(self.run_dir / SUMMARY_FILE, summary, nonfinite=_clean)
        except DiskFullError as e:
            log.error(f"{e}; summary.json not updated (metrics.jsonl holds every measured line)")
        self.tracker.summary(tracker_summary(summary))
        self.tracker.finish(exit_code=exit_code)
        self.metrics.close()
        if self.samples is not None:
            self.samples.close()


class NullOutputs:
    """Outputs of a rank that is not rank 0: same methods, no effect."""

    tracker_id = None

    def write_config(self, yaml_text: str) -> None: ...

    def begin(self) -> None: ...

    def log_train(self, record: dict) -> None: ...

    def log_val(self, record: dict) -> None: ...

    def write_eval_windows(self, step: int, seq_len: int, starts: Sequence[int], losses: Sequence[float]) -> None: ...

    def log_samples(self, step: int, records: list[dict]) -> None: ...

    def finish(self, summary: dict, exit_code: int) -> None: ...
