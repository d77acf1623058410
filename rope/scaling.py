"""RoPE scaling: transformations of the frequency table for contexts longer than the training one.

Every method here changes only the frequencies (and, for YaRN, scales cos/sin by an attention
factor), so every implementation supports every method with no kernel change: the base class
builds its cos/sin tables from :func:`scaled_frequencies`.

Methods and their parameters (named as in the papers and Hugging Face's ``rope_scaling`` configs,
with their defaults; ``original_max_seq_len`` is HF's ``original_max_position_embeddings``):

* ``linear`` — position interpolation (Chen et al. 2023): every frequency divided by ``factor``.
* ``ntk`` — NTK-aware scaling (bloc97, 2023): the base raised to ``base * factor ** (d / (d - 2))``,
  so the highest frequency is kept and the lowest divided by ``factor``.
* ``dynamic_ntk`` — ``ntk`` with the factor taken from the current length L (HF's ``dynamic``):
  ``max(1, factor * L / original_max_seq_len - (factor - 1))``; the original table up to
  ``original_max_seq_len``.
* ``yarn`` — YaRN (Peng et al. 2023): a ramp between interpolation (low frequencies, fewer than
  ``beta_slow`` rotations over the original context) and extrapolation (more than ``beta_fast``),
  and an attention temperature ``0.1 ln(factor) + 1`` (with both ``mscale`` and ``mscale_all_dim``
  set and nonzero: the ratio of ``0.1 m ln(factor) + 1`` for the two, either alone ignored, as in HF;
  ``attention_factor`` overrides it)
  folded into cos and sin, as HF does.
* ``llama3`` — Llama 3.1's rule: wavelengths longer than ``original_max_seq_len / low_freq_factor``
  interpolated by ``factor``, shorter than ``original_max_seq_len / high_freq_factor`` kept, a
  smooth blend between.

The formulas are written over a general frequency vector so that ``variant="partial"`` (zero
frequencies stay zero) and ``rotary_dim`` work too: a frequency f is ``base ** -e`` with e in
(0, 1]; for the standard frequencies e = 2i/d and every method equals HF's (tested against
``transformers``' rope-init functions where that package is installed).
"""

from __future__ import annotations

import math
import numbers
import sys
from collections.abc import Mapping

import torch
from torch import Tensor

#: Each method's parameters and defaults (``REQUIRED``: must be given).
REQUIRED = object()
SCALING_PARAMS: dict[str, dict[str, object]] = {
    "none": {},
    "linear": {"factor": REQUIRED},
    "ntk": {"factor": REQUIRED},
    "dynamic_ntk": {"factor": REQUIRED, "original_max_seq_len": REQUIRED},
    "yarn": {"factor": REQUIRED, "original_max_seq_len": REQUIRED, "beta_fast": 32.0, "beta_slow": 1.0,
             "mscale": None, "mscale_all_dim": None, "attention_factor": None, "truncate": True},
    "llama3": {"factor": REQUIRED, "original_max_seq_len": REQUIRED, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0},
}
SCALING_TYPES = tuple(SCALING_PARAMS)


class ScalingError(ValueError):
    """A bad ``scaling`` argument; ``argument`` is ``"scaling"`` or ``"scaling.<parameter>"``."""

    def __init__(self, argument: str, message: str) -> None:
        super().__init__(message)
        self.argument = argument


def normalize_scaling(scaling: Mapping | None) -> dict:
    """``scaling`` checked and completed with its method's defaults: ``{"type": ..., params...}``.

    None, ``{}`` and ``{"type": "none"}`` mean no scaling. Keys set to None (a config listing every
    parameter) take the default. Raises :class:`ScalingError` naming the parameter at fault.
    """
    if scaling is None:
        return {"type": "none"}
    if not isinstance(scaling, Mapping):
        raise ScalingError("scaling", f"scaling must be a mapping with a 'type', got {scaling!r}")
    given = {k: v for k, v in scaling.items() if v is not None}
    kind = given.pop("type", "none")
    # a str first: ``in`` hashes the value, and an unhashable one (a list from a config) would raise a bare TypeError
    if not isinstance(kind, str) or kind not in SCALING_PARAMS:
        raise ScalingError("scaling.type", f"scaling.type must be one of {SCALING_TYPES}, got {kind!r}")
    params = SCALING_PARAMS[kind]
    unknown = sorted(set(given) - set(params), key=str)  # by text: keys of mixed types do not compare
    if unknown:
        raise ScalingError(f"scaling.{unknown[0]}", f"scaling.type={kind} has no parameter {unknown[0]!r} "
                                                    f"(its parameters: {', '.join(params) or 'none'})")
    out = {"type": kind, **{k: v for k, v in params.items() if v is not REQUIRED}, **given}
    missing = [k for k in params if k not in out]
    if missing:
        raise ScalingError(f"scaling.{missing[0]}", f"scaling.type={kind} needs scaling.{missing[0]}")
    _check_values(out)
    # every other real number as a Python float: a Fraction or a NumPy scalar passes the checks as a number, but
    # torch cannot divide a tensor by a Fraction, and a NumPy float32 does not serialise as JSON
    return {k: float(v) if _other_real(v) else v for k, v in out.items()}


