"""``hydra/launcher=gpus``: ``sweep.jobs_per_gpu`` jobs at once on each visible device, each job in a device slot
of its own (never more than ``jobs_per_gpu`` jobs on one GPU, whichever jobs end first)."""

from __future__ import annotations

import itertools
import json
import re
import subprocess
import sys
import threading
from collections import Counter
from contextlib import ExitStack

import pytest
from helpers import CONF, ROOT, FakeGpus, run_command_inprocess
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from omegaconf.errors import InterpolationResolutionError

import llm.train  # noqa: F401  (registers the launcher's resolvers)
from llm.gpu_slots import SLOTS_DIR, try_claim
from llm.gpu_slots import claim as claim_slot
from llm.sweep_jobs import GPUS_LAUNCHER


def _launcher(overrides: list[str]):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("config", overrides=["hydra/launcher=gpus", *overrides], return_hydra_config=True)


def test_jobs_per_gpu_multiplies_the_visible_gpus(monkeypatch):
    FakeGpus(monkeypatch, count=4)
    assert _launcher([]).hydra.launcher.n_jobs == 4  # one per GPU by default
    cfg = _launcher(["++sweep.jobs_per_gpu=2"])
    assert cfg.hydra.launcher._target_ == GPUS_LAUNCHER and cfg.hydra.launcher.n_jobs == 8
    with pytest.raises(InterpolationResolutionError, match="sweep.jobs_per_gpu=0 must be a positive integer"):
        _ = _launcher(["++sweep.jobs_per_gpu=0"]).hydra.launcher.n_jobs


def _job_hc(cfg, num: int, sweep_dir) -> object:
    """The part of a job's Hydra config that picks its device: the launcher, the job number, the sweep dir."""
    launcher = {"_target_": cfg.hydra.launcher._target_, "n_jobs": cfg.hydra.launcher.n_jobs}
    return OmegaConf.create({"launcher": launcher, "job": {"num": num}, "sweep": {"dir": str(sweep_dir)}})


def test_a_job_takes_a_free_slot_whatever_its_number(monkeypatch, tmp_path, capsys):
    """2 GPUs, 2 jobs per GPU: joblib starts the next job when any worker frees. When the two jobs on cuda:1 end
    first, jobs 4 and 5 must both go to cuda:1; by job number, job 4 would be the third job on cuda:0 (the
    out-of-memory crash of a 4-GPU sweep). A job's slot frees when it ends, crash or not."""
    from llm.train import _pin_parallel_job

    FakeGpus(monkeypatch, count=2)
    cfg = _launcher(["++sweep.jobs_per_gpu=2"])
    running: dict[int, tuple[ExitStack, str]] = {}

    def start(num: int) -> None:
        job, stack = OmegaConf.create({"device": "auto"}), ExitStack()
        stack.enter_context(_pin_parallel_job(job, _job_hc(cfg, num, tmp_path)))
        running[num] = (stack, job.device)
        assert max(Counter(d for _, d in running.values()).values()) <= 2, {n: d for n, (_, d) in running.items()}

    for num in range(4):
        start(num)
    assert Counter(d for _, d in running.values()) == {"cuda:0": 2, "cuda:1": 2}
    for num in (1, 3):
        running.pop(num)[0].close()
    start(4)
    start(5)
    assert running[4][1] == running[5][1] == "cuda:1"
    with pytest.raises(RuntimeError):  # a job that crashes frees its slot
        with running.pop(0)[0]:
            raise RuntimeError("job 0 failed")
    start(6)
    assert running[6][1] == "cuda:0"
    assert "job 6: runs on GPU 0 (slot 0.0), device=cuda:0" in capsys.readouterr().err


def test_an_explicit_device_or_a_serial_sweep_takes_no_slot(monkeypatch, tmp_path):
    from llm.train import _pin_parallel_job

    FakeGpus(monkeypatch, count=2)
    cfg = _launcher(["++sweep.jobs_per_gpu=1"])
    for job, hc in [({"device": "cuda:1"}, _job_hc(cfg, 0, tmp_path)),
                    ({"device": "auto"}, OmegaConf.create({"launcher": {"_target_": "hydra._internal.core_plugins."
                                                                                    "basic_launcher.BasicLauncher"}}))]:
        job = OmegaConf.create(job)
        before = dict(job)
        with _pin_parallel_job(job, hc) as slot:
            assert slot is None and dict(job) == before
    assert not (tmp_path / SLOTS_DIR).exists()


def test_a_job_waits_for_a_free_slot_rather_than_crowd_a_device(tmp_path):
    """All slots held (another process runs jobs of the sweep): the job says once that it waits, and takes the
    slot that frees."""
    held = [try_claim(tmp_path, 1, 2) for _ in range(2)]
    assert [s.name for s in held] == ["0.0", "0.1"] and try_claim(tmp_path, 1, 2) is None
    lines: list[str] = []
    threading.Timer(0.3, held[1].release).start()
    slot = claim_slot(tmp_path, 1, 2, label="job 7", poll_s=0.02, say=lines.append)
    assert slot.name == "0.1" and len(lines) == 1 and lines[0].startswith("job 7: all 2 device slots in ")
    slot.release()
    held[0].release()


