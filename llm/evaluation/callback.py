"""Hydra callback: when a sweep ends, evaluate every completed run at other lengths and write the report.

Enabled by ``+experiment=length_generalization`` (conf/experiment/length_generalization.yaml)::

    hydra:
      callbacks:
        length_generalization:
          _target_: llm.evaluation.callback.LengthGeneralizationOnMultirunEnd
          lengths: [512, 1024, 2048, 4096, 8192]
          scalings: [none, linear, ntk, yarn]
          factor: auto          # at each length L: L / the training length (min 1)
          tokens: 1048576       # target tokens per length, from whole val documents at least that long
          devices: auto         # the runs evaluated in parallel: per_device processes per visible GPU

``scalings`` entries: ``none``, a method name (takes ``factor``), ``run`` (the run's own scaling, as it was
trained: what a fine-tuned run is evaluated with) or a mapping of ``rope.scaling`` keys.

Each run gets ``eval_lengths/<label>.json`` per scaling (a run with ``rope=none`` only ``none``: a
scaling changes nothing without a rotation), then the sweep dir gets the report of
:mod:`llm.report.length`. Like the comparison callback it never fails the sweep: a run that cannot be
evaluated, or a report that cannot be written, is a warning with the command to do it by hand.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

log = logging.getLogger(__name__)


#: The ``scalings`` entry that evaluates a run with its own scaling.
AS_TRAINED = "run"


def scaling_requests(scalings: Sequence[str | Mapping], factor: float | str | None) -> list[dict | None]:
    """``rope.scaling`` requests from the callback's ``scalings``: a method name takes ``factor``
    (``none`` none), ``run`` is the run's own scaling (no request), a mapping is taken as it is."""
    out: list[dict | None] = []
    for s in scalings:
        if isinstance(s, Mapping) or OmegaConf.is_dict(s):
            out.append(dict(OmegaConf.to_container(s) if OmegaConf.is_dict(s) else s))
        elif str(s) == AS_TRAINED:
            out.append(None)
        elif str(s) == "none":
            out.append({"type": "none"})
        else:
            out.append({"type": str(s), "factor": factor})
    return out


