"""Autograd and ``torch.compile`` ops of the Triton entries. Eagerly a call goes through a ``torch.autograd.Function``
(less host time than a custom op's dispatch), or without grad straight to :mod:`rope.triton.launch`. Under
``torch.compile``, ops with fakes (no graph breaks): on CUDA ``torch.library.triton_op``s whose launch Inductor
emits itself (:func:`static_launch_by_default`); elsewhere, and for dynamic shapes, custom ops
(``ropelab::rope``, ``rope_qkv``, ``rope_qkv_backward``) run their bodies."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import Tensor

from rope.base import split_qkv
from rope.triton import launch
from rope.triton.launch import Rotation


class OpSet(NamedTuple):
    """The three ops of one kind (custom ops or triton ops): q and k; the projection's q and k; d qkv."""

    rope: Callable
    qkv: Callable
    qkv_backward: Callable


def _define(suffix: str, traced: bool) -> OpSet:
    """``ropelab::rope{suffix}``, ``rope_qkv{suffix}``, ``rope_qkv_backward{suffix}``: custom ops with fakes, or
    (``traced``) triton ops. ``rope`` is differentiable (its backward: itself, inverted); the projection's ops run
    inside :class:`RopeQKVFunction` (d qkv as one buffer; the kernel handed the graph's buffer, not views)."""
    define = torch.library.triton_op if traced else torch.library.custom_op

    def rope(q: Tensor, k: Tensor | None, cos: Tensor, sin: Tensor, positions: Tensor | None, partial: bool,
             low_precision: bool, interleaved: bool, inverse: bool, poison: bool) -> tuple[Tensor, Tensor]:
        if traced and not _static(q, k, positions):
            return CUSTOM_OPS.rope(q, k, cos, sin, positions, partial, low_precision, interleaved, inverse, poison)
        yq, yk = launch.rotate(q, k, cos, sin, positions, Rotation(partial, low_precision, interleaved), inverse,
                               traced=traced, poison=poison)
        return yq, q.new_empty(0) if yk is None else yk

    def rope_qkv(qkv: Tensor, seq_len: int, cos: Tensor, sin: Tensor, positions: Tensor | None, hq: int, hk: int,
                 partial: bool, low_precision: bool, interleaved: bool, poison: bool) -> tuple[Tensor, Tensor]:
        if traced and not _static(qkv, positions):
            return CUSTOM_OPS.qkv(qkv, seq_len, cos, sin, positions, hq, hk, partial, low_precision, interleaved,
                                  poison)
        return launch.rotate_projection(qkv, seq_len, hq, hk, cos, sin, positions,
                                        Rotation(partial, low_precision, interleaved), traced=traced, poison=poison)

    def rope_qkv_backward(gq: Tensor, gk: Tensor, gv: Tensor | None, cos: Tensor, sin: Tensor,
                          positions: Tensor | None, partial: bool, low_precision: bool, interleaved: bool,
                          poison: bool) -> Tensor:
        if traced and not _static(gq, gk, gv, positions):
            return CUSTOM_OPS.qkv_backward(gq, gk, gv, cos, sin, positions, partial, low_precision, interleaved,
                                           poison)
        return launch.qkv_backward(gq, gk, gv, cos, sin, positions, Rotation(partial, low_precision, interleaved),
                                   traced=traced, poison=poison)

    ops = OpSet(*(define(f"ropelab::{fn.__name__}{suffix}", mutates_args=())(fn)
                  for fn in (rope, rope_qkv, rope_qkv_backward)))
    if not traced:  # a triton op's fake is its traced body
        ops.rope.register_fake(_rope_fake)
        ops.qkv.register_fake(_qkv_fake)
        ops.qkv_backward.register_fake(_qkv_backward_fake)

    def setup_context(ctx, inputs, output):
        q, k, cos, sin, positions, *flags = inputs
        ctx.save_for_backward(cos, sin, positions)
        ctx.has_k, ctx.flags = k is not None, flags

    def backward(ctx, gq, gk):
        cos, sin, positions = ctx.saved_tensors
        partial, low_precision, interleaved, inverse, poison = ctx.flags
        dq, dk = ops.rope(gq, gk if ctx.has_k else None, cos, sin, positions, partial, low_precision, interleaved,
                          not inverse, poison)
        return (dq, dk if ctx.has_k else None) + (None,) * 8

    ops.rope.register_autograd(backward, setup_context=setup_context)
    return ops


