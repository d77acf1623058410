"""End to end: a tiny 3-seed x 2-implementation multirun; the Hydra callback writes the verdicts."""

from __future__ import annotations

import csv
import re
from pathlib import Path

from helpers import run_command_inprocess

from llm.report import DELTA_FILE, MD_FILE, sweep_failures


def test_multirun_report_has_verdicts(tmp_path: Path):
    sweep = tmp_path / "sweep"
    # Hydra's multirun and its callbacks as the command runs them, in this process (no start-up of a new one)
    code = run_command_inprocess(["rope=torch,none", "seed=0,1,2", "train.max_steps=1", "train.eval_batches=2",
                                  f"hydra.sweep.dir={sweep}"])
    assert code == 0 and sweep_failures(sweep) == []
    text = (sweep / MD_FILE).read_text()
    head = text[: text.index("Common config")]
    assert "Verdicts against **torch (partial, float32)**" in head
    verdict = (r"- none: (better than|worse than|equivalent to|inconclusive \(3 seeds; [^)]*\) against) "
               r"torch \(partial, float32\).*\(n=3, Δ = [+\u2212]\d\.\d{4} \[")
    assert re.search(verdict, head), head
    assert "| paired (seeds 0 1 2) | 3 |" in text
    assert "Final val loss SE" in text  # the trainer records val_loss_se / val_tokens
    with (sweep / "comparison.csv").open() as f:
        rows = {r["implementation"]: r for r in csv.DictReader(f)}
    assert set(rows) == {"torch (partial, float32)", "none"}
    assert rows["none"]["n"] == "3" and rows["none"]["pairing"] == "paired"
    # what the trainer records reaches the report: the data fingerprint, and the per-window losses (8 windows:
    # train.eval_batches=2 x train.batch_size=4) for the SE of Δ over val windows
    assert "- data fingerprint: pystdlib, tokenizer bytes, val_fraction 0.2, tokens " in text
    assert "no data fingerprint" not in text
    assert rows["none"]["val_windows"] == "8" and float(rows["none"]["val_loss_window_se"]) > 0
    assert (sweep / DELTA_FILE).stat().st_size > 0
