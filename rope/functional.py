"""The seed repo's functional API: ``rope_triton(q, k, seq_len, theta)`` and ``apply(..., impl=)``.

For a user who wants the kernels in an attention layer of their own, without the registry's module
life cycle: pass q and k, get them rotated. Building a RoPE module computes its cos/sin table
(``seq_len`` x D/2, in float64), far more work than one rotation of a decode step, so the module for
each (impl, head_dim, seq_len, theta, variant, device) is built once and kept in a small
least-recently-used cache (:data:`CACHE_SIZE` entries, :func:`clear_cache` empties it).

Every registered implementation computes the same function (see :mod:`rope.base`), so ``impl``
only picks the kernel. The Triton entries run on CUDA tensors (or on the CPU under
``TRITON_INTERPRET=1``); elsewhere their own one-line error says so.
"""

from __future__ import annotations

from collections import OrderedDict

import torch
from torch import Tensor

from rope.base import POSITION_DTYPES, RopeArgumentError, RotaryEmbedding
from rope.registry import build

#: How many built modules (one cos/sin table each) are kept.
CACHE_SIZE = 16

_MODULES: OrderedDict[tuple, RotaryEmbedding] = OrderedDict()


def build_named(impl: str, head_dim: int, seq_len: int, theta: float, variant: str, *,
                head_dim_name: str = "q.shape[-1]", seq_len_name: str = "seq_len") -> RotaryEmbedding:
    """``rope.build`` whose argument errors name the arguments as the standalone API spells them
    (``impl``, ``theta``, ``seq_len``, ...), not as the registry does (``name``, ``base``, ...): the caller
    passed the former, and a message naming ``max_seq_len`` or ``base`` points at nothing they wrote."""
    given = {"name": impl, "head_dim": head_dim, "max_seq_len": seq_len, "base": theta, "variant": variant}
    try:
        return build(impl, head_dim, seq_len, theta, variant=variant)
    except RopeArgumentError as e:
        name = {"name": "impl", "head_dim": head_dim_name, "max_seq_len": seq_len_name, "base": "theta"}.get(
            e.argument, e.argument)
        text = str(e)
        # a check's message starts with the registry's word for the argument: the caller's replaces it, as theirs
        # is the only one their code holds (the rest of the message, the value given included, is kept as it is)
        if text.startswith(f"{e.argument} "):
            text = name + text[len(e.argument):]
        raise RopeArgumentError(name, f"{name}={given.get(e.argument)!r}: {text}") from None


def rotary_module(impl: str, head_dim: int, seq_len: int, theta: float = 10000.0, variant: str = "partial",
                  device: torch.device | str = "cpu", *, head_dim_name: str = "head_dim") -> RotaryEmbedding:
    """The registry's module for these arguments, built on first use and then reused.

    A bad argument raises :class:`~rope.RopeArgumentError` naming it as this API does (``impl``,
    ``head_dim``, ``seq_len``, ``theta``, ``variant``); ``head_dim_name``: how the caller gave the head size
    (:func:`apply` passes ``"q.shape[-1]"``, as its caller gave q, not a head_dim).
    """
    device = torch.device(device)
    # the types too: 16.0, np.int64(16) and True hash and compare equal to the ints 16 and 1, so without them a value
    # the build refuses would be handed the module built for the int, and be refused or not by what ran before
    key = (impl, head_dim, seq_len, theta, variant, device, tuple(map(type, (impl, head_dim, seq_len, theta, variant))))
    try:
        module = _MODULES.pop(key, None)  # popped and put back last: the most recently used
    except TypeError:  # an unhashable argument: the build below names it
        module = None
    if module is None:
        module = build_named(impl, head_dim, seq_len, theta, variant, head_dim_name=head_dim_name).to(device)
        if len(_MODULES) >= CACHE_SIZE:
            _MODULES.popitem(last=False)
    _MODULES[key] = module
    return module


def clear_cache() -> None:
    """Forget every built module (their tables free with them)."""
    _MODULES.clear()


def apply(q: Tensor, k: Tensor | None, seq_len: int, theta: float = 10000.0, impl: str = "torch",
          variant: str = "partial", *, positions: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
    """Rotate q and k, (B, T, H, D) tensors (k may have fewer heads, or be None), by their positions.

    ``seq_len`` is the length of the cos/sin table (positions ``0 .. seq_len - 1``), ``theta`` its
    base, ``variant`` the rotation (``"partial"``, the seed's; ``"full"``, the standard one) and
    ``impl`` any name of :func:`rope.available`. ``positions`` (T,) or (B, T) integers pick the table
    rows, e.g. the absolute positions of the tokens after a KV cache; default ``arange(T)``.
    Returns ``(q_rotated, k_rotated)`` in q's dtype (``k_rotated`` is None when k is).
    """
    if not isinstance(q, Tensor) or q.dim() != 4:
        raise ValueError(f"q must be a (B, T, H, D) tensor, got {tuple(q.shape) if isinstance(q, Tensor) else q!r}")
    module = rotary_module(impl, q.shape[-1], seq_len, theta, variant, q.device, head_dim_name="q.shape[-1]")
    _check_against_table(q, k, seq_len, positions)
    out = module(q, k, positions=positions)
    return (out, None) if k is None else out


def _check_against_table(q: Tensor, k: Tensor | None, seq_len: int, positions: Tensor | None) -> None:
    """:func:`apply`'s checks of q, k and positions against the table, before the module's own: the module would
    name its ``max_seq_len`` and ``head_dim``, and the caller of apply passed ``seq_len`` and q."""
    # k is compared with q first: the module checks k alone, against the head_dim and max_seq_len it was built for
    if isinstance(k, Tensor) and k.dim() == 4 and (k.shape[0], k.shape[1], k.shape[3]) != (
            q.shape[0], q.shape[1], q.shape[3]):
        raise ValueError(f"q and k must agree in B, T and D, got q {tuple(q.shape)} and k {tuple(k.shape)}")
    if positions is None and q.shape[1] > seq_len:
        raise ValueError(f"q has T={q.shape[1]} > seq_len={seq_len}, the length of the cos/sin table: "
                         f"pass seq_len >= T (or positions)")
    # the range of host positions only, as the module checks it: on a device it would cost a synchronisation per call
    # (another dtype is refused by the module's own check, which names the dtypes allowed)
    if isinstance(positions, Tensor) and positions.is_cpu and positions.numel() and positions.dtype in POSITION_DTYPES \
            and not torch.compiler.is_compiling():
        lo, hi = int(positions.min()), int(positions.max())
        if lo < 0 or hi >= seq_len:
            raise ValueError(f"positions must lie in [0, seq_len={seq_len}), got range [{lo}, {hi}]")


def rope_triton(q: Tensor, k: Tensor | None, seq_len: int, theta: float = 10000.0, *,
                positions: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
    """The seed repo's entry point: :func:`apply` with the ``triton_v4`` kernel (float32 arithmetic,
    ``variant="partial"``, the seed's rotation)."""
    return apply(q, k, seq_len, theta, impl="triton_v4", positions=positions)
