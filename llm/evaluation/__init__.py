"""Evaluation of finished runs beyond what training measures: other context lengths, other RoPE scalings.

Modules: ``scaling`` (a ``rope.scaling`` request resolved per length, and its label), ``documents`` (the
evaluation windows: whole val documents at least L tokens long, up to a token budget), ``losses`` (per-target
losses with the full context and with a sliding window of T tokens), ``metrics`` (the numbers of one length:
the loss beyond T, the gain over the sliding window, the degradation against the run's own baseline),
``lengths`` (what ``python -m llm.eval_lengths`` does, written into the run dir's ``eval_lengths/``) and
``callback`` (the length-generalization sweep's Hydra callback: every completed run evaluated, in parallel over
the GPUs, then the report of :mod:`llm.report.length`).
Layer: like ``llm.generation.load`` (which it reuses to open a run), an entry point's helper.
"""
