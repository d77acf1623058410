"""Shared part of every RoPE implementation: the frequency table and input validation.

Every implementation must compute the same function (the reference semantics below), so the
frequencies and the cos/sin cache live here once, and the argument checks once in :mod:`rope.checks`; a
subclass only supplies ``rotate`` (and, if it takes options of its own, ``check_options``). A bad build argument
raises :class:`RopeArgumentError`, which names the argument, and ``check_args`` finds it without building.

Semantics, for head dim D and a half split ``x1, x2 = x.chunk(2, -1)``::

    y1 =  x1 * cos + x2 * sin
    y2 = -x1 * sin + x2 * cos

``variant="partial"`` (default): D/4 frequencies ``(1/base) ** linspace(0, 1, D/4)`` followed by
D/4 zero frequencies (the last quarter of each half passes through unchanged).
``variant="full"``: the standard D/2 frequencies ``base ** (-2i/D)``.

The layouts real models use, as build options every implementation takes:

* ``layout="half"`` (default) pairs element i with i + R/2 (GPT-NeoX, Llama in Hugging Face);
  ``layout="interleaved"`` pairs 2i with 2i + 1 (GPT-J, Meta's original Llama, the complex-number
  formulation). Pair i has frequency i in both.
* ``rotary_dim=R`` rotates only the first R elements of each head and passes the other D - R
  through untouched (GPT-NeoX ``rotary_pct``, Phi ``partial_rotary_factor``); the frequencies are
  those of a head of size R (``None``: R = D).

Packed sequences (flash-attn's varlen format): ``r(q, k, cu_seqlens=cu)`` with q, k of shape
(total_tokens, H, D) and ``cu`` the int32 cumulative starts; positions restart at each sequence
(plus an optional per-sequence ``seqlen_offsets``). The base class turns that into ``positions``
(:mod:`rope._packed`), so every implementation supports it.
"""

from __future__ import annotations

import contextlib
import inspect

import torch
from torch import Tensor, nn

# The argument checks and the packed positions live in modules of their own (neither imports this one, so these
# imports make no cycle); the names are re-exported here because implementations, plugins, the benchmarks and the
# tests import them from rope.base.
from rope._packed import TensorCache as TensorCache
from rope._packed import packed_positions as packed_positions
from rope._packed import packed_positions_once
from rope.checks import LAYOUTS as LAYOUTS
from rope.checks import VARIANTS as VARIANTS
from rope.checks import (
    RopeArgumentError,
    UnknownRopeOptionError,
    _positive_int,
    check_base,
    check_common_args,
    check_rotary_dim,
    check_scaling,
    check_variant,
)
from rope.checks import UnknownRopeError as UnknownRopeError
from rope.checks import check_head_dim as check_head_dim
from rope.checks import check_layout as check_layout
from rope.checks import describe_value as describe_value
from rope.scaling import attention_factor, describe_scaling, dynamic_factor, scaled_frequencies

#: The dtypes positions may have: torch's uint16/32/64 lack the reductions (min, max) that the range checks and
#: dynamic_ntk read positions with, so they are refused in one line rather than failing inside torch.
POSITION_DTYPES = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)

#: Constructor parameters every implementation has; everything else a constructor takes is an option.
_COMMON_ARGS = ("head_dim", "max_seq_len", "base")


def label(name: str, variant: str | None = None, compute_dtype: str | None = None) -> str:
    """How runs, tables and dashboards name an implementation: ``torch (partial, float32)``, ``none``.

    The one place this is spelled out, so that every place a caller shows a configuration by name (a log
    line, a record of the run, a table's rows) agrees with the others.
    """
    if name == "none":
        return "none"
    parts = [p for p in (variant, compute_dtype) if p not in (None, "", "none", "None")]
    return f"{name} ({', '.join(parts)})" if parts else name


