"""Test set-up: without a GPU, Triton kernels run under its interpreter on the CPU.

TRITON_INTERPRET must be set before triton is first imported, hence at conftest import time.
"""

import gc
import os
import sys
from pathlib import Path

import pytest

# `pytest -n N`: the cores shared out among the N workers, for torch's intra-op threads and (the variable is
# inherited) those of the command-line tests' child processes. Each at torch's default of a thread per core, they
# oversubscribe the cores and OpenMP's spinning threads cost more than they give: on 2 cores, tests/llm/training
# took 161 s with `-n 2`, 126 s with one thread each. Set before torch is imported; a value the caller set is kept.
_XDIST_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _XDIST_WORKERS > 1:
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // _XDIST_WORKERS)))

import torch  # noqa: E402

if _XDIST_WORKERS > 1:
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))

# --import-mode=importlib puts no test folder on sys.path; the shared helpers module lives here
sys.path.insert(0, str(Path(__file__).resolve().parent))

HAS_CUDA = torch.cuda.is_available()
if not HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("WANDB_SILENT", "true")
# wandb offline whatever the caller's shell says: no test logs to wandb's servers, and the tests that read a run's
# offline files or its logger's mode (offline by default) hold under WANDB_MODE=disabled too
os.environ["WANDB_MODE"] = "offline"
#: Whether Triton kernels run on CPU tensors in this process: only under the interpreter, which is on where
#: there is no GPU (it would also interpret the GPU tests, so a GPU machine runs without it).
INTERPRETING = os.environ.get("TRITON_INTERPRET") == "1"


def pytest_collection_modifyitems(config, items):
    skips = []
    if not HAS_CUDA:
        skips.append(("gpu", pytest.mark.skip(reason="needs a CUDA GPU")))
    if not INTERPRETING:
        skips.append(("interpreter", pytest.mark.skip(
            reason="runs Triton kernels on CPU tensors: needs TRITON_INTERPRET=1, which this conftest sets only "
                   "where there is no GPU")))
    for item in items:
        for keyword, skip in skips:
            if keyword in item.keywords:
                item.add_marker(skip)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """`-n N` (xdist's default ``--dist load``) with work stealing: ``load`` hands each worker chunks of tests that
    stay its own, so a worker left with a chunk of the slow command-line tests ran on alone for up to 80 s of a
    7-minute run on 2 cores while the other had finished; ``worksteal`` moves queued tests to an idle worker. Any
    other ``--dist`` asked for is kept."""
    if config.getvalue("dist") != "load":
        return None
    try:
        from xdist.scheduler import WorkStealingScheduling
    except ImportError:  # pytest-xdist < 3.2
        return None
    return WorkStealingScheduling(config, log)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """Each test starts with the earlier tests' garbage collected and what survives frozen (out of the collector's
    passes): a worker's heap grows with every test (torch, Triton's interpreter, Hydra), and the collector's full
    passes over it, triggered by the objects each test allocates, made a test late in a worker's run several times
    slower than alone. Before the test's fixtures, so objects a test creates stay collectable within it."""
    gc.collect()
    gc.freeze()


def pytest_sessionfinish(session):
    """The frozen objects handed back to the collector, so the interpreter's exit frees them as usual."""
    gc.unfreeze()


@pytest.fixture
def device() -> torch.device:
    """The device tests run on: CUDA when present, else the CPU (Triton interpreter)."""
    return torch.device("cuda" if HAS_CUDA else "cpu")


@pytest.fixture
def no_tf32():
    """float32 means float32 in a GPU test's references: a training test earlier in the process may have turned
    TF32 matmuls on (as training does), which would loosen them to TF32's 10-bit mantissa."""
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32 = before


@pytest.fixture
def wandb_offline(tmp_path: Path, monkeypatch):
    """wandb offline, its settings and caches under ``tmp_path`` (nothing written to the home dir)."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    for var in ("WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_DATA_DIR", "WANDB_ARTIFACT_DIR"):
        monkeypatch.setenv(var, str(tmp_path / "wandb_home"))
