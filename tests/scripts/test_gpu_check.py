"""scripts/gpu_check.sh refuses an unknown part, or a machine without a GPU, in one line, before it writes or runs
anything."""

import os
import signal
import subprocess

from helpers import ROOT


def test_an_unknown_part_is_one_line_before_any_work():
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check.sh"), "tests", "bogus"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("gpu_check.sh: unknown part 'bogus'; the parts are: tests suite bench step mfu "
                                   "small presets")
    assert proc.stdout == ""  # neither the report nor a test ran


def test_no_gpu_is_one_line_before_any_work(tmp_path):
    """Without a GPU the script ran the CPU tests for minutes, then failed every benchmark with a traceback and
    exit 0; it now says so in one line and exits 2, writing nothing (an empty $CUDA_VISIBLE_DEVICES hides any GPU)."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "OUT": str(tmp_path), "ROPELAB_CACHE": str(tmp_path / "c")}
    with subprocess.Popen(["bash", str(ROOT / "scripts" / "gpu_check.sh"), "tests"], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, env=env, start_new_session=True) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:  # it went on to run the tests: stop them all, not only bash
            os.killpg(proc.pid, signal.SIGKILL)
            raise
    assert proc.returncode == 2, stderr
    assert stderr.strip() == "gpu_check.sh: no CUDA GPU here (torch sees none): run it on a CUDA machine"
    assert stdout == "" and not list(tmp_path.iterdir())
