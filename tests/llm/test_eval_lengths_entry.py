"""``python -m llm.eval_lengths`` reads Hydra's own mistakes as every entry point does: one line naming the option
or key and what is allowed, exit code 2 (llm.entry.run_entry)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from helpers import ROOT


@pytest.mark.parametrize("args,line", [
    (["rope=nope"], "Error: rope=nope is not an option of rope; allowed: "),
    (["lenghts=[64]"], "Error: lenghts is not a known key, so nothing would read it; did you mean lengths?"),
])
def test_a_hydra_level_mistake_in_eval_lengths_is_one_line_and_exit_2(args, line):
    proc = subprocess.run([sys.executable, "-m", "llm.eval_lengths", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith(line), proc.stderr