def _rope_fake(q, k, cos, sin, positions, partial, low_precision, interleaved, inverse, poison):
    return torch.empty_like(q, memory_format=torch.contiguous_format), (
        q.new_empty(0) if k is None else torch.empty_like(k, memory_format=torch.contiguous_format))


def _qkv_fake(qkv, seq_len, cos, sin, positions, hq, hk, partial, low_precision, interleaved, poison):
    D = qkv.shape[-1] // (hq + 2 * hk)
    B = qkv.shape[0] if qkv.dim() == 3 else qkv.shape[0] // seq_len
    return qkv.new_empty((B, seq_len, hq, D)), qkv.new_empty((B, seq_len, hk, D))


def _qkv_backward_fake(gq, gk, gv, cos, sin, positions, partial, low_precision, interleaved, poison):
    B, T, HQ, D = gq.shape
    return gq.new_empty((B, T, (HQ + 2 * gk.shape[2]) * D))


def _static(*tensors: Tensor | None) -> bool:
    """Whether every size and stride is a plain int (not a symbol of a dynamic-shape trace). Asked in the triton ops'
    bodies, on the fake tensors: Dynamo, tracing the caller, takes a symbolic size for an int."""
    return all(isinstance(n, int) for t in tensors if t is not None for n in (*t.shape, *t.stride()))


CUSTOM_OPS = _define("", traced=False)


@functools.cache
def traced_ops() -> OpSet | None:
    """The triton ops (defined by the first call, then cached), or None where torch has no ``torch.library.triton_op``.

    Why a function: production calls it once, at import, on CUDA and ROCm builds running real kernels
    (:data:`TRACED_OPS`), and tests call it to define the traced ops on demand where that import did not. Why not at
    import everywhere: defining one imports Dynamo and Inductor, seconds of every start of a CPU process, where
    compiled graphs call the custom ops instead."""
    return _define("_traced", traced=True) if hasattr(torch.library, "triton_op") else None


def static_launch_by_default() -> None:
    """Inductor's static launcher for user-defined Triton kernels (Triton's Python launcher costs a short compiled
    step host time), in this process's config and its compile workers' environment, unless the user set
    ``TORCHINDUCTOR_STATIC_LAUNCH_USER_DEFINED_TRITON_KERNELS``."""
    from torch._inductor import config

    name = "static_launch_user_defined_triton_kernels"
    if f"TORCHINDUCTOR_{name.upper()}" not in os.environ and hasattr(config, name):
        os.environ[f"TORCHINDUCTOR_{name.upper()}"] = "1"
        setattr(config, name, True)


#: The triton ops where a compiled graph can call them (a GPU build of torch, real kernels rather than the
#: interpreter): defined at import there, because Dynamo must not meet their definition while it traces a call.
TRACED_OPS = traced_ops() if (torch.version.cuda or torch.version.hip) and not launch.INTERPRETING else None
if TRACED_OPS is not None:
    static_launch_by_default()


def compiled_ops(x: Tensor) -> OpSet:
    """The ops a compiled graph calls for ``x``: triton ops where Inductor can launch the kernel (CUDA), else custom."""
    return TRACED_OPS if TRACED_OPS is not None and x.is_cuda else CUSTOM_OPS


