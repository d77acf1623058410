"""The registry entries ``triton_v4`` (float32 arithmetic) and ``triton_v2`` (the input dtype's). Without an
importable ``triton`` both stay registered; building one raises a RuntimeError saying triton is needed."""

from __future__ import annotations

import torch
from torch import Tensor

from rope._launch import triton_runs_on
from rope.base import RotaryEmbedding
from rope.checks import LAYOUTS
from rope.registry import register
from rope.scaling import attention_factor

try:
    from rope.triton import launch, ops
except ImportError as exc:  # triton not installed (or broken): keep the names, fail at build
    launch = ops = None
    TRITON_ERROR: Exception | None = exc
else:
    TRITON_ERROR = None

SUPPORTED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


class TritonRotary(RotaryEmbedding):
    """The Triton entries: q and k rotated in one kernel launch, forward and backward, read in place with their
    strides; ``rotate_qkv`` takes the fused projection so that its backward writes d qkv as one buffer."""

    layouts = LAYOUTS
    supports_rotary_dim = True
    #: Inductor launches user-defined Triton kernels (these, through the triton ops) with Triton's Python
    #: launcher unless this is set, and its own kernels with a static launcher of less host time. A GPU build turns
    #: it on when the ops are defined (:func:`rope.triton.ops.static_launch_by_default`); asked for here as well.
    inductor_options = {"static_launch_user_defined_triton_kernels": True}
    low_precision = False

    def __init__(self, head_dim: int, max_seq_len: int, base: float = 10000.0, variant: str = "partial",
                 layout: str = "half", rotary_dim: int | None = None, scaling: dict | None = None) -> None:
        if launch is None:
            raise RuntimeError(f"RoPE implementation {self.registry_name!r} needs the `triton` package "
                               f"(pip install triton), which could not be imported: {TRITON_ERROR}")
        super().__init__(head_dim, max_seq_len, base, variant, layout, rotary_dim, scaling)
        # variant=partial's zero-frequency pairs are cos 1, sin 0 in the table (no load needed) unless YaRN's
        # attention factor scales the table; then the kernel reads them like the others
        partial = variant == "partial" and attention_factor(self.scaling) == 1.0
        self.rotation = launch.Rotation(partial, self.low_precision, layout == "interleaved")

    @classmethod
    def unavailable_reason(cls, device: torch.device) -> str | None:
        """None on a CUDA device, or on the CPU under Triton's interpreter; else why not, in one line."""
        name = cls.registry_name
        if launch is None:
            return (f"{name} needs the `triton` package, which could not be imported ({TRITON_ERROR}); "
                    "use the torch implementation, which runs anywhere")
        if triton_runs_on(device):
            return None
        return (f"{name} runs on a CUDA GPU, or on the CPU under Triton's interpreter (TRITON_INTERPRET=1 set "
                "before triton is imported, slow); use the torch implementation, which runs anywhere")

    def describe(self) -> dict:
        return {**super().describe(), "compute_dtype": "input" if self.low_precision else "float32"}

    def check_inputs(self, q: Tensor, k: Tensor | None, positions: Tensor | None) -> None:
        """What the kernels need beyond the shared checks: a supported dtype, CUDA (or the interpreter)."""
        if q.dtype not in SUPPORTED_DTYPES:
            raise TypeError(f"{self.registry_name} supports float32, bfloat16 and float16 inputs, got {q.dtype}")
        for name, x in (("q", q), ("k", k), ("positions", positions)):
            if x is not None and not triton_runs_on(x.device):
                raise ValueError(f"{name} is on {x.device}: the Triton RoPE kernels need CUDA tensors "
                                 "(or TRITON_INTERPRET=1 set before triton is imported, to run them on the CPU "
                                 "interpreter)")

    def rotate(self, q: Tensor, k: Tensor | None, positions: Tensor | None) -> tuple[Tensor, Tensor | None]:
        poison = bool(self.poison_outputs)
        if torch.compiler.is_compiling():  # an op with a fake and autograd: no graph break
            yq, yk = ops.compiled_ops(q).rope(q, k, self.cos, self.sin, positions, *self.rotation, False, poison)
            return yq, (yk if k is not None else None)
        cos, sin = self._cos_sin  # the buffers without nn.Module.__getattr__: host time of every call
        if torch.is_grad_enabled() and (q.requires_grad or (k is not None and k.requires_grad)):
            return ops.apply(ops.RopeFunction, q, k, cos, sin, positions, *self.rotation, False, poison)
        return launch.rotate(q, k, cos, sin, positions, self.rotation, poison=poison)

    def _rotate_qkv(self, qkv: Tensor, q: Tensor, k: Tensor, v: Tensor,
                    positions: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
        poison, hq, hk = bool(self.poison_outputs), q.shape[2], k.shape[2]
        traced = torch.compiler.is_compiling()
        cos, sin = (self.cos, self.sin) if traced else self._cos_sin
        if traced and qkv.stride(-1) != 1:  # the compiled ops read qkv by its row strides, elements one apart
            qkv = qkv.contiguous()
        if torch.is_grad_enabled() and qkv.requires_grad:  # the backward writes d qkv as one buffer
            args = (qkv, cos, sin, positions, hq, hk, *self.rotation, poison, traced)
            return ops.RopeQKVFunction.apply(*args) if traced else ops.apply(ops.RopeQKVFunction, *args)
        if traced:  # the projection itself to the op (see ops.flat_projection)
            yq, yk = ops.compiled_ops(qkv).qkv(ops.flat_projection(qkv), qkv.shape[1], cos, sin, positions, hq, hk,
                                               *self.rotation, poison)
        else:
            yq, yk = launch.rotate(q, k, cos, sin, positions, self.rotation, poison=poison)
        return yq, yk, v


@register("triton_v4")
class TritonRotaryV4(TritonRotary):
    """Precise Triton RoPE: input-dtype loads, float32 math, one rounding at the store."""

    low_precision = False


@register("triton_v2")
class TritonRotaryV2(TritonRotary):
    """Triton RoPE in the input dtype's arithmetic (bf16/fp16); equals ``triton_v4`` on float32."""

    low_precision = True
