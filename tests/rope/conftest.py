"""Fixtures of the RoPE tests (``tests/rope``): a fresh, printed random seed for every test.

This folder has no ``__init__.py`` on purpose: ``tests/conftest.py`` puts ``tests/`` on
``sys.path``, where a ``tests/rope`` *package* would shadow the real ``rope`` package; as a plain
folder it is only a namespace portion, which the real (regular) package always wins over. The
modules here import each other relatively (``from .cases import ...``), which pytest's
``--import-mode=importlib`` (pyproject) supports.
"""

from __future__ import annotations

import os

import pytest
import torch


@pytest.fixture(autouse=True)
def fresh_seed() -> int:
    """A new seed every run (printed, shown on failure); ROPE_TEST_SEED replays one.

    Why fresh: the precision bounds must hold for any input, so every run tries new ones.
    """
    seed = int(os.environ.get("ROPE_TEST_SEED", "0")) or torch.seed()
    torch.manual_seed(seed)
    print(f"seed={seed} (replay with ROPE_TEST_SEED={seed})")
    return seed
