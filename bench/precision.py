"""Numerical honesty at long positions: how precise are RoPE's cos/sin and rotations at 2^10 ... 2^20?

Why: a rotation angle ``p * f`` grows with the position ``p``, and so does the absolute size of a
float32 rounding of it (at ``p = 2^20`` and ``f = 1`` one float32 ulp of the angle is 0.125 rad). This
project's float32 cos/sin cache is computed in float64 and rounded once, which should keep it within
half a float32 ulp at every position; the common practice of computing ``theta = pos.float() *
inv_freq.float()`` and then ``cos(theta)`` in float32 does not. This script measures both against
float64, the forward error of every registered implementation at those positions, and how far
RoPE's relative-position property (a score depends on ``m - n`` only) holds at large offsets in each
arithmetic. It is a measurement on the CPU (the tables are built on the host for every device), not a timing:
it writes its own report, ``position_precision.md`` and ``.csv``.

    python -m bench.precision --out docs/results/position_precision
        [--bases 1e4,5e5] [--log2-positions 10..20] [--head-dim 64] [--variants partial,full]
        [--impls torch,triton_v4,...] [--dtypes float32,bfloat16] [--device cpu|cuda] [--seed N]

For each base, variant and k in ``--log2-positions`` the test positions are ``2^k - 3 ... 2^k + 3``
plus ``RANDOM_PER_POWER`` random positions within ``2^k ± 2^k / 64`` (drawn from ``--seed``):

a. the float32 cache (a module's ``cos``/``sin`` buffers) against cos/sin computed in float64 from
   the same float64 frequencies, in absolute terms and in float32 ulps; and the float64 values
   themselves against an exact evaluation (mpmath, 200 bits), the error of the yardstick;
b. cos/sin computed from float32 angles (``pos.float() * freq.float()``, float32 ``cos``/``sin``)
   against float64: the angle's error in radians and the cos/sin errors;
c. the forward error of each implementation (random q, k of each ``--dtypes``; B = H = 2, one token
   per test position, all positions in one call) against an independent float64 evaluation of the
   reference formula written here, max abs error and max error in ulps of the output dtype, beside
   the same rotation done with float32 angles (not an implementation: the common practice);
d. the relative-position property: for random q, k (one head), ``|s(m+o, n+o) - s(m, n)| / (|q| |k|)``
   with ``s(m, n) = <R(m) q, R(n) k>`` for offsets ``o = 2^k`` and ``m - n`` in ``GAPS`` (``n = N0``),
   in float64 (angles and rotation), through each implementation (float32 inputs: the float32
   cache), and with float32 angles. The scores are summed in float64 so only the rotation is measured;
   the CSV also has the error relative to |s(m, n)|, which a random s near 0 inflates.

Writes ``position_precision.md`` and ``position_precision.csv`` under ``--out``. Each module is built
once per base and variant with ``max_seq_len`` just above the largest position (the tables are
(max_seq_len, D/2) float32: 2 x 136 MiB at 2^20 and D = 64). On a CPU the Triton entries run under
Triton's interpreter (``TRITON_INTERPRET=1`` is set here before triton is imported when no GPU is
present), so every call has few tokens. An implementation that cannot run here is listed as skipped
with the reason, never dropped silently. A bad option gets one line naming it and exit code 2,
before any work.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import importlib.metadata
import math
import os
import platform
import shlex
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from bench.harness import markdown_table, run_main
from llm.cli import OneLineParser

if not torch.cuda.is_available():  # before triton is imported (by rope): the kernels run interpreted
    os.environ.setdefault("TRITON_INTERPRET", "1")

import rope  # noqa: E402
from rope._numerics import ulp  # noqa: E402

PROG = "python -m bench.precision"
RANDOM_PER_POWER = 4  # random test positions near each 2^k, beside 2^k - 3 ... 2^k + 3
NEAR = 3  # 2^k - NEAR ... 2^k + NEAR
GAPS = (1, 7, 100)  # m - n of the relative-position scores
N0 = 10  # n of the unshifted score s(m, n)
B, H = 2, 2  # batch and heads of the forward-error inputs
LOG2_RANGE = (2, 22)  # 2^22: tables of 2 x 512 MiB (float32) and ~3 GiB while built in float64
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
F32_ANGLES = "f32 angles"  # the label of the float32-angle rotation beside the implementations


# -- command line ------------------------------------------------------------------------------------
def _list(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def parse_bases(text: str) -> list[float]:
    """``1e4,5e5`` -> [10000.0, 500000.0]; each a finite number > 1."""
    out = []
    for item in _list(text):
        try:
            value = float(item)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected comma-separated numbers > 1, got {item!r}") from None
        if not (math.isfinite(value) and value > 1):
            raise argparse.ArgumentTypeError(f"each base must be a finite number > 1, got {item!r}")
        out.append(value)
    if not out:
        raise argparse.ArgumentTypeError("expected at least one base, e.g. 1e4,5e5")
    return list(dict.fromkeys(out))


def parse_log2(text: str) -> list[int]:
    """``10..20`` (inclusive) or ``10,14,20`` -> sorted exponents k, each in LOG2_RANGE."""
    lo, hi = LOG2_RANGE
    allowed = f"a range A..B or a comma-separated list of ints in [{lo}, {hi}]"
    try:
        if ".." in text:
            a, b = (int(t) for t in text.split(".."))
            values = list(range(a, b + 1))
        else:
            values = [int(t) for t in _list(text)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {allowed}, got {text!r}") from None
    if not values or any(not lo <= v <= hi for v in values):
        raise argparse.ArgumentTypeError(f"expected {allowed}, got {text!r}")
    return sorted(set(values))


def _choices(text: str, allowed: Sequence[str], what: str) -> list[str]:
    names = list(dict.fromkeys(_list(text)))
    bad = [n for n in names if n not in allowed]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"{what} must be among {', '.join(allowed)}, got {text!r}")
    return names


def parse_variants(text: str) -> list[str]:
    return _choices(text, ("partial", "full"), "variants")


def parse_dtypes(text: str) -> list[str]:
    return _choices(text, tuple(DTYPES), "input dtypes")


def parse_impls(text: str) -> list[str]:
    return _choices(text, rope.available(), "implementations")


def parse_head_dim(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0 or value % 4:
        raise argparse.ArgumentTypeError(f"expected a positive multiple of 4 (variant partial needs D/4), got {text!r}")
    return value


def _parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog=PROG, description="Error of the float32 cos/sin cache, of float32 angles and of every RoPE "
                                              "implementation at positions 2^10 ... 2^20, and RoPE's relative-position "
                                              "property at large offsets (md + csv).")
    p.add_argument("--out", type=Path, default=Path("outputs/position_precision"),
                   help="directory for position_precision.md and .csv (default outputs/position_precision)")
    p.add_argument("--bases", type=parse_bases, default=None,
                   help="frequency bases, each > 1 (default 1e4,5e5; --smoke 1e4)")
    p.add_argument("--log2-positions", type=parse_log2, default=None, metavar="K",
                   help=f"exponents k of the positions 2^k: A..B or a list, in {list(LOG2_RANGE)} (default 10..20; "
                        "--smoke 10)")
    p.add_argument("--head-dim", type=parse_head_dim, default=64, help="head dim D (64)")
    p.add_argument("--variants", type=parse_variants, default=None,
                   help="of partial and full (default partial,full; --smoke partial)")
    p.add_argument("--impls", type=parse_impls, default=None,
                   help="comma-separated registered implementations (default: every one that can run here; "
                        "--smoke torch)")
    p.add_argument("--dtypes", type=parse_dtypes, default=None,
                   help="input dtypes of the forward error (default float32,bfloat16; --smoke float32)")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help="cpu (default) or cuda")
    p.add_argument("--smoke", action="store_true",
                   help="defaults of one base, variant, position range and dtype, torch alone (an option given "
                        "still stands): checks the script in seconds")
    p.add_argument("--seed", type=int, default=None,
                   help="seed of the random positions and inputs (default: a fresh one, written in the outputs)")
    return p


def joined_negatives(parser: argparse.ArgumentParser, argv: Sequence[str]) -> list[str]:
    """``--bases -1e4`` as ``--bases=-1e4``: argparse takes a value starting with ``-`` that is not a plain number
    for an option, and would answer "expected one argument"; joined, the option's own check says what it takes."""
    out, rest = [], list(argv)
    while rest:
        arg = rest.pop(0)
        action = parser._option_string_actions.get(arg)
        if action is not None and action.nargs is None and rest and rest[0][:1] == "-" and \
                rest[0][1:2] and rest[0][1:2] in "0123456789.":
            arg = f"{arg}={rest.pop(0)}"
        out.append(arg)
    return out


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Parse and cross-check every option; a bad one exits 2 with one line, before any work."""
    p = _parser()
    args = p.parse_args(joined_negatives(p, sys.argv[1:] if argv is None else argv))
    args.device = torch.device(args.device)
    # --smoke changes the defaults only: an option given is measured as given, as the report's command line says
    defaults = {"bases": ([1e4, 5e5], [1e4]), "log2_positions": (parse_log2("10..20"), [10]),
                "variants": (["partial", "full"], ["partial"]), "impls": (None, ["torch"]),
                "dtypes": (["float32", "bfloat16"], ["float32"])}
    for name, (default, smoke) in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, smoke if args.smoke else default)
    if args.out.exists() and not args.out.is_dir():
        p.error(f"argument --out: {str(args.out)!r} exists and is not a directory")
    # a folder under a file cannot be made: said now, not as a traceback once the measurements are done
    above = next((d for d in args.out.parents if d.exists()), None)
    if above is not None and not above.is_dir():
        p.error(f"argument --out: {str(above)!r} is a file, not a directory")
    _check_writable(p, args.out)
    for variant in args.variants:
        try:
            rope.check_args("torch", args.head_dim, 8, base=args.bases[0], variant=variant)
        except rope.RopeArgumentError as e:
            p.error(f"argument --head-dim: {e}")
    if args.seed is None:
        args.seed = int(torch.seed() % 2**31)
    return args


def _check_writable(p: argparse.ArgumentParser, out: Path) -> None:
    """A folder the report cannot be written in (``/proc``, a read-only mount: permission bits cannot tell) is said
    now, not as a traceback once the measurements are done; the check leaves the file system as it was."""
    made = [d for d in (out, *out.parents) if not d.exists()]  # the deepest first
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as e:
        p.error(f"argument --out: {str(out)!r} cannot be written ({e.strerror or e})")
    finally:
        for d in made:
            with contextlib.suppress(OSError):
                d.rmdir()


# -- positions and frequencies -----------------------------------------------------------------------
def positions_near(log2s: Sequence[int], seed: int) -> dict[int, list[int]]:
    """k -> sorted positions near 2^k: 2^k - NEAR ... 2^k + NEAR and RANDOM_PER_POWER within 2^k ± 2^k/64."""
    gen = torch.Generator().manual_seed(seed)
    out = {}
    for k in log2s:
        p, spread = 2**k, 2**k // 64
        near = set(range(p - NEAR, p + NEAR + 1))
        rand = torch.randint(p - spread, p + spread + 1, (RANDOM_PER_POWER,), generator=gen).tolist()
        out[k] = sorted(near | {int(r) for r in rand})
    return out


def reference_frequencies(head_dim: int, base: float, variant: str) -> torch.Tensor:
    """The D/2 frequencies of the reference semantics, written out here (float64, independent of rope)."""
    if variant == "partial":
        q = head_dim // 4
        freqs = [(1.0 / base) ** (i / (q - 1) if q > 1 else 0.0) for i in range(q)] + [0.0] * q
    else:
        freqs = [base ** (-2.0 * i / head_dim) for i in range(head_dim // 2)]
    return torch.tensor(freqs, dtype=torch.float64)


def angles64(positions: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    """(T, D/2) float64 angles p * f (one rounding of the exact product)."""
    return positions.double().cpu()[:, None] * freqs.double().cpu()[None, :]


def float32_angle_tables(positions: torch.Tensor, freqs: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The common practice: ``theta = pos.float() * inv_freq.float()``, cos and sin in float32 (on the
    positions' device). Returns theta, cos, sin (float32, (T, D/2))."""
    theta = positions.float()[:, None] * freqs.to(positions.device).float()[None, :]
    return theta, theta.cos(), theta.sin()


