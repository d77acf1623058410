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


def pytest_collection_modifyitems(config, items):
    if HAS_CUDA:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def device() -> torch.device:
    """The device tests run on: CUDA when present, else the CPU (Triton interpreter)."""
    return torch.device("cuda" if HAS_CUDA else "cpu")
