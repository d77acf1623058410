"""The PyTorch reference (``torch``) and the identity baseline (``none``)."""

from __future__ import annotations

import torch
from torch import Tensor

from rope.base import RotaryEmbedding
from rope.checks import LAYOUTS, RopeArgumentError
from rope.registry import register

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "float64": torch.float64}


def check_compute_dtype(compute_dtype: object) -> None:
    """Refuse a compute dtype the reference cannot compute in."""
    if not isinstance(compute_dtype, str) or compute_dtype not in _DTYPES:
        raise RopeArgumentError(
            "compute_dtype", f"compute_dtype must be one of {sorted(_DTYPES)}, got {compute_dtype!r}"
        )


def gather_cos_sin(table: Tensor, positions: Tensor | None, T: int) -> Tensor:
    """Rows of a (max_seq_len, R/2) table for the positions, shaped to broadcast over (B, T, H, R/2).

    A position outside the table gives a NaN row (see ``RotaryEmbedding._check_position_values``:
    on an accelerator the range is not checked on the host), never an index error or another row.
    """
    return gather_tables(positions, T, table)[0]


def gather_tables(positions: Tensor | None, T: int, *tables: Tensor) -> tuple[Tensor, ...]:
    """:func:`gather_cos_sin` of several tables of one length (cos and sin) at the same positions,
    the index and its range mask computed once."""
    if positions is None:
        return tuple(t[None, :T, None, :] for t in tables)
    n = tables[0].shape[0]
    pos = positions.long()
    outside = ((pos < 0) | (pos >= n))[..., None]
    index = pos.clamp(0, n - 1)
    rows = (t[index].masked_fill(outside, float("nan")) for t in tables)  # (T, R/2) or (B, T, R/2)
    return tuple(r[None, :, None, :] if r.dim() == 2 else r[:, :, None, :] for r in rows)


def rotate_half_split(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """The reference rotation in the dtype of ``x``: y1 = x1 c + x2 s, y2 = -x1 s + x2 c."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((x1 * cos + x2 * sin, x2 * cos - x1 * sin), dim=-1)


def rotate_interleaved(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """The same rotation with pair i at elements (2i, 2i + 1)."""
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x1 * cos + x2 * sin, x2 * cos - x1 * sin), dim=-1).flatten(-2)


def rotate_reference(x: Tensor, cos: Tensor, sin: Tensor, layout: str, rotary_dim: int,
                     compute_dtype: torch.dtype | None = None) -> Tensor:
    """The reference function on the first ``rotary_dim`` elements (computed in ``compute_dtype``,
    default x's), the rest passed through untouched; result in x's dtype."""
    dt = x.dtype if compute_dtype is None else compute_dtype
    rotate = rotate_half_split if layout == "half" else rotate_interleaved
    if rotary_dim == x.shape[-1]:
        return rotate(x.to(dt), cos.to(dt), sin.to(dt)).to(x.dtype)
    y = rotate(x[..., :rotary_dim].to(dt), cos.to(dt), sin.to(dt)).to(x.dtype)
    return torch.cat((y, x[..., rotary_dim:]), dim=-1)


@register("torch")
class TorchRotary(RotaryEmbedding):
    """Eager PyTorch rotation computed in ``compute_dtype`` (float32 by default).

    ``compute_dtype="bfloat16"`` reproduces a lower-precision reference, so its effect on model
    quality can be measured rather than guessed. float64 inputs are computed in float64 under the default
    (a gradcheck, a precise reference): the rotation by the shared float32 tables' values, exactly.
    """

    layouts = LAYOUTS
    supports_rotary_dim = True
    supports_float64 = True

    def __init__(self, head_dim: int, max_seq_len: int, base: float = 10000.0, variant: str = "partial",
                 layout: str = "half", rotary_dim: int | None = None, scaling: dict | None = None,
                 compute_dtype: str = "float32") -> None:
        super().__init__(head_dim, max_seq_len, base, variant, layout, rotary_dim, scaling)
        check_compute_dtype(compute_dtype)
        self.compute_dtype = compute_dtype

    @classmethod
    def check_options(cls, options: dict[str, object]) -> None:
        check_compute_dtype(options["compute_dtype"])

    def describe(self) -> dict:
        return {**super().describe(), "compute_dtype": self.compute_dtype}

    def rotate(self, q: Tensor, k: Tensor | None, positions: Tensor | None) -> tuple[Tensor, Tensor | None]:
        # The rows of the tables are gathered once for q and k (at decoding, with positions, the
        # gathers are most of this eager reference's launches).
        cos, sin = gather_tables(positions, q.shape[1], self.cos, self.sin)
        dt = _DTYPES[self.compute_dtype]
        if dt == torch.float32 and q.dtype == torch.float64:  # float32 is the default's floor, not a cap on float64
            dt = torch.float64
        rq = rotate_reference(q, cos, sin, self.layout, self.rotary_dim, dt)
        return rq, None if k is None else rotate_reference(k, cos, sin, self.layout, self.rotary_dim, dt)


@register("none")
class NoRotary(RotaryEmbedding):
    """Identity: the no-position-encoding baseline (causal attention alone carries order)."""

    layouts = LAYOUTS  # the identity under any of them
    supports_rotary_dim = True
    supports_float64 = True  # it returns its inputs

    def describe(self) -> dict:
        return {"rope": "none", "variant": "none", "compute_dtype": "none", "layout": "none", "rotary_dim": 0,
                "scaling": "none"}

    def rotate(self, q: Tensor, k: Tensor | None, positions: Tensor | None) -> tuple[Tensor, Tensor | None]:
        return q, k
