"""scripts/gpu_check.sh refuses an unknown part in one line, before it writes or runs anything."""

import subprocess

from helpers import ROOT


def test_an_unknown_part_is_one_line_before_any_work():
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check.sh"), "tests", "bogus"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("gpu_check.sh: unknown part 'bogus'; the parts are: tests suite bench step mfu "
                                   "small presets")
    assert proc.stdout == ""  # neither the report nor a test ran