def exact_cos_sin(positions: Sequence[int], freqs: torch.Tensor, bits: int = 200) -> tuple[torch.Tensor, ...] | None:
    """cos and sin of p * f, f the float64 frequencies taken as exact binary numbers, evaluated with
    mpmath at ``bits`` bits and rounded to float64 (None without mpmath)."""
    try:
        import mpmath
    except ImportError:
        return None
    fs = [mpmath.mpf(float(f)) for f in freqs.tolist()]
    cos = torch.empty(len(positions), len(fs), dtype=torch.float64)
    sin = torch.empty_like(cos)
    with mpmath.workprec(bits):
        for i, p in enumerate(positions):
            for j, f in enumerate(fs):
                theta = mpmath.mpf(p) * f  # exact at this precision
                cos[i, j], sin[i, j] = float(mpmath.cos(theta)), float(mpmath.sin(theta))
    return cos, sin


def _ulps(err: torch.Tensor, ref64: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``err`` in ulps of ``dtype`` at the reference rounded to ``dtype`` (so correct rounding is <= 0.5)."""
    return err / ulp(ref64.to(dtype), dtype)


def _max(t: torch.Tensor) -> float:
    return float(t.max()) if t.numel() else math.nan


# -- a. and b.: the tables ---------------------------------------------------------------------------
def table_errors(cos32: torch.Tensor, sin32: torch.Tensor, positions: list[int], freqs: torch.Tensor,
                 exact: tuple[torch.Tensor, torch.Tensor] | None) -> dict[str, float]:
    """Errors of cached float32 rows (``cos32``/``sin32`` at ``positions``) and of float32 angles, against
    float64 cos/sin of the same float64 frequencies (and of float64 against ``exact``)."""
    pos = torch.tensor(positions, dtype=torch.int64)
    theta = angles64(pos, freqs)
    c64, s64 = theta.cos(), theta.sin()
    c32, s32 = cos32.double().cpu(), sin32.double().cpu()
    ec, es = (c32 - c64).abs(), (s32 - s64).abs()
    t32, ca, sa = float32_angle_tables(pos, freqs)
    row = {
        "cache_cos_abs": _max(ec),
        "cache_sin_abs": _max(es),
        "cache_ulp": max(_max(_ulps(ec, c64, torch.float32)), _max(_ulps(es, s64, torch.float32))),
        "f32angle_rad": _max((t32.double() - theta).abs()),
        "f32angle_cos_abs": _max((ca.double() - c64).abs()),
        "f32angle_sin_abs": _max((sa.double() - s64).abs()),
        "f64_vs_exact_abs": math.nan,
        "cache_ulp_vs_exact": math.nan,
    }
    if exact is not None:
        xc, xs = exact
        row["f64_vs_exact_abs"] = max(_max((c64 - xc).abs()), _max((s64 - xs).abs()))
        row["cache_ulp_vs_exact"] = max(_max(_ulps((c32 - xc).abs(), xc, torch.float32)),
                                        _max(_ulps((s32 - xs).abs(), xs, torch.float32)))
    return row


# -- c.: forward errors ------------------------------------------------------------------------------
def reference_forward(x: torch.Tensor, positions: torch.Tensor, base: float, variant: str) -> torch.Tensor:
    """The reference formula in float64 with float64 angles: x (B, T, H, D), positions (T,) -> float64."""
    half = x.shape[-1] // 2
    theta = angles64(positions, reference_frequencies(x.shape[-1], base, variant))
    cos, sin = theta.cos()[None, :, None, :], theta.sin()[None, :, None, :]
    x = x.detach().double().cpu()
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * cos + x2 * sin, -x1 * sin + x2 * cos), dim=-1)


def float32_angle_forward(x: torch.Tensor, positions: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    """The rotation with float32 angles and float32 arithmetic, rounded to x's dtype."""
    _, cos, sin = float32_angle_tables(positions, freqs)
    cos, sin = cos[None, :, None, :], sin[None, :, None, :]
    x1, x2 = x.float().chunk(2, dim=-1)
    return torch.cat((x1 * cos + x2 * sin, -x1 * sin + x2 * cos), dim=-1).to(x.dtype)


def pair_scale(x: torch.Tensor) -> torch.Tensor:
    """|x1| + |x2| of the rotated pair each element belongs to (float64, x's shape): the size of the
    values a rotation adds, so the scale of its rounding errors."""
    a = x.detach().double().cpu().abs()
    a1, a2 = a.chunk(2, dim=-1)
    return torch.cat((a1 + a2, a1 + a2), dim=-1)


def output_errors(out: torch.Tensor, ref64: torch.Tensor, x: torch.Tensor,
                  groups: dict[int, slice]) -> dict[int, tuple[float, float, float]]:
    """k -> (max abs error, max error in ulps of out's dtype at the pair scale |x1| + |x2|, the same at
    the reference value itself) over the tokens of group k (dim 1) of ``out``, the rotation of ``x``.

    The ulps at the value are what "correctly rounded" means (<= 0.5), but an output near 0 by
    cancellation has tiny ulps there, so any arithmetic shows hundreds; the pair scale is the yardstick
    of the rotation's own rounding (float32 arithmetic: ~2^-24 of it at most).
    """
    err = (out.detach().double().cpu() - ref64).abs()
    at_pair = _ulps(err, pair_scale(x), out.dtype)
    at_out = _ulps(err, ref64, out.dtype)
    return {k: (_max(err[:, s]), _max(at_pair[:, s]), _max(at_out[:, s])) for k, s in groups.items()}


# -- d.: the relative-position property ----------------------------------------------------------------
def relpos_positions(offsets: Sequence[int]) -> tuple[list[int], list[int]]:
    """The (m, n) position pairs: for o in [0, *offsets], for each gap: (N0 + gap + o, N0 + o)."""
    ms, ns = [], []
    for o in [0, *offsets]:
        for gap in GAPS:
            ms.append(N0 + gap + o)
            ns.append(N0 + o)
    return ms, ns


def rotate64(x: torch.Tensor, positions: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    """x (D,) float64 rotated to each position: (T, D), float64 angles and arithmetic."""
    theta = angles64(positions, freqs)
    x1, x2 = x.double().chunk(2)
    return torch.cat((x1 * theta.cos() + x2 * theta.sin(), -x1 * theta.sin() + x2 * theta.cos()), dim=-1)


def rotate_f32_angles(x: torch.Tensor, positions: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    """x (D,) rotated to each position with float32 angles and arithmetic: (T, D) float32."""
    _, cos, sin = float32_angle_tables(positions, freqs)
    x1, x2 = x.float().to(positions.device).chunk(2)
    return torch.cat((x1 * cos + x2 * sin, -x1 * sin + x2 * cos), dim=-1)


def score_errors(rq: torch.Tensor, rk: torch.Tensor, offsets: Sequence[int], ref_scores: torch.Tensor,
                 scale: float) -> list[dict]:
    """Rows of |s(m+o, n+o) - s(m, n)| from rotated q (T, D) and k (T, D) laid out as
    :func:`relpos_positions`, the scores summed in float64: offset, gap, ``abs``, ``rel`` = abs / ``scale``
    (||q|| ||k||, the largest |s| can be), ``rel_score`` = abs / |score64| and ``score64``, the float64
    s(m, n) (``ref_scores``, one per gap). A random s(m, n) can be near 0, where ``rel_score`` says little."""
    s = (rq.double().cpu() * rk.double().cpu()).sum(-1).view(len(offsets) + 1, len(GAPS))
    rows = []
    for i, o in enumerate(offsets, start=1):
        for j, gap in enumerate(GAPS):
            diff = abs(float(s[i, j] - s[0, j]))
            rows.append({"offset_log2": int(math.log2(o)), "gap": gap, "abs": diff,
                         "rel": diff / scale, "rel_score": diff / abs(float(ref_scores[j])),
                         "score64": float(ref_scores[j])})
    return rows


# -- the run -------------------------------------------------------------------------------------------
@dataclass
class Results:
    tables: list[dict] = field(default_factory=list)
    forward: list[dict] = field(default_factory=list)
    relpos: list[dict] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # impl -> why
    impls: list[str] = field(default_factory=list)  # measured
    exact_available: bool = True


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def select_impls(requested: list[str] | None, device: torch.device, skipped: dict[str, str]) -> list[str]:
    """The implementations to measure; the others go to ``skipped`` with the reason."""
    names = requested if requested is not None else rope.available()
    out = []
    for name in names:
        if name == "none":
            skipped[name] = "the identity baseline (no rotation): its error is the rotation left out, not precision"
            continue
        reason = rope.get(name).unavailable_reason(device)
        if reason:
            skipped[name] = reason
        else:
            out.append(name)
    return out


def _fmt_base(base: float) -> str:
    return f"{base:.0e}".replace("e+0", "e").replace("e+", "e")


@dataclass(frozen=True)
class Plan:
    """The positions of a run, the same for every base and variant."""

    near: dict[int, list[int]]  # k -> the test positions near 2^k
    groups: dict[int, slice]  # k -> their tokens in the forward-error call
    positions: list[int]  # every test position, group after group
    offsets: list[int]  # the relative-position offsets 2^k
    ms: list[int]  # the relative-position pairs (m, n), as relpos_positions lays them out
    ns: list[int]
    max_seq_len: int  # just above the largest position


def make_plan(log2s: Sequence[int], seed: int) -> Plan:
    near = positions_near(log2s, seed)
    groups, start = {}, 0
    for k in log2s:
        groups[k] = slice(start, start + len(near[k]))
        start += len(near[k])
    positions = [p for k in log2s for p in near[k]]
    offsets = [2**k for k in log2s]
    ms, ns = relpos_positions(offsets)
    return Plan(near, groups, positions, offsets, ms, ns, max(*positions, *ms, *ns) + 1)


def run(args: argparse.Namespace) -> Results:
    """Every measurement (a-d) for every base and variant."""
    res = Results()
    impls = select_impls(args.impls, args.device, res.skipped)
    plan = make_plan(args.log2_positions, args.seed)
    gen = torch.Generator().manual_seed(args.seed + 1)  # the inputs (the positions drew from seed)
    for base in args.bases:
        for variant in args.variants:
            measure_setting(args, plan, base, variant, impls, gen, res)
    ran = {r["impl"] for r in res.forward}
    res.impls = [n for n in impls if n in ran]
    return res


def measure_setting(args: argparse.Namespace, plan: Plan, base: float, variant: str, impls: list[str],
                    gen: torch.Generator, res: Results) -> None:
    """a-d for one base and variant, appended to ``res``."""
    device, D = args.device, args.head_dim
    tag = f"base {_fmt_base(base)}, {variant}"
    freqs = rope.rope_frequencies(D, base, variant)  # the float64 frequencies the cache is built from
    _log(f"[{tag}] a, b: the float32 cache (max_seq_len={plan.max_seq_len}) and float32 angles")
    table = rope.build("torch", D, plan.max_seq_len, base=base, variant=variant)
    for k, positions in plan.near.items():
        idx = torch.tensor(positions)
        exact = exact_cos_sin(positions, freqs)
        res.exact_available = exact is not None
        row = table_errors(table.cos[idx], table.sin[idx], positions, freqs, exact)
        res.tables.append({"table": "cos_sin", "base": base, "variant": variant, "log2_pos": k,
                           "positions": " ".join(map(str, positions)), **row})
    del table

    # c: q, k (CPU) and their float64 rotations, shared by every implementation
    pos = torch.tensor(plan.positions, dtype=torch.int64, device=device)
    inputs = {}
    for dt in args.dtypes:
        q, k = (torch.randn(B, len(plan.positions), H, D, generator=gen).to(DTYPES[dt]) for _ in range(2))
        inputs[dt] = (q, k, reference_forward(q, pos, base, variant), reference_forward(k, pos, base, variant))
    # d: one q and one k vector, their float64 rotations and the float64 scores s(m, n)
    qv, kv = (torch.randn(D, generator=gen, dtype=torch.float64) for _ in range(2))
    pm, pn = torch.tensor(plan.ms, device=device), torch.tensor(plan.ns, device=device)
    ref_freqs = reference_frequencies(D, base, variant)
    rq64, rk64 = rotate64(qv, pm, ref_freqs), rotate64(kv, pn, ref_freqs)
    ref_scores = (rq64 * rk64).sum(-1)[: len(GAPS)]

    def forward_errors(rotate) -> dict[str, dict[int, tuple[float, ...]]]:
        out = {}
        for dt, (q, k, rq, rk) in inputs.items():
            yq, yk = rotate(q.to(device), k.to(device))
            out[dt] = _merge(output_errors(yq, rq, q, plan.groups), output_errors(yk, rk, k, plan.groups))
        return out

    fwd = {F32_ANGLES: forward_errors(lambda q, k: (float32_angle_forward(q, pos, freqs),
                                                     float32_angle_forward(k, pos, freqs)))}
    rotated = {"float64": (rq64, rk64),
               F32_ANGLES: (rotate_f32_angles(qv, pm, freqs), rotate_f32_angles(kv, pn, freqs))}
    q1 = qv.float().to(device).expand(1, len(plan.ms), 1, D).contiguous()
    k1 = kv.float().to(device).expand(1, len(plan.ns), 1, D).contiguous()
    for name in impls:
        t0 = time.perf_counter()
        try:
            mod = rope.build(name, D, plan.max_seq_len, base=base, variant=variant).to(device)
            with torch.no_grad():
                fwd[name] = forward_errors(lambda q, k: mod(q, k, positions=pos))  # noqa: B023
                rotated[name] = (mod(q1, k1, positions=pm)[0][0, :, 0], mod(q1, k1, positions=pn)[1][0, :, 0])
        except Exception as exc:  # an implementation that fails here is reported, never dropped silently
            why = " ".join(f"failed at base {_fmt_base(base)}, {variant} on {device}: {type(exc).__name__}: "
                           f"{exc}".split())
            res.skipped[name] = why[:300]
            fwd.pop(name, None)
            _log(f"[{tag}] {name}: {res.skipped[name]}")
            continue
        finally:
            mod = None  # the tables go before the next build
        _log(f"[{tag}] c, d: {name} in {time.perf_counter() - t0:.1f} s")
    for name, per_dtype in fwd.items():
        for dt, per_k in per_dtype.items():
            for k, (abs_err, ulp_pair, ulp_out) in per_k.items():
                res.forward.append({"table": "forward", "base": base, "variant": variant, "impl": name, "dtype": dt,
                                    "log2_pos": k, "abs": abs_err, "ulp_pair": ulp_pair, "ulp_out": ulp_out})
    for name, (rq, rk) in rotated.items():
        for row in score_errors(rq, rk, plan.offsets, ref_scores, float(qv.norm() * kv.norm())):
            res.relpos.append({"table": "relpos", "base": base, "variant": variant, "arith": name, **row})


def _merge(a: dict[int, tuple[float, ...]], b: dict[int, tuple[float, ...]]) -> dict[int, tuple[float, ...]]:
    """Per-k, per-column maximum of two error dicts (q's and k's)."""
    return {k: tuple(max(x, y) for x, y in zip(a[k], b[k], strict=True)) for k in a}


# -- writing -------------------------------------------------------------------------------------------
def _e(v: float, spec: str = ".1e") -> str:
    return "" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


def _device_line(device: torch.device) -> str:
    if device.type == "cuda":
        return f"{torch.cuda.get_device_name(device)} (CUDA {torch.version.cuda})"
    interp = " (Triton interpreter)" if os.environ.get("TRITON_INTERPRET") == "1" else ""
    return f"CPU {platform.processor() or platform.machine()}, {os.cpu_count()} cores{interp}"


def _version(pkg: str) -> str:
    try:
        return importlib.metadata.version(pkg)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def render_markdown(args: argparse.Namespace, res: Results, command: str, seconds: float) -> str:
    lines = [
        "# Precision at long positions",
        "",
        f"`{command}`",
        "",
        f"Device: {_device_line(args.device)}; torch {torch.__version__}, triton {_version('triton')}, "
        f"liger-kernel {_version('liger-kernel')}, mpmath {_version('mpmath')}. Head dim {args.head_dim}, "
        f"seed {args.seed}, {seconds:.0f} s.",
        "",
        f"Positions of row 2^k: 2^k - {NEAR} ... 2^k + {NEAR} and {RANDOM_PER_POWER} random positions within "
        "2^k ± 2^k/64 (listed in the CSV); each cell is the maximum over them (and over frequencies, elements, "
        "q and k). Generated by `bench/precision.py`; the CSV has every number.",
        "",
        "## 1. The cos/sin tables",
        "",
        "* **cache cos / sin**: max |cos32 - cos64| (and sin) of the float32 cache as the modules build it "
        "(computed in float64, rounded once), cos64 computed in float64 from the same float64 frequencies.",
        "* **cache ulp**: the same errors in float32 ulps of cos64 rounded to float32 (0.5 = correctly rounded).",
        "* **vs exact ulp**: the cache against an exact evaluation (mpmath, 200 bits) of cos(p f), in float32 "
        "ulps; **f64 err**: max |cos64 - exact| (and sin), the error of the float64 yardstick itself.",
        "* **f32 angle rad**: max |theta32 - p f| of `theta32 = pos.float() * freq.float()`; **f32 cos / sin**: "
        "max |cos(theta32) - cos64| (and sin) with float32 cos/sin: the common practice.",
        "",
    ]
    head = ["base", "variant", "2^k", "cache cos", "cache sin", "cache ulp", "vs exact ulp", "f64 err",
            "f32 angle rad", "f32 cos", "f32 sin"]
    rows = [[_fmt_base(r["base"]), r["variant"], str(r["log2_pos"]), _e(r["cache_cos_abs"]), _e(r["cache_sin_abs"]),
             _e(r["cache_ulp"], ".3f"), _e(r["cache_ulp_vs_exact"], ".3f"), _e(r["f64_vs_exact_abs"]),
             _e(r["f32angle_rad"]), _e(r["f32angle_cos_abs"]), _e(r["f32angle_sin_abs"])] for r in res.tables]
    lines += markdown_table(head, rows, numeric_from=2)
    if not res.exact_available:
        lines += ["", "mpmath is not installed: the exact columns are empty."]
    names = [*res.impls, F32_ANGLES]  # F32_ANGLES: res.impls has only the registered ones
    lines += [
        "",
        "## 2. Forward error of each implementation",
        "",
        f"Random q, k (B={B}, H={H}, one token per test position, all in one call) of each input dtype, against "
        "the reference formula evaluated in float64 with float64 angles (written in the script, independent of "
        "`rope`). Each cell: max abs error / max error in ulps of the output dtype at the scale of the rotated "
        "pair, |x1| + |x2| (a float32 rotation rounds to a fraction of that; the CSV's `ulp_out` is the error in "
        "ulps at the output value itself, which an output near 0 by cancellation inflates to hundreds). "
        f"`{F32_ANGLES}` is no implementation: the same rotation with float32 angles and float32 cos/sin.",
        "",
    ]
    by = {(r["base"], r["variant"], r["dtype"], r["log2_pos"], r["impl"]): r for r in res.forward}
    keys = sorted({(r["base"], r["variant"], r["dtype"], r["log2_pos"]) for r in res.forward},
                  key=lambda t: (t[0], args.variants.index(t[1]), args.dtypes.index(t[2]), t[3]))
    rows = []
    for key in keys:
        cells = []
        for n in names:
            r = by.get((*key, n))
            cells.append(f"{_e(r['abs'])} / {_e(r['ulp_pair'], '.2f')}" if r else "")
        rows.append([_fmt_base(key[0]), key[1], key[2], str(key[3]), *cells])
    lines += markdown_table(["base", "variant", "dtype", "2^k", *names], rows, numeric_from=3)
    if os.environ.get("TRITON_INTERPRET") == "1" and args.device.type == "cpu" and "liger" in res.impls \
            and "bfloat16" in args.dtypes:
        lines += ["", "Under Triton's interpreter a float32 -> bfloat16 cast truncates instead of rounding to nearest: "
                      "this project's kernels emulate the rounding there, Liger's kernel does not, so its bfloat16 "
                      "errors here (1 ulp rather than 0.5) are the interpreter's; on a GPU its cast rounds to nearest."]
    lines += [
        "",
        "## 3. The relative-position property at large offsets",
        "",
        f"Random q, k (one head, float64 draws), s(m, n) = <R(m) q, R(n) k> summed in float64, n = {N0}, "
        f"m - n in {{{', '.join(map(str, GAPS))}}}. Each cell: max over the gaps of "
        "|s(m + o, n + o) - s(m, n)| / (||q|| ||k||), both scores in the column's arithmetic; ||q|| ||k|| is the "
        "largest |s| can be (a random s(m, n) can be near 0: the CSV's `rel_score` divides by |s(m, n)| "
        "instead, and `score64` is s(m, n)). **float64**: angles and rotation in float64; an implementation: "
        "float32 q, k through "
        f"`rope.build` (the float32 cache); **{F32_ANGLES}**: float32 angles and rotation.",
        "",
    ]
    arith = ["float64", *res.impls, F32_ANGLES]
    rel = {}
    for r in res.relpos:
        key = (r["base"], r["variant"], r["offset_log2"], r["arith"])
        rel[key] = max(rel.get(key, 0.0), r["rel"])
    keys = sorted({k[:3] for k in rel}, key=lambda t: (t[0], args.variants.index(t[1]), t[2]))
    rows = [[_fmt_base(b), v, str(o), *(_e(rel.get((b, v, o, a), math.nan)) for a in arith)] for b, v, o in keys]
    lines += markdown_table(["base", "variant", "o = 2^k", *arith], rows, numeric_from=3)
    lines += ["", "## Not measured", ""]
    if res.skipped:
        lines += [f"* `{n}`: {why}" for n, why in res.skipped.items()]
    else:
        lines += ["* nothing: every registered implementation ran."]
    lines += [
        "* GPU arithmetic: on a CPU these are torch's CPU cos/sin and Triton's interpreter (numpy); on a GPU the "
        "Triton kernels read the same float32 cache, but float32-angle code would use the GPU's own sin/cos "
        "(libdevice or the fast approximations), whose errors differ.",
    ]
    return "\n".join(lines) + "\n"


def write_outputs(args: argparse.Namespace, res: Results, command: str, seconds: float) -> Path:
    args.out.mkdir(parents=True, exist_ok=True)
    md = args.out / "position_precision.md"
    md.write_text(render_markdown(args, res, command, seconds))
    common = {"seed": args.seed, "head_dim": args.head_dim, "device": str(args.device)}
    rows = [{**common, **r} for r in (*res.tables, *res.forward, *res.relpos)]
    with open(args.out / "position_precision.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(dict.fromkeys(k for r in rows for k in r)), restval="")
        writer.writeheader()
        writer.writerows(rows)
    return md


def main(argv: list[str] | None = None) -> int:
    """Measure and write the md and csv; 0 on success, 2 on a bad option (before any work)."""
    args = parse_args(argv)
    if args.device.type == "cuda" and not torch.cuda.is_available():
        print(f"{PROG}: --device cuda: no CUDA GPU here", file=sys.stderr)
        return 2
    command = " ".join([PROG, *map(shlex.quote, sys.argv[1:] if argv is None else argv)])
    _log(f"seed={args.seed} (replay with --seed {args.seed})")
    t0 = time.perf_counter()
    res = run(args)
    seconds = time.perf_counter() - t0
    md = write_outputs(args, res, command, seconds)
    for name, why in res.skipped.items():
        _log(f"skipped {name}: {why}")
    print(f"wrote {md} and {md.with_suffix('.csv')} in {seconds:.0f} s")
    return 0


if __name__ == "__main__":
    run_main(main, "bench.precision")