def flat_projection(qkv: Tensor) -> Tensor:
    """The (B, T, W) projection as the (B T, W) matmul output it usually is, where batch and time merge: so
    Inductor's launch passes that buffer by name, not a view of it."""
    if qkv.numel() and (qkv.shape[1] == 1 or qkv.stride(0) == qkv.shape[1] * qkv.stride(1)):
        return qkv.flatten(0, 1)
    return qkv


class RopeFunction(torch.autograd.Function):
    """(q, k) -> rotated (q, k), eagerly; the backward is this Function inverted (so twice differentiable)."""

    @staticmethod
    def forward(ctx, q, k, cos, sin, positions, partial, low_precision, interleaved, inverse, poison):
        ctx.save_for_backward(cos, sin, positions)
        ctx.args = (k is not None, partial, low_precision, interleaved, inverse, poison)
        return launch.rotate(q, k, cos, sin, positions, Rotation(partial, low_precision, interleaved), inverse,
                             poison=poison)

    @staticmethod
    def backward(ctx, gq, gk):
        cos, sin, positions = ctx.saved_tensors
        has_k, partial, low_precision, interleaved, inverse, poison = ctx.args
        dq, dk = apply(RopeFunction, gq, gk if has_k else None, cos, sin, positions, partial, low_precision,
                       interleaved, not inverse, poison)
        return (dq, dk) + (None,) * 8


class RopeQKVFunction(torch.autograd.Function):
    """qkv -> (rotated q, rotated k, v as the view it is); the backward returns d qkv as one buffer, from one launch.
    ``traced``: inside a compiled graph, through the ops of :func:`compiled_ops`. Under ``create_graph=True`` (a
    double backward, a gradient penalty) the eager backward is :class:`RopeFunction` inverted, which autograd
    records and differentiates again: the one-launch kernel runs out of its sight, so its second derivative would
    be lost without a word."""

    @staticmethod
    def forward(ctx, qkv, cos, sin, positions, hq, hk, partial, low_precision, interleaved, poison, traced):
        q, k, v = split_qkv(qkv, hq, hk, qkv.shape[-1] // (hq + 2 * hk))
        if traced:
            yq, yk = compiled_ops(qkv).qkv(flat_projection(qkv), qkv.shape[1], cos, sin, positions, hq, hk, partial,
                                           low_precision, interleaved, poison)
        else:
            yq, yk = launch.rotate(q, k, cos, sin, positions, Rotation(partial, low_precision, interleaved),
                                   poison=poison)
        ctx.save_for_backward(cos, sin, positions)
        ctx.args = (partial, low_precision, interleaved, poison, traced)
        return yq, yk, v

    @staticmethod
    def backward(ctx, gq, gk, gv):
        cos, sin, positions = ctx.saved_tensors
        partial, low_precision, interleaved, poison, traced = ctx.args
        if torch.is_grad_enabled() and not traced:
            dq, dk = apply(RopeFunction, gq, gk, cos, sin, positions, partial, low_precision, interleaved, True,
                           poison)
            dqkv = torch.cat([g.flatten(-2) for g in (dq, dk, gv)], dim=-1)
            return (dqkv,) + (None,) * 10
        if traced:
            dqkv = compiled_ops(gq).qkv_backward(gq, gk, gv, cos, sin, positions, partial, low_precision,
                                                 interleaved, poison)
        else:
            dqkv = launch.qkv_backward(gq, gk, gv, cos, sin, positions, Rotation(partial, low_precision, interleaved),
                                       poison=poison)
        return (dqkv,) + (None,) * 10


def apply(fn: type[torch.autograd.Function], *args: object) -> tuple[Tensor, ...]:
    """``fn.apply(*args)`` without ``Function.apply``'s Python prologue where no functorch transform is active
    (it then only walks the arguments for functorch wrappers): host time of every eager call with grad."""
    if torch._C._are_functorch_transforms_active():
        return fn.apply(*args)
    return super(torch.autograd.Function, fn).apply(*args)
