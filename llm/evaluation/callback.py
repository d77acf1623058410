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

``scalings`` entries: ``none``, a method name (takes ``factor``), ``run`` (the run's own scaling, as it was
trained: what a fine-tuned run is evaluated with) or a mapping of ``rope.scaling`` keys.

Each run gets ``eval_lengths/<label>.json`` per scaling (a run with ``rope=none`` only ``none``: a
scaling changes nothing without a rotation), then the sweep dir gets the report of
:mod:`llm.report.length`. Like the comparison callback it never fails the sweep: a run that cannot be
evaluated, or a report that cannot be written, is a warning with the command to do it by hand.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
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
                 baseline_stride: int | None = None) -> None:
        self.options: dict[str, Any] = {"lengths": lengths, "tokens": tokens, "batch_tokens": batch_tokens,
                                        "bucket_size": bucket_size, "dtype": dtype, "attention": attention,
                                        "reference_len": reference_len, "baseline_window": baseline_window,
                                        "baseline_stride": baseline_stride}
        self.requests = scaling_requests(list(scalings), factor)
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

    def _evaluate(self, sweep_dir: Path, config: DictConfig) -> None:
        from llm.errors import UserError
        from llm.evaluation.lengths import evaluate_scalings, read_settings
        from llm.report.runs import load_all_runs

        settings = read_settings({**self.options, "device": config.get("device", "auto"),
                                  "cache_dir": config.get("cache_dir")})
        runs = [r for r in load_all_runs([sweep_dir]) if r.completed]
        for i, run in enumerate(runs, 1):
            requests = self.requests if run.rope != "none" else [{"type": "none"}]
            log.info(f"length evaluation {i}/{len(runs)}: {run.name} ({run.label}, seed {run.seed}), "
                     f"{len(requests)} scaling(s)")
            try:
                evaluate_scalings(run.path, requests, settings, emit=log.info)
            except UserError as e:
                log.warning(f"{run.name}: not evaluated at other lengths: {e}")
            except Exception as e:  # one run's problem must not cost the others their evaluation
                log.warning(f"{run.name}: length evaluation failed ({type(e).__name__}: {e}); by hand: "
                            f"python -m llm.eval_lengths run={run.path}", exc_info=True)

    def _report(self, sweep_dir: Path) -> None:
        from llm.report.errors import NoRunsError
        from llm.report.length import build_length_report, write_length_report

        try:
            report = build_length_report([sweep_dir])
        except NoRunsError as e:
            log.warning("length generalization report skipped for %s: %s", sweep_dir, e)
            return
        self.last_report = write_length_report(report, sweep_dir)
        log.info("length generalization report written to %s", self.last_report)
