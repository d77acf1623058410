"""Evaluation of finished runs beyond what training measures: other context lengths, other RoPE scalings.

Modules: ``scaling`` (a ``rope.scaling`` request resolved per length, and its label), ``lengths`` (what
``python -m llm.eval_lengths`` does: val loss / accuracy / perplexity per length and loss against
position, written into the run dir's ``eval_lengths/``) and ``callback`` (the length-generalization
sweep's Hydra callback: every completed run evaluated, then the report of :mod:`llm.report.length`).
Layer: like ``llm.generation.load`` (which it reuses to open a run), an entry point's helper.
"""