def _other_real(v: object) -> bool:
    """A real number that is no bool, no int and no plain float: a Fraction, a NumPy scalar (float64 included)."""
    return isinstance(v, numbers.Real) and not isinstance(v, (bool, int)) and type(v) is not float


def _finite(v: object) -> bool:
    """A real number (no bool) that a float holds finitely: an int too large for a float (``10**400``, which YAML
    reads as an int) is not one, and ``math.isfinite`` would raise OverflowError for it."""
    if not isinstance(v, numbers.Real) or isinstance(v, bool):
        return False
    try:
        return math.isfinite(v)
    except OverflowError:
        return False


def _shown(v: object) -> str:
    """``repr(v)``, but an int too large for a float by its size: its hundreds of digits would fill the line."""
    if isinstance(v, int) and not isinstance(v, bool) and not _finite(v):
        return f"an int of {len(str(abs(v)))} digits"
    return repr(v)


def _check_values(s: dict) -> None:
    def number(key: str, low: float, inclusive: bool = True) -> None:
        v = s.get(key)
        if not _finite(v) or (v < low if inclusive else v <= low):
            raise ScalingError(f"scaling.{key}", f"scaling.{key} must be a finite number "
                                                 f"{'>=' if inclusive else '>'} {low:g}, got {_shown(v)}")

    if "factor" in s:
        number("factor", 1.0)
    if "original_max_seq_len" in s:
        v = s["original_max_seq_len"]
        if isinstance(v, numbers.Integral) and not isinstance(v, (int, bool)):  # as base.py says it of head_dim
            raise ScalingError("scaling.original_max_seq_len",
                               f"scaling.original_max_seq_len must be a positive Python int, got {v!r} of type "
                               f"{type(v).__module__}.{type(v).__qualname__}: convert it with int()")
        if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
            raise ScalingError("scaling.original_max_seq_len",
                               f"scaling.original_max_seq_len must be a positive int, got {v!r}")
        if not _finite(v):
            raise ScalingError("scaling.original_max_seq_len",
                               f"scaling.original_max_seq_len must be a positive int of at most "
                               f"{sys.float_info.max:g} (the frequencies are float arithmetic), got {_shown(v)}")
    for key in ("beta_fast", "beta_slow", "low_freq_factor", "high_freq_factor"):
        if key in s:
            number(key, 0.0, inclusive=False)
    for key in ("mscale", "mscale_all_dim"):
        if s.get(key) is not None:
            number(key, 0.0)
    if s.get("attention_factor") is not None:
        number("attention_factor", 0.0, inclusive=False)
    if s["type"] == "yarn" and s["beta_fast"] <= s["beta_slow"]:
        raise ScalingError("scaling.beta_fast", f"scaling.beta_fast={s['beta_fast']} must exceed "
                                                f"scaling.beta_slow={s['beta_slow']}")
    if s["type"] == "llama3" and s["high_freq_factor"] <= s["low_freq_factor"]:
        raise ScalingError("scaling.high_freq_factor", f"scaling.high_freq_factor={s['high_freq_factor']} must "
                                                       f"exceed scaling.low_freq_factor={s['low_freq_factor']}")
    if "truncate" in s and not isinstance(s["truncate"], bool):
        raise ScalingError("scaling.truncate", f"scaling.truncate must be true or false, got {s['truncate']!r}")
    if s["type"] == "yarn":
        _check_attention_factor(s)


def _check_attention_factor(s: dict) -> None:
    """Refuse a YaRN attention factor that the float32 tables cannot hold: it multiplies cos and sin, so one that
    overflows float32 (a huge ``mscale`` or ``attention_factor``) makes every output inf or NaN, and one below the
    smallest normal float32 (a huge ``mscale_all_dim``) makes every rotated output 0, without a word."""
    factor = attention_factor(s)
    info = torch.finfo(torch.float32)
    if not (math.isfinite(factor) and info.tiny <= factor <= info.max):
        given = ("attention_factor" if s.get("attention_factor") is not None
                 else "mscale" if factor > 1 else "mscale_all_dim")  # the parameter that pushed it out of range
        raise ScalingError(f"scaling.{given}", f"scaling.type=yarn gives an attention factor of {factor:g} "
                                               f"(scaling.{given}={s[given]!r}), which float32 cos/sin tables cannot "
                                               f"hold: it must lie in [{info.tiny:g}, {info.max:g}]")


def _exponents(freqs: Tensor, base: float) -> Tensor:
    """e with f = base ** -e for each nonzero frequency (0 where f is 0)."""
    safe = torch.where(freqs > 0, freqs, torch.ones_like(freqs))
    return torch.where(freqs > 0, -torch.log(safe) / math.log(base), torch.zeros_like(freqs))