class LengthGeneralizationOnMultirunEnd(Callback):
    """At the end of a multirun, evaluate each completed run under ``hydra.sweep.dir`` at ``lengths`` with each
    of ``scalings``, then write ``length_report.md``/``.csv``, ``length_curves.png`` and ``position_loss.png``."""

    def __init__(self, lengths: Sequence[int] | None = None, scalings: Sequence[str | Mapping] = ("none",),
                 factor: float | str | None = "auto", tokens: int | None = None, batch_tokens: int = 65536,
                 bucket_size: int | None = None, dtype: str = "auto", attention: str = "auto",
                 reference_len: int | None = None, baseline_window: int | None = None,
                 baseline_stride: int | None = None, devices: str | Sequence[str] | None = "auto",
                 per_device: int = 1) -> None:
        self.options: dict[str, Any] = {"lengths": lengths, "tokens": tokens, "batch_tokens": batch_tokens,
                                        "bucket_size": bucket_size, "dtype": dtype, "attention": attention,
                                        "reference_len": reference_len, "baseline_window": baseline_window,
                                        "baseline_stride": baseline_stride}
        self.requests = scaling_requests(list(scalings), factor)
        self.devices = devices
        self.per_device = int(per_device)
        self.last_report: Path | None = None

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        """Evaluate and report; every error becomes a warning, because the sweep's runs are done and fine."""
        self.last_report = None
        sweep_dir: Path | None = None
        try:
            sweep_dir = Path(str(config.hydra.sweep.dir))
            self._evaluate(sweep_dir, config)
            self._report(sweep_dir)
        except Exception as e:  # never let the evaluation break a finished sweep
            log.warning("length generalization report failed for %s (%s: %s); the runs are unaffected. Retry with: "
                        "python -m scripts.length_report %s", sweep_dir, type(e).__name__, e,
                        sweep_dir if sweep_dir is not None else "<sweep dir>", exc_info=True)

    def _worker_devices(self, config: DictConfig) -> list[str]:
        """One entry per evaluation process: ``per_device`` per device of ``devices`` (``auto``: every visible GPU;
        without one, the sweep's ``device`` in this process); a single entry means in this process."""
        devices = self.devices
        if devices in (None, "auto"):
            import torch

            count = torch.cuda.device_count()
            if not count:
                return [str(config.get("device", "auto"))]
            devices = [f"cuda:{i}" for i in range(count)]
        elif isinstance(devices, str):
            devices = [devices]
        return [str(d) for d in devices for _ in range(max(1, self.per_device))]

    def _evaluate(self, sweep_dir: Path, config: DictConfig) -> None:
        from llm.evaluation.lengths import read_settings
        from llm.report.runs import load_all_runs

        options = {**self.options, "cache_dir": config.get("cache_dir")}
        workers = self._worker_devices(config)
        read_settings({**options, "device": "cpu"})  # a bad option: one warning now, not one per run
        runs = [r for r in load_all_runs([sweep_dir]) if r.completed]
        jobs = [(str(run.path), run.name, self.requests if run.rope != "none" else [{"type": "none"}])
                for run in runs]
        if len(workers) == 1:
            for i, ((path, name, requests), run) in enumerate(zip(jobs, runs, strict=True), 1):
                log.info(f"length evaluation {i}/{len(jobs)}: {name} ({run.label}, seed {run.seed}), "
                         f"{len(requests)} scaling(s)")
                _report_outcome(evaluate_run(path, name, requests, options, workers[0], log.info))
            return
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        log.info(f"length evaluation of {len(jobs)} run(s) in {len(workers)} processes on {', '.join(set(workers))}")
        with ProcessPoolExecutor(len(workers), mp_context=multiprocessing.get_context("spawn")) as pool:
            # runs dealt to the devices in turn: each device gets its share of the processes' work
            futures = [pool.submit(evaluate_run, path, name, requests, options, workers[i % len(workers)])
                       for i, (path, name, requests) in enumerate(jobs)]
            for done, future in enumerate(as_completed(futures), 1):
                outcome = future.result()
                for line in outcome[1]:
                    log.info(line)
                log.info(f"length evaluation {done}/{len(jobs)} done: {outcome[0]}")
                _report_outcome(outcome)

    def _report(self, sweep_dir: Path) -> None:
        from llm.report.errors import NoRunsError
        from llm.report.length import build_length_report
        from llm.report.length_writers import write_length_report

        try:
            report = build_length_report([sweep_dir])
        except NoRunsError as e:
            log.warning("length generalization report skipped for %s: %s", sweep_dir, e)
            return
        self.last_report = write_length_report(report, sweep_dir)
        log.info("length generalization report written to %s", self.last_report)


def evaluate_run(path: str, name: str, requests: list, options: dict, device: str,
                 emit: Callable[[str], None] | None = None) -> tuple[str, list[str], str | None]:
    """Evaluate one run with every request on ``device``: (name, its progress lines, a warning or None).
    Top-level, so that a worker process can run it; never raises, one run's problem is its own."""
    from llm.errors import UserError
    from llm.evaluation.lengths import evaluate_scalings, read_settings

    lines: list[str] = []

    def keep(line: str) -> None:
        lines.append(line)
        if emit is not None:
            emit(line)

    try:
        evaluate_scalings(Path(path), requests, read_settings({**options, "device": device}), emit=keep)
    except UserError as e:
        return name, lines, f"{name}: not evaluated at other lengths: {e}"
    except Exception as e:  # one run's problem must not cost the others their evaluation
        log.debug("length evaluation of %s failed", name, exc_info=True)
        return name, lines, (f"{name}: length evaluation failed ({type(e).__name__}: {e}); by hand: "
                             f"python -m llm.eval_lengths run={path}")
    return name, lines, None


def _report_outcome(outcome: tuple[str, list[str], str | None]) -> None:
    if outcome[2] is not None:
        log.warning(outcome[2])
