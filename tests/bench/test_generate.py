"""bench/generate.py's progress line for a point: true to the point's CSV row (bench/results/generate.csv)."""

from __future__ import annotations

import pytest

from bench.generate import point_line
from llm.generation.speed import DecodeSpeed

HEAD = {"model": "tiny", "implementation": "torch"}
NOTE = "capture needs a CUDA device; decoding eagerly on cpu"


def point(mode: str, captured: bool, note: str | None, rate: float | None = 63.0) -> DecodeSpeed:
    return DecodeSpeed(mode, "sdpa", 1, 4, 3, first_token_ms=15.5 if rate else None, decode_tok_s=rate,
                       captured=captured, note=note)


@pytest.mark.parametrize("measured,line", [
    # a captured point whose step ran eagerly read "captured" while its row said captured=False, and hid its note
    (point("captured", False, NOTE), f"tiny torch B=1 prompt 4 captured (not captured) sdpa: 63 tok/s, first token "
                                     f"15.5 ms ({NOTE})"),
    (point("captured", True, None), "tiny torch B=1 prompt 4 captured sdpa: 63 tok/s, first token 15.5 ms"),
    (point("eager", False, None), "tiny torch B=1 prompt 4 eager sdpa: 63 tok/s, first token 15.5 ms"),
    (point("captured", False, "out of memory", rate=None), "tiny torch B=1 prompt 4 captured sdpa: out of memory"),
])
def test_a_point_s_line_says_what_its_row_says(measured, line):
    assert point_line(HEAD, measured) == line
