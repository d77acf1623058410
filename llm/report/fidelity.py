"""Fidelity: how far each run's val-loss curve is from the float32 ``torch`` run of the same seed.

Implementations of the same function should train the same model; with ``train.deterministic=true``
a repeated reference run sits at exactly 0, so this per-seed table shows what the RoPE arithmetic
alone changes (the statistics in :mod:`llm.report.stats` answer the across-seed question).
"""

from __future__ import annotations

from collections.abc import Sequence

from llm.report.runs import Run


def is_reference(r: Run) -> bool:
    """A float32 ``torch`` run: the yardstick of the fidelity table."""
    return r.rope == "torch" and r.compute_dtype == "float32"


def fidelity_rows(runs: Sequence[Run]) -> list[list[str]]:
    """Per run: ``[label, seed, evals, max |Δ val loss|, at step, final |Δ|]`` against its reference.

    The first reference run (by name) of each (variant, packing, seed) is the yardstick; every other completed
    run with that key is measured against it, a repeated reference run included (the noise floor). The packing is
    part of the key because a run trained on document-aligned windows is another model (:attr:`Run.key`): against
    the reference of the other packing its |Δ| would be the packing's, not the arithmetic's.
    """
    done = sorted((r for r in runs if r.completed), key=lambda r: r.name)
    refs: dict[tuple, tuple[Run, dict[int, float]]] = {}  # (variant, packing, seed) -> (run, step -> val loss)
    for r in done:
        if is_reference(r) and (r.variant, r.packing, r.seed) not in refs:
            refs[(r.variant, r.packing, r.seed)] = (r, {s: v for s, v, _ in r.val_curve()})
    rows = []  # (label, seed, row): shown by implementation, then seed (run-dir names sort seed 10 before seed 2)
    for r in done:
        ref, theirs = refs.get((r.variant, r.packing, r.seed), (None, None))
        if ref is None or ref is r or theirs is None:
            continue
        mine = {s: v for s, v, _ in r.val_curve()}
        steps = sorted(mine.keys() & theirs.keys())
        if not steps:
            continue
        deltas = [abs(mine[s] - theirs[s]) for s in steps]
        worst = max(range(len(steps)), key=deltas.__getitem__)
        rows.append((r.label, -1 if r.seed is None else r.seed,
                     [r.label, str(r.seed), str(len(steps)), f"{deltas[worst]:.5f}", str(steps[worst]),
                      f"{deltas[-1]:.5f}"]))
    return [row for *_, row in sorted(rows, key=lambda x: x[:2])]
