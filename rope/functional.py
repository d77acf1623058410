"""The seed repo's functional API: ``rope_triton(q, k, seq_len, theta)`` and ``apply(..., impl=)``.

For a user who wants the kernels in an attention layer of their own, without the registry's module
life cycle: pass q and k, get them rotated. Building a RoPE module computes its cos/sin table
(``seq_len`` x D/2, in float64), far more work than one rotation of a decode step, so the module for
each (impl, head_dim, seq_len, theta, variant, scaling, device) is built once and kept in a small
least-recently-used cache (:data:`CACHE_SIZE` entries, :func:`clear_cache` empties it).

Every registered implementation computes the same function (see :mod:`rope.base`), so ``impl``
only picks the kernel. The Triton entries run on CUDA tensors (or on the CPU under
``TRITON_INTERPRET=1``); elsewhere their own one-line error says so.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping

import torch
from torch import Tensor

from rope.base import POSITION_DTYPES, RotaryEmbedding
from rope.checks import RopeArgumentError, describe_value
from rope.registry import build

#: How many built modules (one cos/sin table each) are kept.
CACHE_SIZE = 16

_MODULES: OrderedDict[tuple, RotaryEmbedding] = OrderedDict()


def build_named(impl: str, head_dim: int, seq_len: int, theta: float, variant: str, *,
                head_dim_name: str = "q.shape[-1]", seq_len_name: str = "seq_len",
                scaling: Mapping | None = None) -> RotaryEmbedding:
    """``rope.build`` whose argument errors name the arguments as the standalone API spells them
    (``impl``, ``theta``, ``seq_len``, ...), not as the registry does (``name``, ``base``, ...): the caller
    passed the former, and a message naming ``max_seq_len`` or ``base`` points at nothing they wrote.
    ``scaling`` (None: none) is handed to the build only when given, so an implementation whose constructor takes
    no ``scaling`` still builds without one."""
    given = {"name": impl, "head_dim": head_dim, "max_seq_len": seq_len, "base": theta, "variant": variant}
    options: dict[str, object] = {"variant": variant}
    if scaling is not None:
        options["scaling"] = scaling
        given["scaling"] = scaling
        if isinstance(scaling, Mapping):
            given.update({f"scaling.{key}": value for key, value in scaling.items()})
    try:
        return build(impl, head_dim, seq_len, theta, **options)
    except RopeArgumentError as e:
        name = {"name": "impl", "head_dim": head_dim_name, "max_seq_len": seq_len_name, "base": "theta"}.get(
            e.argument, e.argument)
        text = str(e)
        if e.argument in given:  # the value as a short line, whatever the registry's message made of its repr
            text = text.replace(repr(given[e.argument]), describe_value(given[e.argument]))
        # a check's message starts with the registry's word for the argument: the caller's replaces it, as theirs is
        # the only one their code holds, and the value is said once, where the message says it. A message that does
        # not start so (an unknown impl) gets the caller's word and value in front, and the value moves there.
        if text.startswith(f"{e.argument} "):
            # and the registry's word in a formula, ntk's "log(base)", as well
            text = name + text[len(e.argument):].replace(f"({e.argument})", f"({name})")
        elif name != e.argument and e.argument in given:
            shown = describe_value(given[e.argument])
            said = next((said for said in (f", got {shown}", f" {shown}") if said in text), "")
            text = f"{name}={shown}: {text.replace(said, '', 1) if said else text}"
        elif name != e.argument:
            text = f"{name}: {text}"
        raise RopeArgumentError(name, text) from None


def rotary_module(impl: str, head_dim: int, seq_len: int, theta: float = 10000.0, variant: str = "partial",
                  device: torch.device | str = "cpu", *, head_dim_name: str = "head_dim",
                  scaling: Mapping | None = None) -> RotaryEmbedding:
    """The registry's module for these arguments, built on first use and then reused.

    A bad argument raises :class:`~rope.RopeArgumentError` naming it as this API does (``impl``,
    ``head_dim``, ``seq_len``, ``theta``, ``variant``, ``scaling.<key>``); ``head_dim_name``: how the caller gave
    the head size (:func:`apply` passes ``"q.shape[-1]"``, as its caller gave q, not a head_dim). ``scaling``:
    ``rope.build``'s position scaling (``{"type": "yarn", "factor": 4, ...}``, see :mod:`rope.scaling`).
    """
    device = torch.device(device)
    # the types too: 16.0, np.int64(16) and True hash and compare equal to the ints 16 and 1, so without them a value
    # the build refuses would be handed the module built for the int, and be refused or not by what ran before
    key = (impl, head_dim, seq_len, theta, variant, device, tuple(map(type, (impl, head_dim, seq_len, theta, variant))),
           _scaling_key(scaling))
    try:
        module = _MODULES.pop(key, None)  # popped and put back last: the most recently used
    except TypeError:  # an unhashable argument: the build below names it
        module = None
    if module is None:
        module = build_named(impl, head_dim, seq_len, theta, variant, head_dim_name=head_dim_name,
                             scaling=scaling).to(device)
        if len(_MODULES) >= CACHE_SIZE:
            _MODULES.popitem(last=False)
    _MODULES[key] = module
    return module


def _scaling_key(scaling: object) -> object:
    """``scaling`` as part of a cache key: its items with their values' types (as for the other arguments), so two
    calls share a module only when they asked for the same table. A dict is unhashable, and its items would be
    compared in the order they were written; they are put in an order of their own. Anything but a mapping is kept
    as it is (the build refuses it, unhashable or not)."""
    if not isinstance(scaling, Mapping):
        return scaling
    return tuple((key, value, type(value)) for key, value in sorted(scaling.items(), key=lambda item: repr(item[0])))


def clear_cache() -> None:
    """Forget every built module (their tables free with them)."""
    _MODULES.clear()


def apply(q: Tensor, k: Tensor | None, seq_len: int, theta: float = 10000.0, impl: str = "torch",
          variant: str = "partial", *, positions: Tensor | None = None,
          scaling: Mapping | None = None) -> tuple[Tensor, Tensor | None]:
    """Rotate q and k, (B, T, H, D) tensors (k may have fewer heads, or be None), by their positions.

    ``seq_len`` is the length of the cos/sin table (positions ``0 .. seq_len - 1``), ``theta`` its
    base, ``variant`` the rotation (``"partial"``, the seed's; ``"full"``, the standard one) and
    ``impl`` any name of :func:`rope.available`. ``positions`` (T,) or (B, T) integers pick the table
    rows, e.g. the absolute positions of the tokens after a KV cache; default ``arange(T)``.
    ``scaling``: the table's position scaling as ``rope.build`` takes it (``{"type": "yarn", "factor": 4,
    "original_max_seq_len": 4096}``, ``ntk``, ``linear``, ... see :mod:`rope.scaling`); None: none.
    Returns ``(q_rotated, k_rotated)`` in q's dtype (``k_rotated`` is None when k is).
    """
    if not isinstance(q, Tensor):
        raise ValueError(f"q must be a (B, T, H, D) torch.Tensor, got {type(q).__name__}")
    if q.dim() != 4:
        raise ValueError(f"q must be a (B, T, H, D) tensor (batch, tokens, heads, head dim), got shape "
                         f"{tuple(q.shape)}")
    _check_against_q(q, k, positions)
    module = rotary_module(impl, q.shape[-1], seq_len, theta, variant, q.device, head_dim_name="q.shape[-1]",
                           scaling=scaling)
    _check_against_table(q, seq_len, positions)
    out = module(q, k, positions=positions)
    return (out, None) if k is None else out


def _check_against_q(q: Tensor, k: Tensor | None, positions: Tensor | None) -> None:
    """:func:`apply`'s checks of k and positions against q, before the module's own (and before it is built): a k
    in another layout gets a line that says so, and positions that are no tensor are named by their type (the
    module's check would show a NumPy array's dtype as if it were a tensor's)."""
    if positions is not None and not isinstance(positions, Tensor):
        raise TypeError(f"positions must be a (T,) or (B, T) integer torch.Tensor, got {type(positions).__name__}")
    # k is compared with q first: the module checks k alone, against the head_dim and max_seq_len it was built for
    if isinstance(k, Tensor) and k.dim() == 4 and _bt_d(k) != _bt_d(q):
        # with dims 1 and 2 swapped they would agree: a tensor in the (B, H, T, D) layout of SDPA and most caches
        k_transposed = _bt_d(k.transpose(1, 2)) == _bt_d(q)
        q_transposed = _bt_d(q.transpose(1, 2)) == _bt_d(k)
        hint = ""
        if k_transposed != q_transposed:
            which = "k" if k_transposed else "q"
            hint = f"; {which} looks transposed, (B, H, T, D): pass {which}.transpose(1, 2)"
        elif k_transposed:
            hint = "; q or k looks transposed, (B, H, T, D): pass that one's .transpose(1, 2)"
        raise ValueError(f"q and k must agree in B, T and D, got q {tuple(q.shape)} and k {tuple(k.shape)}: both are "
                         f"(B, T, H, D) (batch, tokens, heads, head dim){hint}")


def _bt_d(x: Tensor) -> tuple[int, int, int]:
    """The sizes q and k must share: batch, tokens and head dim."""
    return x.shape[0], x.shape[1], x.shape[3]


def _check_against_table(q: Tensor, seq_len: int, positions: Tensor | None) -> None:
    """:func:`apply`'s checks of q and positions against the table, before the module's own: the module would
    name its ``max_seq_len`` and ``head_dim``, and the caller of apply passed ``seq_len`` and q."""
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
