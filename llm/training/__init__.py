"""The training runtime: the :class:`~llm.training.trainer.Trainer` and what it needs.

Modules: ``run`` (start a run: lock, resume, validate, fit), ``trainer`` (the loop), ``runtime``
(process-wide set-up), ``checkpoint``, ``resume`` (the saved config wins), ``run_dir`` (one run per
dir), ``outputs`` (metrics, summary, wandb), ``evaluate``, ``progress``, ``distributed``.
Layers (docs/architecture.md): ``rope`` <- ``llm.model`` / ``llm.data`` <- ``llm.training`` <- ``llm.train``.
"""
