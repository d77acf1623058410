"""Triton rotary embeddings ``triton_v4`` (float32 arithmetic) and ``triton_v2`` (the input dtype's), registered on
import (also without triton: building one then says so). Layers, each importing only those below it: ``module``
(the entries), ``ops`` (autograd, torch.compile ops), ``launch`` (tensors to a launch), ``plan`` (a pure function:
the launch geometry), ``kernels`` (``@triton.jit``). Benchmarks: :func:`tuning` and :func:`plan_for`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from torch import Tensor

from rope._launch import overriding
from rope.triton.module import TritonRotary, TritonRotaryV2, TritonRotaryV4
from rope.triton.plan import TILINGS, Overrides, Plan, force, forced

__all__ = ["TILINGS", "Overrides", "Plan", "TritonRotary", "TritonRotaryV2", "TritonRotaryV4", "plan_for", "tuning"]


@contextlib.contextmanager
def tuning(**fields: object) -> Iterator[Overrides]:
    """Force launch settings of the Triton entries for every eager launch while the block is open, forward and
    backward (on autograd's thread too: the setting is the process's, so blocks on concurrent threads mix).

    ``tiling``: ``"rows"``, ``"chunks"`` or ``"flat"`` (:mod:`rope.triton.plan`); ``tile``: elements a program
    rotates (a power of two, 64 to 16384); ``num_warps``: a power of two up to 32; ``maxnreg``: a register cap for
    the programs (16 to 255; by default only row programs with padding or positions get one, on fast memory).
    Fields not given keep the enclosing block's value (outside any: the plan's own). Compiled graphs keep the
    default plan. A bad field or value raises ValueError before the block runs:
    ``with rope.triton.tuning(tiling="chunks"): y = module(q, k)``.
    """
    with overriding(forced, force, fields) as settings:
        yield settings


def plan_for(rotary: TritonRotary, q: Tensor, k: Tensor | None = None, positions: Tensor | None = None) -> Plan:
    """The plan ``rotary(q, k, positions=positions)`` launches its forward with (eagerly, under the current
    :func:`tuning`): its tiling, program sizes, warps and grid (``str(plan)`` says them in a line)."""
    from rope.triton import launch

    if not isinstance(rotary, TritonRotary):
        raise ValueError(f"plan_for: rotary must be a Triton entry (rope.build('triton_v4', ...)), got "
                         f"{type(rotary).__name__}")
    rotary._validate(q, k, positions)  # the call's own checks: no plan for a call that would be refused
    return launch.plan(q, k, rotary.cos, positions, rotary.rotation)
