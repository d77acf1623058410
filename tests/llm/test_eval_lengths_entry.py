"""``python -m llm.eval_lengths`` reads Hydra's own mistakes as every entry point does: one line naming the option
or key and what is allowed, exit code 2 (llm.entry.run_entry)."""

from __future__ import annotations

import pytest
from helpers import run_module_main


@pytest.mark.parametrize("args,line", [
    (["rope=nope"], "Error: rope=nope is not an option of rope; allowed: "),
    (["lenghts=[64]"], "Error: lenghts is not a known key, so nothing would read it; did you mean lengths?"),
])
def test_a_hydra_level_mistake_in_eval_lengths_is_one_line_and_exit_2(args, line, monkeypatch, capsys):
    """The command's own __main__ in this process: refused before any work, so no process of its own is needed
    (tests/llm/test_eval_lengths.py runs the real command on bad input)."""
    code, lines = run_module_main(monkeypatch, capsys, "llm.eval_lengths", args)
    assert code == 2 and len(lines) == 1 and lines[0].startswith(line), lines
