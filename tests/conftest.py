"""Test set-up: without a GPU, Triton kernels run under its interpreter on the CPU.

TRITON_INTERPRET must be set before triton is first imported, hence at conftest import time.
"""

import os
import sys
from pathlib import Path

import pytest
import torch

# --import-mode=importlib puts no test folder on sys.path; the shared helpers module lives here
sys.path.insert(0, str(Path(__file__).resolve().parent))

HAS_CUDA = torch.cuda.is_available()
if not HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("WANDB_SILENT", "true")
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


@pytest.fixture
def device() -> torch.device:
    """The device tests run on: CUDA when present, else the CPU (Triton interpreter)."""
    return torch.device("cuda" if HAS_CUDA else "cpu")