def _ntk(freqs: Tensor, base: float, factor: float) -> Tensor:
    """Base scaled so that the lowest nonzero frequency is divided by ``factor``, the highest kept:
    for the standard frequencies exactly ``base * factor ** (d / (d - 2))``."""
    e = _exponents(freqs, base)
    if factor == 1.0 or e.max() == 0:  # e.max() == 0: the frequency 1 alone (rotated width 2, or 4
        return freqs                    # partial), which is kept; nothing lower to interpolate
    return freqs * factor ** (-e / e.max())


def _yarn(freqs: Tensor, base: float, rotary_dim: int, s: dict) -> Tensor:
    """HF's YaRN ramp over the (continuous) pair index i = e d / 2 of each frequency."""
    factor, d, length = s["factor"], rotary_dim, s["original_max_seq_len"]

    def correction_dim(rotations: float) -> float:
        ratio = length / (rotations * 2 * math.pi)  # HF's expression, kept where it holds: floor/ceil see its bits
        # a beta_slow or beta_fast far from 1 (a finite number > 0, as checked) makes the quotient overflow to inf or
        # underflow to 0 (math.log: a math domain error): its log as a difference of logs then
        log_ratio = math.log(ratio) if 0 < ratio < math.inf else (
            math.log(length) - math.log(rotations) - math.log(2 * math.pi))
        return d * log_ratio / (2 * math.log(base))

    low, high = correction_dim(s["beta_fast"]), correction_dim(s["beta_slow"])
    if s["truncate"]:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, d - 1)
    if low == high:
        high += 0.001  # HF's guard against a zero-width ramp
    index = _exponents(freqs, base) * d / 2
    ramp = ((index - low) / (high - low)).clamp(0, 1)
    extrapolation = 1 - ramp
    return freqs / factor * (1 - extrapolation) + freqs * extrapolation


def _llama3(freqs: Tensor, s: dict) -> Tensor:
    factor, length = s["factor"], s["original_max_seq_len"]
    low_ff, high_ff = s["low_freq_factor"], s["high_freq_factor"]
    wavelen = 2 * math.pi / freqs  # inf for a zero frequency: interpolated to 0, unchanged
    interpolated = torch.where(wavelen > length / low_ff, freqs / factor, freqs)
    smooth = (length / wavelen - low_ff) / (high_ff - low_ff)
    blended = (1 - smooth) * interpolated / factor + smooth * interpolated
    medium = (wavelen >= length / high_ff) & (wavelen <= length / low_ff)
    return torch.where(medium, blended, interpolated)


def _mscale(factor: float, mscale: float = 1.0) -> float:
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def attention_factor(scaling: dict) -> float:
    """The factor cos and sin are multiplied by (YaRN's temperature; 1 for the other methods)."""
    if scaling["type"] != "yarn":
        return 1.0
    if scaling.get("attention_factor") is not None:
        return float(scaling["attention_factor"])
    factor, mscale, all_dim = scaling["factor"], scaling["mscale"], scaling["mscale_all_dim"]
    if mscale and all_dim:
        return _mscale(factor, mscale) / _mscale(factor, all_dim)
    return _mscale(factor)


def dynamic_factor(scaling: dict, length: int) -> float:
    """``dynamic_ntk``'s effective factor at sequence length ``length`` (1 up to the original length)."""
    ratio = scaling["factor"] * length / scaling["original_max_seq_len"] - (scaling["factor"] - 1)
    return max(1.0, ratio)


def scaled_frequencies(freqs: Tensor, base: float, rotary_dim: int, scaling: dict,
                       length: int | None = None) -> Tensor:
    """The float64 frequencies after ``scaling`` (normalized); ``length`` is the current sequence
    length, used by ``dynamic_ntk`` only."""
    kind = scaling["type"]
    if kind == "none":
        return freqs
    if kind == "linear":
        return freqs / scaling["factor"]
    if kind == "ntk":
        return _ntk(freqs, base, scaling["factor"])
    if kind == "dynamic_ntk":
        return _ntk(freqs, base, dynamic_factor(scaling, length or scaling["original_max_seq_len"]))
    if kind == "yarn":
        return _yarn(freqs, base, rotary_dim, scaling)
    return _llama3(freqs, scaling)


def describe_scaling(scaling: dict) -> str:
    """How a module's :meth:`describe` (a run's summary.json) names its scaling: ``none``, or ``yarn x4`` followed
    by every other parameter that sets the tables and is not its default (``(original_max_seq_len=512,
    beta_fast=16)``), so two runs whose tables differ never read alike."""
    kind = scaling["type"]
    if kind == "none":
        return "none"
    defaults = SCALING_PARAMS[kind]
    extra = [f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in
             ((k, scaling.get(k)) for k in defaults if k != "factor") if v != defaults[k]]
    return f"{kind} x{scaling['factor']:g}" + (f" ({', '.join(extra)})" if extra else "")
