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


def test_a_part_that_fails_makes_the_check_fail_and_says_which(tmp_path):
    """A part that fails (here the training-step benchmark, on a machine whose GPU check is stubbed to pass, so that
    bench.step meets no GPU) is named in the report and at the end, and the script exits 1: it exited 0 whatever
    failed, so a broken benchmark or training looked like a pass."""
    import sys

    stubs = tmp_path / "bin"
    stubs.mkdir()
    (stubs / "python3").write_text(f'#!/usr/bin/env bash\nif [ "$1" = -c ] && [[ "$2" == *cuda.is_available* ]]; '
                                   f'then exit 0; fi\nexec {sys.executable} "$@"\n')
    (stubs / "nvidia-smi").write_text("#!/usr/bin/env bash\necho 'a stubbed GPU'\n")
    for stub in stubs.iterdir():
        stub.chmod(0o755)
    # no GPU visible, as the stubbed check pretends: on a GPU machine bench.step would run the real benchmark
    # its own folder: outputs/gpu_check/ may hold a real check's results (this test runs within `gpu_check.sh suite`)
    check = tmp_path / "check"
    env = {**os.environ, "PATH": f"{stubs}:{os.environ['PATH']}", "ROPELAB_CACHE": str(tmp_path / "c"),
           "CUDA_VISIBLE_DEVICES": "", "ROPELAB_GPU_CHECK_DIR": str(check), "OUT": str(tmp_path)}
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check.sh"), "step"], capture_output=True, text=True,
                          env=env, timeout=120)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1] == f"gpu_check.sh: did not pass: step (report: {check}/report.md)"
    assert f"**step did not pass** (see {check}/bench_step.log)" in proc.stdout
    assert (check / "report.md").read_text() == (tmp_path / "report.md").read_text()  # $OUT gets the report
    assert (tmp_path / "gpu_check.tar.gz").is_file()


def test_an_out_that_is_no_writable_folder_is_one_line_before_any_work(tmp_path):
    """$OUT gets the report and the tarball at the end: a folder that does not exist failed both copies after every
    part had run, and the script still exited 0. Said first, exit 2, nothing written (the GPU check stubbed)."""
    import sys

    stubs = tmp_path / "bin"
    stubs.mkdir()
    (stubs / "python3").write_text(f'#!/usr/bin/env bash\nif [ "$1" = -c ] && [[ "$2" == *cuda.is_available* ]]; '
                                   f'then exit 0; fi\nexec {sys.executable} "$@"\n')
    (stubs / "python3").chmod(0o755)
    check, missing = tmp_path / "check", tmp_path / "no-such-folder"
    env = {**os.environ, "PATH": f"{stubs}:{os.environ['PATH']}", "ROPELAB_GPU_CHECK_DIR": str(check),
           "OUT": str(missing)}
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check.sh"), "step"], capture_output=True, text=True,
                          env=env, timeout=60)
    assert proc.returncode == 2 and proc.stderr == (f"gpu_check.sh: $OUT={missing} is not a folder this user can "
                                                    "write (report.md and gpu_check.tar.gz go there)\n")
    assert proc.stdout == "" and not check.exists() and not missing.exists()