_HOLDER = """
import json, sys, time
from pathlib import Path
from llm.gpu_slots import claim
with claim(Path(sys.argv[1]), 2, 2, poll_s=0.01) as slot:
    start = time.time()
    print(json.dumps({"slot": slot.name, "start": start}), flush=True)
    time.sleep(float(sys.argv[2]))
    print(json.dumps({"slot": slot.name, "start": start, "end": time.time()}), flush=True)
"""


def test_processes_never_share_a_slot_and_reuse_freed_ones(tmp_path):
    """Six processes for 2 devices x 2 slots, started together: four hold slots, the others wait and take freed
    ones, and no two hold one slot at once. A process killed with SIGKILL frees its slot too."""
    def holder(seconds: float) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-c", _HOLDER, str(tmp_path), str(seconds)], cwd=ROOT,
                                stdout=subprocess.PIPE, text=True)

    killed = holder(60)
    first = json.loads(killed.stdout.readline())["slot"]
    killed.kill()
    killed.wait()
    with try_claim(tmp_path, 2, 2) as slot:
        assert slot.name == first == "0.0"
    procs = [holder(s) for s in (0.4, 0.2, 0.5, 0.3, 0.2, 0.3)]
    held = []
    for proc in procs:
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0
        held.append(json.loads(out.splitlines()[-1]))
    for a, b in itertools.combinations(held, 2):
        if a["slot"] == b["slot"]:
            assert a["end"] <= b["start"] or b["end"] <= a["start"], (a, b)
    assert len({h["slot"] for h in held}) <= 4 and len(held) == 6


def test_two_jobs_at_once_on_one_device_through_the_launcher(tmp_path, capfd, monkeypatch):
    """On a machine without a GPU the CPU is the one device (on a GPU machine, GPU 0): sweep.jobs_per_gpu=2 runs
    three jobs two at a time (the third starts when one ends), each in its own process and device slot; the third
    takes the slot freed.
    The preset is Hydra's joblib launcher: this is also the test of a sweep whose jobs run at once. The sweep's
    own command runs in this process (the jobs run in the launcher's worker processes all the same; the signal
    tests of test_faults.py run such a sweep as a process of its own)."""
    sweep = tmp_path / "sweep"
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the workers' torch threads: one each, as two share the cores
    # jobs of 4 steps of cl100k's head (a step of the byte tokenizer's is too short): the two workers' first jobs
    # start up to a second or two apart on a loaded machine (each worker imports the app first), and each job must
    # outlast that for two to be seen running at once
    code = run_command_inprocess(["hydra/launcher=gpus", "++sweep.jobs_per_gpu=2", "seed=0,1,2", "train.max_steps=4",
                                  "train.eval_every=4", "tokenizer=cl100k_base", f"hydra.sweep.dir={sweep}"])
    err = capfd.readouterr().err  # the workers' lines too: they write to the file descriptor they inherit
    assert code == 0, err[-3000:]
    runs = {int(p.parent.name.split("_")[0]): json.loads(p.read_text()) for p in sweep.glob("*/summary.json")}
    assert len(runs) == 3 and all(r["status"] == "completed" for r in runs.values())
    assert (sweep / "comparison.md").is_file(), "the sweep's end (after the launcher's last job) wrote no comparison"
    spans = [(r["started_at"], r["ended_at"]) for r in runs.values()]
    at_once = [sum(s <= t < e for s, e in spans) for t, _ in spans]
    assert max(at_once) == 2, spans  # two ran together, never three
    slots = dict(re.findall(r"job (\d+): runs on (?:the CPU|GPU 0) \(slot (0\.[01])\), device=auto", err))
    assert sorted(slots) == ["0", "1", "2"], err[-3000:]
    for (a, ra), (b, rb) in itertools.combinations(runs.items(), 2):
        if ra["started_at"] < rb["ended_at"] and rb["started_at"] < ra["ended_at"]:
            assert slots[str(a)] != slots[str(b)], (slots, spans)


def test_a_finished_job_gives_its_cached_gpu_memory_back_before_its_slot_frees(monkeypatch, tmp_path):
    """The launcher's workers outlive their jobs: what a job's allocator cached must go back to the GPU when the
    job ends (crash or not), or the next job on that GPU and the end-of-sweep evaluation run out of memory."""
    from llm.train import _pin_parallel_job

    FakeGpus(monkeypatch, count=1)
    cfg = _launcher(["++sweep.jobs_per_gpu=1"])
    events: list[str] = []
    monkeypatch.setattr(llm.train, "release_device_memory", lambda: events.append(
        "released, slot " + ("held" if try_claim(tmp_path / SLOTS_DIR, 1, 1) is None else "free")))
    for crash in (False, True):
        with pytest.raises(RuntimeError) if crash else ExitStack():
            with _pin_parallel_job(OmegaConf.create({"device": "auto"}), _job_hc(cfg, 0, tmp_path)):
                events.append("job")
                if crash:
                    raise RuntimeError("job failed")
    assert events == ["job", "released, slot held"] * 2
