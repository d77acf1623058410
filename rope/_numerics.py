"""Floating-point yardsticks shared by the tests and the benchmarks.

One definition of "one ulp", so the precision bound the tests enforce and the error the benchmark
reports are measured with the same ruler. Private (a leading underscore) because it registers no
implementation: :func:`rope.registry.discover` skips it, so ``import rope`` does not import it.
"""

from __future__ import annotations

import torch
from torch import Tensor

from rope.base import on_device_of

# dtype -> (explicit mantissa bits, smallest positive subnormal)
_GRIDS = {
    torch.bfloat16: (7, 2.0**-133),
    torch.float16: (10, 2.0**-24),
    torch.float32: (23, 2.0**-149),
    torch.float64: (52, 2.0**-1074),
}


def ulp(x: Tensor, dtype: torch.dtype) -> Tensor:
    """Spacing of ``dtype``'s number grid at each element of ``x``, as float64.

    For ``|x|`` in ``[2**(e-1), 2**e)`` that is ``2**(e-1-mantissa_bits)`` (at a power of two, the
    spacing above it), and never less than the smallest subnormal (which is also the value at 0).
    Pass values already rounded to ``dtype`` (e.g. a float64 reference ``.to(dtype)``) when the
    spacing at the rounded value is what counts: a value just below a power of two that rounds up
    has the larger spacing.
    """
    try:
        mant, tiny = _GRIDS[dtype]
    except KeyError:
        raise ValueError(f"ulp: no number grid for {dtype}; known: {', '.join(map(str, _GRIDS))}") from None
    # on x's GPU made current: torch.ldexp (torch 2.11) runs on the current device whatever its tensors' device, so
    # on cuda:1 while cuda:0 is current it read out of bounds (an illegal memory access)
    with on_device_of(x):
        _, e = torch.frexp(x.detach().double().abs())
        spacing = torch.ldexp(torch.ones_like(e, dtype=torch.float64), e - 1 - mant)
        return torch.where(x.detach() == 0, tiny, torch.clamp(spacing, min=tiny))
