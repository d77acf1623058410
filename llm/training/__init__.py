"""The training runtime: the :class:`~llm.training.trainer.Trainer` and what it needs.

Modules: ``run`` (start a run: lock, resume, validate, fit), ``trainer`` (the loop), ``runtime``
(process-wide set-up), ``checkpoint``, ``resume`` (the saved config wins), ``run_dir`` (one run per
dir), ``init_from`` (weights from another run), ``outputs`` (metrics, summary, wandb), ``evaluate``, ``samples``
(the model's text during training), ``progress``, ``distributed``.
Layers (docs/architecture.md): ``rope`` <- ``llm.model`` / ``llm.data`` <- ``llm.training`` <- ``llm.train``; the
one import upwards, ``run`` reading a sweep job's varied keys from ``llm.sweep_jobs``, is listed there.
"""
