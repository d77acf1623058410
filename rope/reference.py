"""The PyTorch reference (``torch``) and the identity baseline (``none``)."""

from __future__ import annotations

import torch
from torch import Tensor

from rope.base import RopeArgumentError, RotaryEmbedding
from rope.registry import register

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "float64": torch.float64}


def check_compute_dtype(compute_dtype: object) -> None:
    """Refuse a compute dtype the reference cannot compute in."""
    if not isinstance(compute_dtype, str) or compute_dtype not in _DTYPES:
        raise RopeArgumentError(
            "compute_dtype", f"compute_dtype must be one of {sorted(_DTYPES)}, got {compute_dtype!r}"
        )


def gather_cos_sin(table: Tensor, positions: Tensor | None, T: int) -> Tensor:
    """Rows of a (max_seq_len, D/2) table for the positions, shaped to broadcast over (B, T, H, D/2)."""
    if positions is None:
        return table[None, :T, None, :]
    rows = table[positions.long()]  # (T, D/2) or (B, T, D/2)
    return rows[None, :, None, :] if rows.dim() == 2 else rows[:, :, None, :]


def rotate_half_split(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """The reference rotation in the dtype of ``x``: y1 = x1 c + x2 s, y2 = -x1 s + x2 c."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((x1 * cos + x2 * sin, x2 * cos - x1 * sin), dim=-1)


@register("torch")
class TorchRotary(RotaryEmbedding):
    """Eager PyTorch rotation computed in ``compute_dtype`` (float32 by default).

    ``compute_dtype="bfloat16"`` reproduces a lower-precision reference, so its effect on model
    quality can be measured rather than guessed.
    """

    def __init__(self, head_dim: int, max_seq_len: int, base: float = 10000.0, variant: str = "partial",
                 compute_dtype: str = "float32") -> None:
        super().__init__(head_dim, max_seq_len, base, variant)
        check_compute_dtype(compute_dtype)
        self.compute_dtype = compute_dtype

    @classmethod
    def check_options(cls, options: dict[str, object]) -> None:
        check_compute_dtype(options["compute_dtype"])

    def describe(self) -> dict:
        return {**super().describe(), "compute_dtype": self.compute_dtype}

    def _one(self, x: Tensor, positions: Tensor | None) -> Tensor:
        dt = _DTYPES[self.compute_dtype]
        cos = gather_cos_sin(self.cos, positions, x.shape[1]).to(dt)
        sin = gather_cos_sin(self.sin, positions, x.shape[1]).to(dt)
        return rotate_half_split(x.to(dt), cos, sin).to(x.dtype)

    def rotate(self, q, k, positions):
        return self._one(q, positions), None if k is None else self._one(k, positions)


@register("none")
class NoRotary(RotaryEmbedding):
    """Identity: the no-position-encoding baseline (causal attention alone carries order)."""

    def describe(self) -> dict:
        return {"rope": "none", "variant": "none", "compute_dtype": "none"}

    def rotate(self, q, k, positions):
        return q, k