def rope_frequencies(rotary_dim: int, base: float, variant: str) -> Tensor:
    """The R/2 angular frequencies (float64) of R rotated dimensions, pair i first.

    ``rotary_dim`` is the rotated width (the head dim unless ``rotary_dim`` is set): models with
    partial rotation compute their frequencies over the rotated width, not the head. Its arguments are
    checked as a build checks them (a RopeArgumentError naming the argument): a public helper, and an odd
    width or a base <= 0 would otherwise give too few frequencies or inf/NaN ones without a word.
    """
    check_variant(variant)
    _positive_int("rotary_dim", rotary_dim)
    check_rotary_dim(rotary_dim, None, variant)
    check_base(base)
    if variant == "partial":
        quarter = rotary_dim // 4
        freq = (1.0 / base) ** torch.linspace(0, 1, quarter, dtype=torch.float64)
        return torch.cat([freq, torch.zeros(quarter, dtype=torch.float64)])
    half = rotary_dim // 2
    return base ** (-2.0 * torch.arange(half, dtype=torch.float64) / rotary_dim)


class RotaryEmbedding(nn.Module):
    """Base class: ``y = r(x)`` or ``q2, k2 = r(q, k)`` on (B, T, H, D) tensors.

    Buffers ``cos`` and ``sin`` are float32 of shape (max_seq_len, R/2), R the rotated width,
    computed in float64 and rounded once, so every implementation reads the same table.
    ``layout`` and ``rotary_dim`` (see the module docstring) are attributes every ``rotate`` honours;
    ``layouts`` lists the layouts an implementation supports (a build asking for another is refused).
    """

    registry_name: str = "?"

    #: What this implementation computes beyond the plain half-split rotation of the whole head:
    #: ``check_args`` refuses the rest by name. Off by default, so an implementation written without
    #: them is refused, rather than silently wrong, when a user asks for them.
    layouts: tuple[str, ...] = ("half",)
    supports_rotary_dim: bool = False
    #: Whether float64 inputs are computed in float64: off by default, so an implementation written for float32 and
    #: lower refuses them in one line instead of returning float32 arithmetic as float64.
    supports_float64: bool = False

    #: Inductor options a model using this module should be compiled with (``torch.compile(...,
    #: options=...)``; the model's compile helper merges them and drops keys its torch lacks). Empty
    #: here; the Triton entries ask Inductor to launch their kernels as it launches its own.
    inductor_options: dict[str, object] = {}

    #: Test hook: an implementation that allocates its outputs uninitialised (``torch.empty``) fills
    #: them with NaN first when this is set, so an element it fails to write cannot pass unnoticed.
    #: Implementations whose outputs come from torch operators ignore it. Set it per instance.
    poison_outputs: bool = False

    def __init__(self, head_dim: int, max_seq_len: int, base: float = 10000.0, variant: str = "partial",
                 layout: str = "half", rotary_dim: int | None = None, scaling: dict | None = None) -> None:
        super().__init__()
        check_common_args(head_dim, max_seq_len, base, variant, layout, rotary_dim, self.layouts, self.registry_name,
                          self.supports_rotary_dim, scaling, self.rotates())
        self.head_dim = head_dim
        self.max_seq_len = max_seq_len
        self.base = float(base)
        self.variant = variant
        self.layout = layout
        self.rotary_dim = head_dim if rotary_dim is None else rotary_dim
        self.scaling = check_scaling(scaling)
        cos, sin = self._tables(self.scaling.get("original_max_seq_len"))
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        self._table_length: int | None = None  # dynamic_ntk: the length the tables are for
        # Input signatures (shapes, dtypes, devices) already validated: the checks run once each.
        self._validated: set[tuple] = set()

    @property
    def _cos_sin(self) -> tuple[Tensor, Tensor]:
        """The cos/sin buffers for the per-call hot path (eager only), read from ``_buffers`` itself: cheaper than
        ``nn.Module.__getattr__``, and never stale, as ``torch.func.functional_call``, ``register_buffer`` and
        ``torch.nn.utils.stateless`` swap a buffer by writing ``_buffers`` directly, past any ``__setattr__``."""
        buffers = self._buffers
        return buffers["cos"], buffers["sin"]

    def _apply(self, fn, recurse=True):
        """``.to()``, ``.cuda()``, ``.half()``, ``.to_empty()``, ...: the tables follow a move to another device but
        stay float32 through a dtype cast (every entry reads float32 tables; a model cast to bf16 must not round
        them), and are computed again when they leave the meta device, as meta tensors hold no values and
        ``to_empty`` after a meta-device build would otherwise leave uninitialised memory in them (they are not in
        the state_dict, so no checkpoint load fills them either)."""
        tables = {name: self._buffers.get(name) for name in ("cos", "sin")}
        module = super()._apply(fn, recurse)
        fresh = None
        for name, before in tables.items():
            after = self._buffers.get(name)
            if before is None or after is None:
                continue
            if before.is_meta and not after.is_meta:
                if fresh is None:
                    fresh = dict(zip(("cos", "sin"), self._fresh_tables(), strict=True))
                self._buffers[name] = fresh[name].to(after.device)
            elif after.dtype != before.dtype:
                self._buffers[name] = before.to(after.device)
        return module

    def _fresh_tables(self) -> tuple[Tensor, Tensor]:
        """The tables for the current length, computed on the CPU as a build computes them (whatever the default
        device), so a module materialised from the meta device holds the bits a build would."""
        length = getattr(self, "_table_length", None)
        with torch.device("cpu"):
            return self._tables(self.scaling.get("original_max_seq_len") if length is None else length)

    def _tables(self, length: int | None) -> tuple[Tensor, Tensor]:
        """float32 cos, sin (max_seq_len, R/2): computed in float64 from the (scaled) frequencies, with
        YaRN's attention factor folded in, and rounded once. ``length``: dynamic_ntk's current length."""
        if not self.rotates():  # the identity turns by angle 0 at any width: no frequencies, which need a split
            shape = (self.max_seq_len, self.rotary_dim // 2)
            return torch.ones(shape), torch.zeros(shape)
        freqs = rope_frequencies(self.rotary_dim, self.base, self.variant)
        freqs = scaled_frequencies(freqs, self.base, self.rotary_dim, self.scaling, length)
        theta = torch.outer(torch.arange(self.max_seq_len, dtype=torch.float64), freqs)
        scale = attention_factor(self.scaling)
        return (theta.cos() * scale).float(), (theta.sin() * scale).float()

    def _follow_length(self, q: Tensor, positions: Tensor | None) -> None:
        """dynamic_ntk: rebuild the tables when the current length (T, or the largest position + 1)
        changes the factor. Every entry point that rotates calls it.

        The new tables are new tensors assigned to the buffers (which ``_cos_sin`` reads), never
        written into the old ones: the graph of an earlier call (another length) still holds those for its
        backward, so two calls of different lengths before one backward work and get their own gradients."""
        if self.scaling["type"] != "dynamic_ntk" or (positions is not None and positions.numel() == 0):
            return
        length = q.shape[1] if positions is None else int(positions.max()) + 1
        key = max(length, self.scaling["original_max_seq_len"])
        if key == self._table_length:
            return
        if self._table_length is None or dynamic_factor(self.scaling, key) != dynamic_factor(
                self.scaling, self._table_length):
            cos, sin = self._tables(key)
            self.cos, self.sin = cos.to(self.cos.device), sin.to(self.sin.device)
        self._table_length = key

    # -- build-time validation (no tables allocated) ----------------------------------------------
    @classmethod
    def rotates(cls) -> bool:
        """Whether this implementation rotates at all: the identity (``none``, known by its registry name as
        :func:`label` knows it) does not. Why it matters: a rotation splits the head (its size must be even, a
        multiple of 4 for variant="partial"), and the identity, which splits nothing, takes any head_dim."""
        return cls.registry_name != "none"

    @classmethod
    def option_defaults(cls) -> dict[str, object]:
        """The options of this implementation (constructor keywords beyond head_dim, max_seq_len and
        base) and their defaults (``inspect.Parameter.empty`` for a required one), read from the
        constructor's signature so that they cannot drift from it."""
        params = list(inspect.signature(cls.__init__).parameters.values())[1:]  # without self
        return {p.name: p.default for p in params
                if p.name not in _COMMON_ARGS and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}

    @classmethod
    def check_args(cls, head_dim: int, max_seq_len: int, base: float = 10000.0, **options: object) -> None:
        """Validate what the constructor would be given, without allocating the cos/sin tables.

        Raises :class:`RopeArgumentError` naming the argument at fault. ``rope.build`` calls it before
        constructing, so a config checker calling it sees exactly the errors a build would raise.
        A constructor taking ``**kwargs`` accepts any option name.
        """
        defaults = cls.option_defaults()
        takes_any = any(p.kind == p.VAR_KEYWORD for p in inspect.signature(cls.__init__).parameters.values())
        unknown = [key for key in options if key not in defaults and not takes_any]
        if unknown:
            known = ", ".join(defaults) or "none"
            raise UnknownRopeOptionError(
                unknown[0], f"{cls.registry_name} has no option {unknown[0]!r} (its options: {known})"
            )
        merged = {**defaults, **options}
        missing = [key for key, value in merged.items() if value is inspect.Parameter.empty]
        if missing:
            raise RopeArgumentError(missing[0], f"{cls.registry_name} needs the option {missing[0]!r}")
        check_common_args(head_dim, max_seq_len, base, merged.get("variant", "partial"),
                          merged.get("layout", "half"), merged.get("rotary_dim"), cls.layouts, cls.registry_name,
                          cls.supports_rotary_dim, merged.get("scaling"), cls.rotates())
        cls.check_options(merged)

    @classmethod
    def check_options(cls, options: dict[str, object]) -> None:
        """Hook: validate this implementation's own options (defaults filled in); raise
        :class:`RopeArgumentError`. The constructor must run the same check (call the same function)."""

    @classmethod
    def unavailable_reason(cls, device: torch.device) -> str | None:
        """Why this implementation cannot run on ``device`` here (one line naming an alternative), or
        None when it can. A config checker calls it before any work; the base class runs anywhere."""
        return None

    def extra_repr(self) -> str:
        extra = "" if self.layout == "half" else f", layout={self.layout!r}"
        extra += "" if self.rotary_dim == self.head_dim else f", rotary_dim={self.rotary_dim}"
        extra += "" if self.scaling["type"] == "none" else f", scaling={self.scaling}"
        return (f"head_dim={self.head_dim}, max_seq_len={self.max_seq_len}, base={self.base:g}, "
                f"variant={self.variant!r}{extra}")

    def describe(self) -> dict:
        """What a run summary should record about this implementation.

        ``compute_dtype`` declares the arithmetic, and the conformance tests hold the implementation
        to that precision: ``"float32"`` (this default), ``"input"`` (the input dtype's), a dtype
        name, or ``"none"`` (the identity). Override it when the arithmetic differs.
        """
        return {"rope": self.registry_name, "variant": self.variant, "compute_dtype": "float32",
                "layout": self.layout, "rotary_dim": self.rotary_dim, "scaling": describe_scaling(self.scaling)}

    # -- validation -------------------------------------------------------------------------------
    def _check(self, name: str, x: Tensor, positions_given: bool) -> None:
        if not isinstance(x, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
        if x.dim() != 4:
            raise ValueError(f"{name} must have shape (B, T, H, D), got {tuple(x.shape)}")
        self._check_dtype_and_length(name, x, positions_given)
        if x.shape[-1] != self.head_dim:
            raise ValueError(f"{name} has head dim {x.shape[-1]}, this RoPE was built for head_dim={self.head_dim}")

    def _check_dtype_and_length(self, name: str, x: Tensor, positions_given: bool) -> None:
        """The checks of ``x``'s dtype and T (dim 1) that q's and a fused projection's share: ``rotate_qkv`` runs
        them on ``qkv``, so that its errors name what the caller passed, not the q view of it."""
        if not x.is_floating_point():
            raise TypeError(f"{name} must be a floating tensor (float32/bfloat16/float16), got {x.dtype}")
        if x.dtype == torch.float64 and not self.supports_float64:
            raise TypeError(f"{self.registry_name} supports float32, bfloat16 and float16 inputs, got {name} of "
                            "dtype torch.float64 (the torch implementation computes float64 in float64)")
        if not positions_given and x.shape[1] > self.max_seq_len:
            raise ValueError(f"{name} has T={x.shape[1]} > max_seq_len={self.max_seq_len} of the cos/sin cache")

    def _check_positions(self, positions: Tensor, B: int, T: int) -> None:
        if not isinstance(positions, Tensor) or positions.dtype not in POSITION_DTYPES:
            raise TypeError(f"positions must be an integer tensor of dtype {' / '.join(map(str, POSITION_DTYPES))}, "
                            f"got {getattr(positions, 'dtype', type(positions))}")
        if positions.shape not in ((T,), (B, T)):
            raise ValueError(f"positions must have shape (T,)=({T},) or (B, T)=({B}, {T}), "
                             f"got {tuple(positions.shape)}")

    def _check_position_values(self, positions: Tensor) -> None:
        """The range check, where it is free: positions in host memory. On an accelerator it would
        cost a host-device synchronisation per call, so there an out-of-range position gives NaN
        rows instead (every implementation; see ``gather_rows``), never a silently wrong answer."""
        # is_cpu first: on an accelerator, the per-call case, one attribute read (``.device`` builds an object)
        if positions.is_cpu and positions.numel() and not torch.compiler.is_compiling():
            lo, hi = int(positions.min()), int(positions.max())
            if lo < 0 or hi >= self.max_seq_len:
                raise ValueError(f"positions must lie in [0, max_seq_len={self.max_seq_len}), got range [{lo}, {hi}]")

    def forward(self, q: Tensor, k: Tensor | None = None, *, positions: Tensor | None = None,
                cu_seqlens: Tensor | None = None, seqlen_offsets: Tensor | int | None = None
                ) -> Tensor | tuple[Tensor, Tensor]:
        """Rotate ``q`` (and ``k``) by their positions; same shape and dtype out.

        ``positions`` (T,) or (B, T) selects the cos/sin rows (default ``arange(T)``). Packed
        sequences: ``cu_seqlens`` (int32/int64, (n_seq + 1,), starting at 0, non-decreasing, ending
        at total_tokens) with q, k of shape (total_tokens, H, D); each sequence's positions start at
        0, or at its ``seqlen_offsets`` entry (an int, or an int tensor of shape (n_seq,)). The packed
        positions are computed and checked once per cu_seqlens tensor (:func:`packed_positions_once`):
        the layers of a step that share it pay the check's host-device synchronisation once; under
        ``torch.compile`` the check is a device-side assert, with no synchronisation.
        """
        if cu_seqlens is not None or seqlen_offsets is not None:
            return self._forward_packed(q, k, positions, cu_seqlens, seqlen_offsets)
        self._validate(q, k, positions)
        self._follow_length(q, positions)
        q2, k2 = self._rotated(self.rotate(q, k, positions), q, k)
        return q2 if k is None else (q2, k2)

    def _forward_packed(self, q, k, positions, cu_seqlens, seqlen_offsets):
        if cu_seqlens is None:
            raise ValueError("seqlen_offsets needs cu_seqlens (the packed-sequence format)")
        if positions is not None:
            raise ValueError("give positions or cu_seqlens, not both (cu_seqlens sets the positions)")
        # the packed shapes checked here, before they are seen as (1, total_tokens, H, D): an error names what was given
        for name, x in (("q", q), ("k", k)):
            if x is None and name == "k":
                continue
            if not isinstance(x, Tensor):
                raise TypeError(f"with cu_seqlens, {name} must be a torch.Tensor of shape (total_tokens, H, D), "
                                f"got {type(x).__name__}")
            if x.dim() != 3:
                raise ValueError(f"with cu_seqlens, {name} must have shape (total_tokens, H, D), got {tuple(x.shape)}")
        if k is not None and (k.shape[0] != q.shape[0] or k.shape[2] != q.shape[2]):
            raise ValueError(f"with cu_seqlens, q and k must agree in total_tokens and D, got q {tuple(q.shape)} "
                             f"and k {tuple(k.shape)}")
        pos = packed_positions_once(cu_seqlens, q.shape[0], self.max_seq_len, seqlen_offsets, q.device)
        # squeeze, not [0]: the backward of an index zero-fills a tensor of the input's size and copies the gradient
        # into it (two more passes over it); that of squeeze is a view
        out = self.forward(q.unsqueeze(0), None if k is None else k.unsqueeze(0), positions=pos)
        return out.squeeze(0) if k is None else (out[0].squeeze(0), out[1].squeeze(0))

    def _validate(self, q: Tensor, k: Tensor | None, positions: Tensor | None) -> None:
        """All checks of the inputs' shapes, dtypes and devices, once per signature (they cannot change
        while the signature does not); the positions' values each call where that is free."""
        if torch.compiler.is_compiling():  # runs at trace time only: nothing to cache
            self._validate_signature(q, k, positions)
            return
        sig = (_signature(q), _signature(k), _signature(positions), self._cos_sin[0].device)
        if sig not in self._validated:
            self._validate_signature(q, k, positions)
            if len(self._validated) > 1024:  # shapes that never repeat: bound the memory
                self._validated.clear()
            self._validated.add(sig)
        if positions is not None:
            self._check_position_values(positions)

    def _validate_signature(self, q: Tensor, k: Tensor | None, positions: Tensor | None) -> None:
        self._check("q", q, positions is not None)
        if k is not None:
            self._check("k", k, positions is not None)
            if k.shape[0] != q.shape[0] or k.shape[1] != q.shape[1] or k.shape[3] != q.shape[3]:
                raise ValueError(f"q and k must agree in B, T and D, got q {tuple(q.shape)} and k {tuple(k.shape)}")
            if k.dtype != q.dtype:
                raise TypeError(f"q and k must have the same dtype, got {q.dtype} and {k.dtype}")
            if k.device != q.device:
                raise ValueError(f"q and k must be on the same device, got {q.device} and {k.device}")
        if positions is not None:
            self._check_positions(positions, q.shape[0], q.shape[1])
            if positions.device != q.device:
                raise ValueError(f"positions must be on q's device {q.device}, got {positions.device}")
        self.check_inputs(q, k, positions)  # first: an entry's own word for a device it cannot run on
        if self.cos.device != q.device and not is_identity(self):  # the identity reads no table
            raise ValueError(f"the cos/sin tables are on {self.cos.device} but q is on {q.device}: "
                             "move the module with .to()")

    def check_inputs(self, q: Tensor, k: Tensor | None, positions: Tensor | None) -> None:
        """Hook: what an implementation needs beyond the shared checks (dtype, device, ...). Raise a
        one-line error. Runs once per input signature, like the shared checks."""

    def rotate_qkv(self, qkv: Tensor, n_head: int, n_kv_head: int | None = None, *,
                   positions: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """Split a fused projection (B, T, (n_head + 2 n_kv_head) D) into q, k, v and rotate q and k.

        q, k, v are (B, T, heads, D) views (q, k rotated, v untouched). Why a method of its own: the
        gradient of a fused projection is one (B, T, W) buffer, and an implementation that writes it in
        one pass (the Triton entries) saves the copy that autograd otherwise makes to stack dq, dk, dv.
        """
        n_kv = n_head if n_kv_head is None else n_kv_head
        for name, n in (("n_head", n_head), ("n_kv_head", n_kv)):
            if not isinstance(n, int) or isinstance(n, bool) or n <= 0:
                raise ValueError(f"{name} must be a positive int, got {n!r}")
        if not isinstance(qkv, Tensor):
            raise TypeError(f"qkv must be a torch.Tensor, got {type(qkv).__name__}")
        width = (n_head + 2 * n_kv) * self.head_dim
        if qkv.dim() != 3 or qkv.shape[-1] != width:
            raise ValueError(f"qkv must have shape (B, T, (n_head + 2*n_kv_head) * head_dim) = (B, T, {width}) "
                             f"for n_head={n_head}, n_kv_head={n_kv}, head_dim={self.head_dim}; "
                             f"got {tuple(qkv.shape)}")
        self._check_dtype_and_length("qkv", qkv, positions is not None)
        q, k, v = split_qkv(qkv, n_head, n_kv, self.head_dim)
        self._validate(q, k, positions)
        self._follow_length(q, positions)
        return self._rotate_qkv(qkv, q, k, v, positions)

    def _rotate_qkv(self, qkv: Tensor, q: Tensor, k: Tensor, v: Tensor,
                    positions: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
        """Hook of :meth:`rotate_qkv` (inputs validated): by default, rotate the q and k views."""
        q2, k2 = self._rotated(self.rotate(q, k, positions), q, k)
        return q2, k2, v

    def rotate(self, q: Tensor, k: Tensor | None, positions: Tensor | None) -> tuple[Tensor, Tensor | None]:
        """Implementation hook: inputs are validated; ``positions`` None means ``arange(T)``."""
        raise NotImplementedError(f"{type(self).__name__} does not define rotate(q, k, positions), which every "
                                  "RotaryEmbedding subclass must: it returns the pair (rotated q, rotated k or None)")

    def _rotated(self, out: object, q: Tensor, k: Tensor | None) -> tuple[Tensor, Tensor | None]:
        """``out``, what :meth:`rotate` returned, if it is the pair (q rotated, k rotated or None) in their shapes
        and q's dtype.

        Why: unpacking one tensor instead of a pair splits its first dimension, silently when the batch is 2, and an
        output of another dtype changes the rest of the model's arithmetic, so either mistake would show far from
        its cause, if at all. Only types, shapes and dtypes are read (host metadata, no device sync, nothing that
        breaks a torch.compile graph): it runs on every call."""
        if isinstance(out, (tuple, list)) and len(out) == 2:
            yq, yk = out
            if isinstance(yq, Tensor) and yq.shape == q.shape and yq.dtype == q.dtype and (
                    yk is None if k is None else isinstance(yk, Tensor) and yk.shape == k.shape
                    and yk.dtype == q.dtype):
                return yq, yk
        dtype = str(q.dtype).removeprefix("torch.")
        want = (f"(q rotated, None) for k None, q rotated a {dtype} tensor of shape {tuple(q.shape)}" if k is None
                else f"(q rotated, k rotated), {dtype} tensors of shapes {tuple(q.shape)} and {tuple(k.shape)}")
        raise TypeError(f"{type(self).__name__}.rotate must return the pair {want}; got {_describe_output(out)}")


def is_identity(rotary: RotaryEmbedding) -> bool:
    """Whether the module rotates nothing (the ``none`` implementation): its ``describe()`` declares the arithmetic
    ``"none"``, the base class's contract for the identity."""
    return rotary.describe().get("compute_dtype") == "none"


def split_qkv(qkv: Tensor, n_head: int, n_kv_head: int, head_dim: int) -> tuple[Tensor, Tensor, Tensor]:
    """The (B, T, heads, D) views q, k, v of a fused (B, T, (n_head + 2 n_kv_head) D) projection."""
    B, T, _ = qkv.shape
    q, k, v = qkv.split([n_head * head_dim, n_kv_head * head_dim, n_kv_head * head_dim], dim=-1)
    return (q.view(B, T, n_head, head_dim), k.view(B, T, n_kv_head, head_dim),
            v.view(B, T, n_kv_head, head_dim))


def _describe_output(out: object) -> str:
    """What a ``rotate`` returned, for its error: a tensor by its shape, a tuple or list by its items."""
    def tensor(x: Tensor) -> str:
        return f"{str(x.dtype).removeprefix('torch.')} tensor {tuple(x.shape)}"

    if isinstance(out, Tensor):
        return f"a {tensor(out)}"
    if isinstance(out, (tuple, list)):
        items = ", ".join(tensor(x) if isinstance(x, Tensor) else type(x).__name__ for x in out)
        return f"a {type(out).__name__} of {len(out)}: ({items})"
    return f"{type(out).__name__}"


def _signature(x: Tensor | None) -> tuple | None:
    """What the validation of ``x`` depends on: shape, dtype, device (strides do not matter to it)."""
    if x is None:
        return None
    return (x.shape, x.dtype, x.device) if isinstance(x, Tensor) else ("not a tensor", type(x))


def on_device_of(x: Tensor) -> contextlib.AbstractContextManager:
    """A context that makes ``x``'s GPU the current CUDA device where it is not (else it does nothing).

    Why: a kernel launched from Python outside PyTorch's own ops (Triton, Liger's Triton kernels, CuTeDSL) runs on
    the current device and its stream, whatever device its tensors are on; a module moved to ``cuda:1`` and called
    without ``torch.cuda.set_device(1)`` would launch on GPU 0. The autograd engine switches for the backward.
    """
    if x.is_cuda and x.get_device() != torch.cuda.current_device():
        return torch.cuda.device(x.device)
    return contextlib.nullcontext()
