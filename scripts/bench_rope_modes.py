"""The sweeps of ``scripts/bench_rope.py`` (issue #13): head dims, layouts, packed sequences, host overhead.

Each mode times bf16 q and k against the device-to-device copy bandwidth measured in the same run
(bytes = q and k read once and written once; for ``rotary_dim < D`` the pass-through part counts
too, since it is copied), with the same :class:`~scripts.benchlib.Timer`, and writes a Markdown
table and a CSV (the head-dim sweep also a plot) under ``--out``:

* ``headdim_<N>`` (``--head-dims``): every head dim of ``--head-dim-list`` on (B, T, H, D) with B
  chosen so that each tensor has at least ``--elements`` elements; forward and backward of every
  implementation beside the compiled PyTorch reference and Liger-Kernel.
* ``layouts`` (``--layouts``): layout ``interleaved`` and ``rotary_dim`` D/2, D/4 (both layouts).
* ``packed`` (``--packed``): packed sequences through ``r(q, k, cu_seqlens=cu)`` against the same
  tokens with precomputed positions and without positions.
* ``overhead`` (``--overhead``): host time of the module call against the bare kernel launch at
  tiny shapes, host-bound loops.

The implementations (``impl``): the registry entries (``--ropes``; default every one but ``none``,
the eager ``torch`` and ``liger``), ``torch_compiled`` (``torch.compile`` of the ``torch`` entry)
and ``liger`` (Liger-Kernel's own kernels called natively, as a Hugging Face model calls them:
``scripts/liger_adapter.py``; the registry's ``liger`` entry wraps the same kernels behind copies
of its inputs, so it is not the peer here).

Backward = the transposed rotation of output gradients, timed alone: ``rotate_transposed`` for the
entries that have one (the Triton ones), the compiled ``torch`` entry with its sine table negated
(the transposed rotation: what its autograd backward computes, in one compiled graph) for
``torch_compiled``, and ``rope_backward`` for Liger; any other entry: forward+backward through
``torch.autograd.grad`` minus the forward. Every timed output is checked against the eager float32
reference (forward and autograd backward) in the same run; the CSVs have the differences.
"""

from __future__ import annotations

import math
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

import rope
from rope.base import RopeArgumentError, packed_positions
from scripts import liger_adapter
from scripts.benchlib import (
    FLUSHES,
    count_label,
    fmt,
    host_loop,
    launch_overrides,
    markdown_table,
    paired_host_loops,
    rope_names,
    write_csv,
)

COMPILED = "torch_compiled"
LIGER = liger_adapter.NAME
#: Every multiple of 8 from 16 to 256, plus 20, 36 and 52 (head dims whose half is not a multiple of 8).
DEFAULT_HEAD_DIMS = sorted(set(range(16, 257, 8)) | {20, 36, 52})
#: The head dims a time-limited run takes first (--all's 256M sweep): the rest follow while time is left.
PRIORITY_HEAD_DIMS = (16, 20, 32, 36, 48, 52, 64, 80, 96, 128, 160, 192, 224, 256)
LAYOUT_DIMS = (48, 64, 128)
#: (layout, rotary_dim as a fraction of D) of the layouts mode; the first row is the baseline.
LAYOUT_CASES = (("half", 1), ("interleaved", 1), ("half", 2), ("interleaved", 2), ("half", 4), ("interleaved", 4))
PACKED_TOKENS = (64 * 1024, 128 * 1024, 256 * 1024)
#: (B, T, H, D) under 1M elements: decoding a batch, a short prompt, one token, a small batch.
OVERHEAD_SHAPES = ((64, 1, 32, 128), (1, 128, 8, 64), (1, 1, 32, 128), (8, 16, 8, 64))
#: (minimum elements, target % of copy bandwidth): the issue's targets, the largest that applies.
TARGETS = ((256 * 2**20, 97.0), (32 * 2**20, 93.0))
OVERHEAD_TARGET_US = 10.0
#: A timed output further than this from the float32 reference is reported as wrong (bf16 inputs of
#: unit variance: one ulp is at most 2^-5 below 8, so correct kernels stay far below this).
MAX_DIFF = 0.25
#: A timed call whose host part took longer than this may not have been queued ahead of the GPU.
HOST_BOUND_MS = 1.5


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


@dataclass
class Bench:
    """What every mode shares: timer, device, the copy bandwidth, the compile wrapper, the time limit."""

    timer: object
    device: torch.device
    copy_bw: float
    compile_fn: Callable[[torch.nn.Module], Callable]
    variant: str = "partial"
    dtype: torch.dtype = torch.bfloat16
    deadline: float | None = None
    t0: float = field(default_factory=time.time)
    #: dtype of Liger's cos/sin tables (None: the inputs', Hugging Face's convention; Liger computes in it)
    liger_table_dtype: torch.dtype | None = None
    #: Input sets (fresh allocations of the same shape) each configuration is timed on; the median is kept. Why:
    #: on the H100 one kernel timed on different allocations of the same shape reads 1-2 points of copy bandwidth
    #: apart (docs/kernels.md, session 21), more than the differences the head-dim sweep is read for.
    placements: int = 1

    @property
    def liger_dtype(self) -> torch.dtype:
        return self.liger_table_dtype or self.dtype

    def out_of_time(self) -> bool:
        return self.deadline is not None and time.time() > self.deadline

    def log(self, msg: str) -> None:
        log(f"[{time.time() - self.t0:5.0f} s] {msg}")

    def randn(self, *shape: int) -> torch.Tensor:
        return torch.randn(*shape, device=self.device, dtype=self.dtype)

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize()

    def pct(self, nbytes: float, ms: float) -> tuple[float, float]:
        """(GB/s, % of the copy bandwidth) of ``nbytes`` moved in ``ms``."""
        gbps = nbytes / (ms * 1e-3) / 1e9 if ms > 0 else math.nan
        return gbps, 100 * gbps / self.copy_bw


# -- shapes ---------------------------------------------------------------------------------------
def batch_for(elements: int, T: int, H: int, D: int) -> int:
    """The smallest B for which a (B, T, H, D) tensor has at least ``elements`` elements."""
    return max(1, -(-elements // (T * H * D)))


def parse_dims(text: str | None, variant: str, default: Sequence[int] = DEFAULT_HEAD_DIMS) -> list[int]:
    """Head dims from ``16,24,...`` (or the default), checked for the variant: even, and a multiple
    of 4 for ``partial`` (D/4 frequencies). ``every``: each head dim the variant takes from 16 to 256,
    the issue's whole range (61 for partial, 121 for full)."""
    step = 4 if variant == "partial" else 2
    if str(text).strip() == "every":
        return list(range(16, 257, step))
    try:
        dims = default if not text else [int(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--head-dim-list takes comma-separated integers or 'every', got {text!r}") from None
    bad = [d for d in dims if d <= 0 or d % step]
    if bad:
        raise ValueError(f"head dims {bad} do not suit variant={variant!r}: every head dim must be "
                         f"{'a multiple of 4' if step == 4 else 'even'}")
    return list(dict.fromkeys(dims))


def priority_order(dims: Sequence[int], first: Sequence[int] = PRIORITY_HEAD_DIMS) -> list[int]:
    """``dims`` with those of ``first`` first (a time-limited run keeps a spread of head dims)."""
    head = [d for d in first if d in dims]
    return head + [d for d in dims if d not in head]


def target_pct(elements: int) -> float:
    """The issue's target (% of copy bandwidth) for tensors of ``elements`` elements (93 below 32M too)."""
    return next((pct for n, pct in TARGETS if elements >= n), TARGETS[-1][1])


def packed_lengths(total: int, max_len: int, seed: int = 0) -> list[int]:
    """Random sequence lengths in [1, max_len] (fixed seed) summing to ``total``."""
    g = torch.Generator().manual_seed(seed)
    lengths: list[int] = []
    left = total
    while left > 0:
        n = min(left, int(torch.randint(1, max_len + 1, (1,), generator=g)))
        lengths.append(n)
        left -= n
    return lengths


# -- the implementations --------------------------------------------------------------------------
@dataclass
class Impl:
    """One implementation as the modes call it: ``fwd(q, k, positions)`` and ``bwd(gq, gk, positions)``
    (the transposed rotation; None: timed as forward+backward through autograd minus the forward);
    ``call`` the module-like callable for the packed mode; ``inplace``: rotates its inputs in place."""

    name: str
    fwd: Callable
    bwd: Callable | None
    bwd_method: str
    call: Callable | None = None
    module: torch.nn.Module | None = None
    inplace: bool = False


def impl_names(ropes: str | None, device: torch.device, liger: bool = True,
               compiled: bool = True) -> tuple[list[str], list[str]]:
    """The implementations to time and notes on those left out: the registry entries (``ropes``, or
    every one but ``none``, the eager ``torch`` and ``liger``), then ``torch_compiled`` and ``liger``."""
    notes = []
    names = []
    for name in rope_names(ropes, skip=("none", "torch", LIGER)):
        if name == "none":
            continue
        if name == LIGER:  # the registry's entry: the same kernels behind input copies
            notes.append("the registry's liger entry is left out: Liger's kernels are timed natively as `liger`")
            continue
        reason = rope.get(launch_overrides(name)[0]).unavailable_reason(device)
        if reason:
            notes.append(f"{name} left out: {reason}")
        else:
            names.append(name)
    names.sort(key=lambda n: n != "triton_v4")  # the primary first, the rest in registry order
    if compiled:
        names.append(COMPILED)
    if liger:
        reason = liger_adapter.unavailable_reason(device)
        if reason:
            notes.append(reason)
        else:
            names.append(LIGER)
    return names, notes


def primary(names: Sequence[str]) -> str | None:
    """The implementation the target column judges: triton_v4 when timed, else the first entry."""
    if "triton_v4" in names:
        return "triton_v4"
    return next((n for n in names if n not in (COMPILED, LIGER)), None)


def build_options(variant: str, D: int, layout: str, rotary_dim: int | None) -> dict:
    """Build options, the defaults left out (an entry without a layout option still builds)."""
    opts: dict = {"variant": variant}
    if layout != "half":
        opts["layout"] = layout
    if rotary_dim not in (None, D):
        opts["rotary_dim"] = rotary_dim
    return opts


class EntrySpecError(ValueError):
    """``NAME@SPEC`` names launch settings its entry does not have."""


def build_entry(name: str, D: int, max_seq_len: int, device: torch.device | str, **opts) -> torch.nn.Module:
    """The registry entry ``NAME@SPEC`` built (``rope.build`` options ``opts``) with SPEC's launch settings
    (:func:`scripts.benchlib.launch_overrides`) in its ``launch_config``: the one place a spec reaches a module,
    for every mode. Raises :class:`EntrySpecError` naming the entry when SPEC is given to one without them."""
    base, overrides = launch_overrides(name)
    mod = rope.build(base, D, max_seq_len, **opts).to(device)
    if overrides:
        if not hasattr(mod, "launch_config"):
            raise EntrySpecError(f"{name}: {base} has no launch configuration to override")
        mod.launch_config = replace(mod.launch_config, **overrides)
    return mod


def build_impl(bench: Bench, name: str, D: int, max_seq_len: int, layout: str = "half",
               rotary_dim: int | None = None) -> Impl | str:
    """``name`` built for one configuration, or a one-line reason why it cannot run it."""
    opts = build_options(bench.variant, D, layout, rotary_dim)
    try:
        if name == LIGER:
            reason = liger_adapter.unavailable_reason(bench.device)
            if reason:
                return reason
            if layout != "half" or rotary_dim not in (None, D):
                return "liger: half layout and whole-head rotation only"
            native = liger_adapter.LigerNative(rope.build("torch", D, max_seq_len, **opts).to(bench.device),
                                               dtype=bench.liger_dtype)
            return Impl(LIGER, lambda q, k, positions=None: native.forward(q, k),
                        lambda gq, gk, positions=None: native.backward(gq, gk), "liger rope_backward (in place)",
                        inplace=True)
        if name == COMPILED:
            fwd_mod = rope.build("torch", D, max_seq_len, **opts).to(bench.device)
            inv_mod = rope.build("torch", D, max_seq_len, **opts).to(bench.device)
            inv_mod.sin.neg_()  # the transposed rotation: the backward's arithmetic
            cf, ci = bench.compile_fn(fwd_mod), bench.compile_fn(inv_mod)
            return Impl(COMPILED, lambda q, k, positions=None: cf(q, k, positions=positions),
                        lambda gq, gk, positions=None: ci(gq, gk, positions=positions),
                        "compiled transposed rotation (sin negated)", call=cf, module=fwd_mod)
        reason = rope.get(launch_overrides(name)[0]).unavailable_reason(bench.device)
        if reason:
            return f"{name}: {reason}"
        mod = build_entry(name, D, max_seq_len, bench.device, **opts)
    except RopeArgumentError as exc:
        return f"{name}: {exc}"
    except EntrySpecError as exc:
        return str(exc)
    bwd = None
    if hasattr(mod, "rotate_transposed"):
        bwd = lambda gq, gk, positions=None: mod.rotate_transposed(gq, gk, positions)  # noqa: E731
    return Impl(name, lambda q, k, positions=None: mod(q, k, positions=positions), bwd,
                "backward kernel (rotate_transposed)" if bwd else "autograd fwd+bwd - fwd", call=mod, module=mod)


def build_impls(bench: Bench, names: Sequence[str], D: int, max_seq_len: int, layout: str = "half",
                rotary_dim: int | None = None) -> tuple[list[Impl], dict[str, str]]:
    impls, skipped = [], {}
    for name in names:
        got = build_impl(bench, name, D, max_seq_len, layout, rotary_dim)
        if isinstance(got, str):
            skipped[name] = got
        else:
            impls.append(got)
    return impls, skipped


def reset_compiled() -> None:
    """Drop the compiled graphs of the configuration just measured (their guards would pile up)."""
    torch._dynamo.reset()


# -- timing ---------------------------------------------------------------------------------------
def _inputs(impl: Impl, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return tuple(t.clone() for t in tensors) if impl.inplace else tensors


def warm(bench: Bench, impl: Impl, q, k, gq, gk, positions=None) -> None:
    """One forward and one backward (compiles kernels and graphs)."""
    q, k, gq, gk = _inputs(impl, q, k, gq, gk)
    impl.fwd(q, k, positions)
    if impl.bwd is not None:
        impl.bwd(gq, gk, positions)
    else:
        qg, kg = q.detach().clone().requires_grad_(), k.detach().clone().requires_grad_()
        torch.autograd.grad(impl.fwd(qg, kg, positions), (qg, kg), (gq, gk))
    bench.sync()


def time_pair(bench: Bench, impl: Impl, q, k, gq, gk, positions=None) -> dict:
    """Forward and backward milliseconds of ``impl`` (and the host time of one call of each)."""
    q, k, gq, gk = _inputs(impl, q, k, gq, gk)
    timer = bench.timer
    fwd = timer(lambda: impl.fwd(q, k, positions))
    fwd_host = timer.last_host_ms
    if impl.bwd is not None:
        bwd = timer(lambda: impl.bwd(gq, gk, positions))
    else:
        qg, kg = q.detach().clone().requires_grad_(), k.detach().clone().requires_grad_()
        bwd = timer(lambda: torch.autograd.grad(impl.fwd(qg, kg, positions), (qg, kg), (gq, gk))) - fwd
    return {"fwd_ms": fwd, "bwd_ms": bwd, "fwd_host_ms": fwd_host, "bwd_host_ms": timer.last_host_ms}


def _median_times(per_set: Sequence[dict]) -> dict:
    """:func:`time_pair`'s results over several input sets: the median of each time (the host times the first
    set's)."""
    return {**per_set[0], **{key: statistics.median(t[key] for t in per_set) for key in ("fwd_ms", "bwd_ms")}}


def max_diff(got: Sequence[torch.Tensor], want: Sequence[torch.Tensor]) -> float:
    return max((a.float() - b.float()).abs().max().item() for a, b in zip(got, want, strict=True))


def _error(exc: Exception) -> str:
    return f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:200]}"


def check_outputs(bench: Bench, impls: Sequence[Impl], D: int, max_seq_len: int, layout: str,
                  rotary_dim: int | None, q, k, gq, gk) -> dict[str, tuple[float, float]]:
    """impl -> (max |forward - reference|, max |backward - reference|), the reference being the
    eager float32 ``torch`` entry (its autograd gradient for the backward), on the timed tensors;
    NaN where an implementation failed (its timing then fails too, and says why)."""
    ref = rope.build("torch", D, max_seq_len, **build_options(bench.variant, D, layout, rotary_dim)).to(bench.device)
    with torch.no_grad():
        want_f = ref(q, k)
    qg, kg = q.detach().clone().requires_grad_(), k.detach().clone().requires_grad_()
    want_b = torch.autograd.grad(ref(qg, kg), (qg, kg), (gq, gk))
    del qg, kg
    out = {}
    for impl in impls:
        qi, ki, gqi, gki = _inputs(impl, q, k, gq, gk)
        try:
            # grad mode as in the timed calls (no no_grad here: it would recompile the compiled entries)
            df = max_diff(impl.fwd(qi, ki), want_f)
            if impl.bwd is not None:
                db = max_diff(impl.bwd(gqi, gki), want_b)
            else:
                qg, kg = qi.detach().clone().requires_grad_(), ki.detach().clone().requires_grad_()
                db = max_diff(torch.autograd.grad(impl.fwd(qg, kg), (qg, kg), (gqi, gki)), want_b)
        except Exception:
            df = db = math.nan
        out[impl.name] = (df, db)
    return out


#: First compile of the process done: the compiler's worker pool, started by it, has had time to settle.
_SETTLED = {"done": False}


def measure_config(bench: Bench, names: Sequence[str], B: int, T: int, H: int, D: int, layout: str = "half",
                   rotary_dim: int | None = None) -> tuple[list[dict], dict[str, str], float]:
    """Rows (one per implementation) of one (B, T, H, D, layout, rotary_dim) configuration, the
    implementations skipped or failed (name -> reason) and the seconds spent building and compiling.
    An implementation failing (a kernel that does not compile for this shape, say) is reported, not fatal."""
    t = time.time()
    q, k, gq, gk = (bench.randn(B, T, H, D) for _ in range(4))
    built, skipped = build_impls(bench, names, D, T, layout, rotary_dim)
    impls = []
    for impl in built:
        try:
            warm(bench, impl, q, k, gq, gk)
            impls.append(impl)
        except Exception as exc:
            skipped[impl.name] = f"failed at D={D} ({layout}, rotary_dim={rotary_dim or D}): {_error(exc)}"
    compile_s = time.time() - t
    if not _SETTLED["done"] and bench.device.type == "cuda":
        time.sleep(3)  # the first compile starts the compiler's worker processes: let them settle
        _SETTLED["done"] = True
    nbytes = 2 * (q.numel() + k.numel()) * q.element_size()
    diffs = check_outputs(bench, impls, D, T, layout, rotary_dim, q, k, gq, gk)
    sets = [(q, k, gq, gk)] + [tuple(bench.randn(B, T, H, D) for _ in range(4)) for _ in range(bench.placements - 1)]
    rows = []
    for impl in impls:
        try:
            per_set = [time_pair(bench, impl, *inputs) for inputs in sets]
        except Exception as exc:
            skipped[impl.name] = f"timing failed at D={D} ({layout}, rotary_dim={rotary_dim or D}): {_error(exc)}"
            continue
        r = {"impl": impl.name, "B": B, "T": T, "H": H, "D": D, "elements": q.numel(), "layout": layout,
             "rotary_dim": rotary_dim or D, "variant": bench.variant, **_median_times(per_set)}
        r["fwd_GBps"], r["fwd_pct_copy"] = bench.pct(nbytes, r["fwd_ms"])
        r["bwd_GBps"], r["bwd_pct_copy"] = bench.pct(nbytes, r["bwd_ms"])
        r["max_diff_fwd"], r["max_diff_bwd"] = diffs[impl.name]
        r["bwd_method"] = impl.bwd_method
        if len(sets) > 1:  # the spread over the input sets: the slowest one's % of copy bandwidth
            r["fwd_pct_copy_lowest"] = bench.pct(nbytes, max(t["fwd_ms"] for t in per_set))[1]
            r["bwd_pct_copy_lowest"] = bench.pct(nbytes, max(t["bwd_ms"] for t in per_set))[1]
        rows.append(r)
    del q, k, gq, gk, impls, built, sets
    reset_compiled()
    return rows, skipped, compile_s


def _summary(rows: Sequence[dict]) -> str:
    return "  ".join(f"{r['impl']} {r['fwd_pct_copy']:.1f}/{r['bwd_pct_copy']:.1f}%" for r in rows)


# -- mode 1: head dims ----------------------------------------------------------------------------
@dataclass
class Result:
    """A mode's rows, its notes (skipped work, left-out implementations) and its Markdown."""

    name: str
    rows: list[dict]
    notes: list[str]
    markdown: str = ""


def add_skips(notes: list[str], skipped: dict[str, str], where: str) -> None:
    for name, reason in skipped.items():
        line = f"{name} not timed ({where}): {reason}"
        if line not in notes:
            notes.append(line)


def run_headdim(bench: Bench, names: Sequence[str], dims: Sequence[int], elements: int, T: int = 2048,
                H: int = 16, progress: Callable[[Result], None] | None = None) -> Result:
    """Rows of every head dim (in the order given; the table sorts them) at ``elements`` per tensor;
    ``progress`` gets the result so far after each head dim (the caller writes it: a run cut off
    keeps what it measured)."""
    rows, notes = [], []
    tag = count_label(elements)
    order = list(names)
    for i, D in enumerate(dims):
        if bench.out_of_time():
            notes.append(f"not measured, out of time (--budget-s): head_dim {', '.join(map(str, dims[i:]))}")
            break
        B = batch_for(elements, T, H, D)
        got, skipped, compile_s = measure_config(bench, names, B, T, H, D)
        add_skips(notes, {n: r for n, r in skipped.items()}, "head-dim sweep")
        rows += got
        rows.sort(key=lambda r: (r["D"], order.index(r["impl"])))
        bench.log(f"head_dim {tag} D={D} B={B} (build+compile {compile_s:.1f} s): fwd/bwd % copy  {_summary(got)}")
        if progress is not None:
            progress(Result(f"headdim_{tag}", rows, notes))
    return Result(f"headdim_{tag}", rows, notes)


def _pivot(rows: Sequence[dict], keys: Sequence[tuple[str, str, str]], names: Sequence[str],
           cells: Sequence[tuple[str, str, str]], extra: Callable[[list[dict]], list[str]] | None = None,
           extra_headers: Sequence[str] = ()) -> list[str]:
    """A table with one line per distinct ``keys`` value and, per implementation, the ``cells``
    (header suffix, row key, format); ``extra`` adds cells computed from the line's rows."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault(tuple(r[k] for _, k, _ in keys), []).append(r)
    columns = [(n, h, c, f) for n in names for h, c, f in cells
               if any(r["impl"] == n and r.get(c) is not None for r in rows)]  # no empty columns
    headers = [h for h, _, _ in keys] + [f"{n} {h}" for n, h, _, _ in columns] + list(extra_headers)
    body = []
    for key, grp in groups.items():
        by = {r["impl"]: r for r in grp}
        line = [fmt(v, f) if f else str(v) for v, (_, _, f) in zip(key, keys, strict=True)]
        line += [fmt(by[n].get(c), f) if n in by else "" for n, _, c, f in columns]
        body.append(line + (extra(grp) if extra else []))
    return markdown_table(headers, body, len(keys))


def judge(grp: Sequence[dict], key: str, threshold: float, main: str | None) -> str:
    """The target cell of one line: the primary implementation at or above ``threshold`` % and at or
    above Liger's (when Liger was timed)."""
    by = {r["impl"]: r for r in grp}
    if main not in by or not math.isfinite(by[main][key]):
        return ""
    v = by[main][key]
    fails = []
    if v < threshold:
        fails.append(f"<{threshold:g}%")
    if LIGER in by and math.isfinite(by[LIGER][key]) and v < by[LIGER][key]:
        fails.append("<liger")
    return "ok" if not fails else "MISS " + " ".join(fails)


def _bwd_methods(rows: Sequence[dict]) -> str:
    methods = dict.fromkeys(f"{r['impl']}: {r['bwd_method']}" for r in rows)
    return "; ".join(methods)


def _diff_line(rows: Sequence[dict]) -> list[str]:
    worst: dict[str, list[float]] = {}
    for r in rows:
        w = worst.setdefault(r["impl"], [0.0, 0.0])
        w[0], w[1] = max(w[0], r["max_diff_fwd"]), max(w[1], r["max_diff_bwd"])
    parts = [f"{n} {f:.3g}/{b:.3g}" for n, (f, b) in worst.items()]
    lines = ["Outputs checked against the eager float32 `torch` reference (its autograd gradient for the backward)"
             f" on the timed tensors, max |diff| fwd/bwd: {', '.join(parts)}."]
    bad = [n for n, (f, b) in worst.items() if not (f <= MAX_DIFF and b <= MAX_DIFF)]
    if bad:
        lines.append(f"**WRONG OUTPUTS** (max |diff| > {MAX_DIFF}): {', '.join(bad)}: their timings do not count.")
    slow = [f"{r['impl']} D={r['D']}" for r in rows
            if max(r.get("fwd_host_ms", 0.0), r.get("bwd_host_ms", 0.0)) > HOST_BOUND_MS]
    if slow:
        lines.append(f"Host time of one call above {HOST_BOUND_MS} ms (the timer queues calls behind a ~2 ms GPU"
                     f" sleep, so these may be host-bound): {', '.join(slow)}.")
    return lines


def _notes(notes: Sequence[str]) -> list[str]:
    return ["", *(f"- {n}" for n in notes)] if notes else []


def header_lines(title: str, bench_info: dict, extra: Sequence[str] = (), placements: int = 1) -> list[str]:
    """A mode's title and the run's conditions; ``placements``: the input sets each configuration was timed on (the
    head-dim and layout modes, :attr:`Bench.placements`; the others time one)."""
    return [f"## {title}", "",
            f"{bench_info['device_name']}, bf16, variant={bench_info['variant']}; copy bandwidth measured in this run"
            f" (1 GiB `copy_`): **{bench_info['copy_bw']:.0f} GB/s**. Bytes = q and k read once and written once"
            " (the pass-through part of rotary_dim < D included). Timer: lower of two medians of"
            f" {bench_info['reps']} reps, L2 flushed before each ({_flush_note(bench_info)})"
            + _placements_note(placements) + "." + _rules_note(bench_info), *extra, ""]


def _rules_note(bench_info: dict) -> str:
    rules = bench_info.get("launch_rules")
    return f" Triton launch rules: {rules}'s (`rope.triton_rope.GPU_PROFILES`)." if rules else ""


def _flush_note(bench_info: dict) -> str:
    mode = bench_info.get("flush", "zero")
    return f"`--flush {mode}`: {FLUSHES[mode]}"


def _placements_note(placements: int) -> str:
    return (f"; each configuration timed on {placements} input sets (fresh allocations), the median kept (the"
            " slowest set in the CSV's `*_lowest` columns)" if placements > 1 else "")


def headdim_markdown(res: Result, names: Sequence[str], elements: int, T: int, H: int, info: dict) -> str:
    threshold = target_pct(elements)
    main = primary(names)
    keys = [("D", "D", ""), ("B", "B", "")]
    cells = [("ms", "fwd_ms", ".4f"), ("%copy", "fwd_pct_copy", ".1f")]
    bcells = [("ms", "bwd_ms", ".4f"), ("%copy", "bwd_pct_copy", ".1f")]
    target_h = [f"target ({main} >= {threshold:g}% and >= liger)"] if main else []
    lines = header_lines(
        f"Head-dim sweep: q, k of (B, T={T}, H={H}, D), each >= {count_label(elements)} elements", info,
        [f"Backward: {_bwd_methods(res.rows)}. Liger: `rope_forward`/`rope_backward` on (B, T, H, D)-contiguous"
         " buffers seen as (B, H, T, D) (its zero-copy input, rotated in place), Hugging Face tables (1, T, D) in"
         f" {str(info.get('liger_tables', 'bfloat16')).replace('torch.', '')} with the sine negated (our"
         " rotation's sign; Liger computes in the tables' dtype)."], info.get("placements", 1))
    lines += ["### Forward", ""]
    lines += _pivot(res.rows, keys, names, cells, lambda g: [judge(g, "fwd_pct_copy", threshold, main)], target_h)
    lines += ["", "### Backward", ""]
    lines += _pivot(res.rows, keys, names, bcells, lambda g: [judge(g, "bwd_pct_copy", threshold, main)], target_h)
    lines += ["", *_minimum_lines(res.rows, names), "", *_diff_line(res.rows), *_notes(res.notes)]
    return "\n".join(lines) + "\n"


def _minimum_lines(rows: Sequence[dict], names: Sequence[str]) -> list[str]:
    out = ["Lowest % of copy bandwidth over the head dims (fwd / bwd):"]
    for n in names:
        mine = [r for r in rows if r["impl"] == n]
        if mine:
            f = min(mine, key=lambda r: r["fwd_pct_copy"])
            b = min(mine, key=lambda r: r["bwd_pct_copy"])
            out.append(f"- {n}: {f['fwd_pct_copy']:.1f} (D={f['D']}) / {b['bwd_pct_copy']:.1f} (D={b['D']})")
    return out


def headdim_plot(rows: Sequence[dict], names: Sequence[str], path: Path, elements: int, T: int, H: int,
                 info: dict) -> None:
    """% of copy bandwidth against head_dim, one line per implementation, forward and backward panels."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8), sharey=True)
    for ax, key, title in ((axes[0], "fwd_pct_copy", "forward"), (axes[1], "bwd_pct_copy", "backward")):
        for n in names:
            pts = sorted((r["D"], r[key]) for r in rows if r["impl"] == n)
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", markersize=3, label=n)
        for pct, style in ((93.0, "--"), (97.0, ":")):
            ax.axhline(pct, color="gray", linestyle=style, linewidth=1, label=f"{pct:g}% of copy")
        ax.set_xlabel("head_dim")
        ax.set_title(f"RoPE {title}: (B, {T}, {H}, D) bf16, >= {count_label(elements)} elements/tensor")
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel(f"% of copy bandwidth ({info['copy_bw']:.0f} GB/s)")
    axes[1].legend(fontsize=8, loc="lower right")
    fig.suptitle(f"{info['device_name']}, variant={info['variant']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# -- mode 2: layouts and rotary_dim ---------------------------------------------------------------
def run_layouts(bench: Bench, names: Sequence[str], dims: Sequence[int], elements: int, T: int = 2048,
                H: int = 16) -> Result:
    rows, notes = [], []
    for D in dims:
        for layout, frac in LAYOUT_CASES:
            R = D // frac
            if bench.out_of_time():
                notes.append(f"not measured, out of time (--budget-s): D={D} layout={layout} rotary_dim={R}")
                continue
            try:
                rope.check_args("torch", D, T, **build_options(bench.variant, D, layout, R))
            except RopeArgumentError as exc:
                notes.append(f"D={D} layout={layout} rotary_dim={R} not measured: {exc}")
                continue
            B = batch_for(elements, T, H, D)
            got, skipped, _ = measure_config(bench, names, B, T, H, D, layout, R)
            add_skips(notes, skipped, "layouts")
            rows += got
            bench.log(f"layouts D={D} {layout} rotary_dim={R}: fwd/bwd % copy  {_summary(got)}")
    return Result("layouts", rows, notes)


def layouts_markdown(res: Result, names: Sequence[str], elements: int, T: int, H: int, info: dict) -> str:
    main = primary(names)
    threshold = target_pct(elements)
    keys = [("D", "D", ""), ("layout", "layout", ""), ("rotary_dim", "rotary_dim", ""), ("B", "B", "")]
    cells = [("fwd %copy", "fwd_pct_copy", ".1f"), ("bwd %copy", "bwd_pct_copy", ".1f")]
    extra_h = [f"{main} fwd ms", f"{main} bwd ms", f"target ({main} >= {threshold:g}%, fwd / bwd)"] if main else []

    def extra(grp: list[dict]) -> list[str]:
        if not main:
            return []
        by = {r["impl"]: r for r in grp}
        r = by.get(main)
        return [fmt(r["fwd_ms"], ".4f") if r else "", fmt(r["bwd_ms"], ".4f") if r else "",
                f"{judge(grp, 'fwd_pct_copy', threshold, main)} / {judge(grp, 'bwd_pct_copy', threshold, main)}"]

    lines = header_lines(f"Layouts and rotary_dim: q, k of (B, T={T}, H={H}, D), each >= {count_label(elements)}"
                         " elements", info,
                         [f"Backward: {_bwd_methods(res.rows)}. Liger only where it computes the same function"
                          " (half layout, whole head)."], info.get("placements", 1))
    lines += _pivot(res.rows, keys, names, cells, extra, extra_h)
    lines += ["", *_diff_line(res.rows), *_notes(res.notes)] if res.rows else _notes(res.notes)
    return "\n".join(lines) + "\n"


# -- mode 3: packed sequences ---------------------------------------------------------------------
def run_packed(bench: Bench, names: Sequence[str], totals: Sequence[int], H: int = 16, D: int = 128,
               max_len: int = 4096, plain_T: int = 2048) -> Result:
    """Packed sequences of random lengths (fixed seed): the module call with ``cu_seqlens`` (its
    position computation included) against the same tokens with precomputed positions and as
    (total / plain_T, plain_T, H, D) without positions; backward with the packed positions and without."""
    rows = []
    notes = ["liger has no packed-sequence (cu_seqlens) entry point: not timed here"] if LIGER in names else []
    names = [n for n in names if n != LIGER]
    for total in totals:
        if bench.out_of_time():
            notes.append(f"not measured, out of time (--budget-s): total_tokens {total}")
            continue
        rows += _packed_one(bench, names, total, H, D, max_len, plain_T, notes)
        reset_compiled()
    return Result("packed", rows, notes)


def _packed_one(bench: Bench, names: Sequence[str], total: int, H: int, D: int, max_len: int, plain_T: int,
                notes: list[str]) -> list[dict]:
    lengths = packed_lengths(total, max_len)
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device=bench.device)
    pos = packed_positions(cu, total, max_len, device=bench.device)
    q, k, gq, gk = (bench.randn(total, H, D) for _ in range(4))
    T0 = plain_T if total % plain_T == 0 else total
    qb, kb, gqb, gkb = (x.view(total // T0, T0, H, D) for x in (q, k, gq, gk))
    max_seq_len = max(max_len, T0)
    impls, skipped = build_impls(bench, names, D, max_seq_len)
    add_skips(notes, skipped, "packed")
    nbytes = 2 * (q.numel() + k.numel()) * q.element_size()
    ref_mod = rope.build("torch", D, max_seq_len, variant=bench.variant).to(bench.device)
    with torch.no_grad():
        ref = ref_mod(q[None], k[None], positions=pos)
    rows = []
    for impl in impls:
        cases = {
            "fwd_cu": lambda: impl.call(q, k, cu_seqlens=cu),  # noqa: B023
            "fwd_cu_new": lambda: impl.call(q, k, cu_seqlens=cu.clone()),  # noqa: B023
            "fwd_pos": lambda: impl.fwd(q[None], k[None], pos),  # noqa: B023
            "fwd_plain": lambda: impl.fwd(qb, kb),  # noqa: B023
        }
        if impl.bwd is not None:
            cases["bwd_pos"] = lambda: impl.bwd(gq[None], gk[None], pos)  # noqa: B023
            cases["bwd_plain"] = lambda: impl.bwd(gqb, gkb)  # noqa: B023
        r = {"impl": impl.name, "total_tokens": total, "n_seq": len(lengths), "H": H, "D": D,
             "elements": q.numel(), "variant": bench.variant, "max_diff_cu_fwd": math.nan}
        for key, fn in cases.items():
            try:
                got = fn()  # compiles; then checked (the cu_seqlens call) and timed
                bench.sync()
                if key == "fwd_cu":
                    r["max_diff_cu_fwd"] = max_diff([g[None] for g in got], ref)
                del got
                r[f"{key}_ms"] = bench.timer(fn)
            except Exception as exc:  # a path an entry cannot take: recorded, not fatal
                r[f"{key}_ms"] = math.nan
                notes.append(f"{impl.name} {key} at {total} tokens failed: {type(exc).__name__}: "
                             f"{(str(exc).splitlines() or [''])[0][:200]}")
            r[f"{key}_GBps"], r[f"{key}_pct_copy"] = bench.pct(nbytes, r[f"{key}_ms"])
        r["cu_overhead_us"] = 1e3 * (r["fwd_cu_ms"] - r["fwd_pos_ms"])
        r["cu_new_overhead_us"] = 1e3 * (r["fwd_cu_new_ms"] - r["fwd_pos_ms"])
        rows.append(r)
        bench.log(f"packed {total} tokens ({len(lengths)} sequences) {impl.name}: fwd cu/pos/plain "
                  f"{r['fwd_cu_pct_copy']:.1f}/{r['fwd_pos_pct_copy']:.1f}/{r['fwd_plain_pct_copy']:.1f}% copy, "
                  f"bwd pos {r.get('bwd_pos_pct_copy', math.nan):.1f}%")
    return rows


def packed_markdown(res: Result, names: Sequence[str], H: int, D: int, max_len: int, info: dict) -> str:
    main = primary(names)
    threshold = 93.0
    headers = ["total tokens", "sequences", "impl", "fwd cu ms", "fwd cu %copy", "fwd pos %copy", "fwd plain %copy",
               "cu cost us", "new cu cost us", "bwd pos ms", "bwd pos %copy", "bwd plain %copy",
               "target (fwd cu, bwd >= 93%)", "max diff"]
    body = []
    for r in res.rows:
        ok = ""
        if r["impl"] == main:
            fails = [k for k in ("fwd_cu_pct_copy", "bwd_pos_pct_copy") if not r.get(k, math.nan) >= threshold]
            ok = "ok" if not fails else "MISS " + ", ".join(fails)
        body.append([str(r["total_tokens"]), str(r["n_seq"]), r["impl"], fmt(r["fwd_cu_ms"], ".4f"),
                     fmt(r["fwd_cu_pct_copy"], ".1f"), fmt(r["fwd_pos_pct_copy"], ".1f"),
                     fmt(r["fwd_plain_pct_copy"], ".1f"), fmt(r["cu_overhead_us"], ".1f"),
                     fmt(r.get("cu_new_overhead_us"), ".1f"),
                     fmt(r.get("bwd_pos_ms"), ".4f"), fmt(r.get("bwd_pos_pct_copy"), ".1f"),
                     fmt(r.get("bwd_plain_pct_copy"), ".1f"), ok, fmt(r["max_diff_cu_fwd"], ".3g")])
    lines = header_lines(
        f"Packed sequences (cu_seqlens): q, k of (total_tokens, H={H}, D={D}), random lengths in [1, {max_len}]",
        info,
        ["`fwd cu` = the module call `r(q, k, cu_seqlens=cu)` again with the same `cu` (as the layers of a"
         " step call it: the positions computed and checked once per cu_seqlens tensor are reused);"
         " `new cu cost` = a call with a new cu_seqlens tensor each time (the first layer of a step: the"
         " positions computed and the host-device synchronisation that checks them), less fwd pos;"
         " `fwd pos` = the same tokens with the positions precomputed"
         " (`r(q[None], k[None], positions=pos)`); `plain` = the same tensors as (total/2048, 2048, H, D)"
         " without positions; `cu cost` = fwd cu - fwd pos. Backward (the gradient of a packed forward uses"
         " the saved positions): the transposed rotation with the packed positions (`pos`) and without"
         " (`plain`). `max diff`: the cu_seqlens output against the float32 reference."])
    lines += markdown_table(headers, body, 3)
    bad = sorted({r["impl"] for r in res.rows if not r["max_diff_cu_fwd"] <= MAX_DIFF})
    if bad:
        lines += ["", f"**WRONG OR UNCHECKED OUTPUTS** (max |diff| > {MAX_DIFF} or not computed): {', '.join(bad)}."]
    lines += _notes(res.notes)
    return "\n".join(lines) + "\n"


# -- mode 4: host overhead at tiny shapes ---------------------------------------------------------
def bare_launcher(mod) -> Callable | None:
    """For an entry launching through ``rope.triton_rope``: ``prepare(q, k, positions)`` -> the bare kernel launch
    of the module's call on those tensors, as a closure: its two outputs allocated and Triton's own launch
    (``rope_kernel[grid](...)``) with the arguments worked out beforehand (the module's :func:`launch_plan`), so
    that everything the module call does beyond that is what "call - launch" counts. None for other entries."""
    from rope import triton_rope

    if not (isinstance(mod, torch.nn.Module) and type(mod).__module__ == triton_rope.__name__
            and hasattr(mod, "launch_config") and hasattr(mod, "low_precision")):
        return None

    def prepare(q, k, positions=None) -> Callable[[], tuple]:
        cos, sin = mod.cos, mod.sin
        partial = getattr(mod, "_partial_shortcut", mod.variant == "partial")
        plan = triton_rope.launch_plan(q, k, cos, sin, positions, partial, mod.low_precision,
                                       False, interleaved=mod.layout == "interleaved", config=mod.launch_config)

        def go():
            out_q, out_k = torch.empty_like(q), torch.empty_like(k)
            plan.triton_launch(plan.tensors(q, k, out_q, out_k, positions, cos, sin))
            return out_q, out_k

        return go

    return prepare


class _EmptyFunction(torch.autograd.Function):
    """An autograd Function that only allocates its two outputs: what any kernel pays to join autograd."""

    @staticmethod
    def forward(ctx, q, k):
        return torch.empty_like(q), torch.empty_like(k)

    @staticmethod
    def backward(ctx, gq, gk):
        return gq, gk


def autograd_floor(q: torch.Tensor, k: torch.Tensor, calls: int, repeats: int, device) -> dict:
    """Host microseconds an empty autograd Function of (q, k) adds to allocating its two outputs, in paired
    loops: the floor under "call - launch" with grad for any kernel behind ``autograd.Function`` (the
    module's, Liger's), measured beside it because hosts differ severalfold."""
    return paired_host_loops(lambda: _EmptyFunction.apply(q, k), lambda: (torch.empty_like(q), torch.empty_like(k)),
                             calls, repeats, device)


def run_overhead(bench: Bench, names: Sequence[str], shapes: Sequence[tuple[int, int, int, int]],
                 calls: int = 200, repeats: int = 7, max_seq_len: int = 2048) -> Result:
    """Per-call host time of the module call and of the bare launch in host-bound loops."""
    rows, notes = [], []
    entries = [n for n in names if n not in (COMPILED, LIGER)] + ["torch"] + [n for n in names if n == LIGER]
    for B, T, H, D in shapes:
        q0, k0 = bench.randn(B, T, H, D), bench.randn(B, T, H, D)
        positions = ((torch.arange(T, device=bench.device) + 7) % max_seq_len).expand(B, T).contiguous()
        callers: dict[str, tuple[object, Callable | None]] = {}
        for name in entries:
            if name == LIGER:
                native = liger_adapter.LigerNative(rope.build("torch", D, max_seq_len, variant=bench.variant)
                                                   .to(bench.device), dtype=bench.liger_dtype)
                callers[name] = (native, None)
            else:
                try:
                    mod = build_entry(name, D, max_seq_len, bench.device, variant=bench.variant)
                except EntrySpecError as exc:
                    notes.append(str(exc))
                    continue
                callers[name] = (mod, bare_launcher(mod))
        for pos_kind in ("none", "(B,T) int64"):
            pos = None if pos_kind == "none" else positions
            for grad in (False, True):
                q = q0.detach().clone().requires_grad_(grad)
                k = k0.detach().clone().requires_grad_(grad)
                for name, (mod, bare) in callers.items():
                    r = {"shape": f"{B}x{T}x{H}x{D}", "elements": q.numel(), "positions": pos_kind,
                         "grad": "requires_grad" if grad else "no_grad", "impl": name}
                    try:
                        call = _overhead_call(name, mod, q, k, pos, grad)
                        launch = bare(q, k, pos) if bare else None
                        with torch.set_grad_enabled(grad):
                            m = host_loop(call, calls, repeats, bench.device)
                            b = host_loop(launch, calls, repeats, bench.device) if bare else None
                            paired = paired_host_loops(call, launch, calls, 3 * repeats, bench.device) if bare else None
                    except Exception as exc:  # e.g. liger refusing a leaf that requires grad: noted, not fatal
                        notes.append(f"{name} {r['shape']} positions={pos_kind} {r['grad']} failed: "
                                     f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
                        continue
                    r.update({"call_host_us": m["host_us"], "call_host_us_min": m["host_us_min"],
                              "call_wall_us": m["wall_us"], "call_gpu_us": m["gpu_us"]})
                    if b:
                        r.update({"launch_host_us": b["host_us"], "launch_host_us_min": b["host_us_min"],
                                  "launch_wall_us": b["wall_us"], "launch_gpu_us": b["gpu_us"],
                                  "call_minus_launch_us": paired["diff_us"],
                                  "call_minus_launch_q1_us": paired["diff_q1_us"],
                                  "call_minus_launch_q3_us": paired["diff_q3_us"]})
                    if grad and b:
                        with torch.enable_grad():
                            floor = autograd_floor(q, k, calls, 3 * repeats, bench.device)
                        r["autograd_floor_us"] = floor["diff_us"]
                    rows.append(r)
        mains = [r for r in rows if r["shape"] == f"{B}x{T}x{H}x{D}" and "call_minus_launch_us" in r]
        bench.log(f"overhead {B}x{T}x{H}x{D}: call - launch us "
                  + " ".join(f"{r['impl']}/{r['positions'][:4]}/{r['grad'][:2]} {r['call_minus_launch_us']:.1f}"
                             for r in mains))
    return Result("overhead", rows, notes)


def _overhead_call(name: str, mod, q, k, pos, grad: bool) -> Callable:
    """The call the overhead mode times for ``name``: the module call, or Liger's own entry point
    (``rope_forward`` without grad, ``LigerRopeFunction`` with; tables gathered outside the call)."""
    if name != LIGER:
        return lambda: mod(q, k, positions=pos)
    cos, sin = mod.tables(q.shape[1], pos)
    qt, kt = q.transpose(1, 2), k.transpose(1, 2)
    if grad:
        fn = liger_adapter.liger_rope().LigerRopeFunction.apply
        return lambda: fn(qt, kt, cos, sin)
    return lambda: mod.forward(q, k, cos, sin)


def overhead_markdown(res: Result, names: Sequence[str], calls: int, repeats: int, info: dict) -> str:
    main = primary(names)
    entries = [n for n in names if n not in (COMPILED, LIGER)] + ["torch"] + [n for n in names if n == LIGER]
    keys = [("shape BxTxHxD", "shape", ""), ("positions", "positions", ""), ("grad", "grad", "")]
    cells = [("call us", "call_host_us", ".1f"), ("launch us", "launch_host_us", ".1f"),
             ("call-launch us", "call_minus_launch_us", ".1f"), ("its quartiles", "call_minus_launch_iqr", ""),
             ("autograd floor us", "autograd_floor_us", ".1f")]
    rows = [{**r, "call_minus_launch_iqr": f"[{r['call_minus_launch_q1_us']:.1f}, {r['call_minus_launch_q3_us']:.1f}]"}
            if "call_minus_launch_q1_us" in r else r for r in res.rows]

    def extra(grp: list[dict]) -> list[str]:
        r = {x["impl"]: x for x in grp}.get(main)
        if not r or "call_minus_launch_us" not in r:
            return [""]
        return ["ok" if r["call_minus_launch_us"] <= OVERHEAD_TARGET_US else "MISS"]

    lines = header_lines(
        "Host overhead at tiny shapes (< 1M elements)", info,
        [f"Host microseconds per call: {calls} calls back to back (`time.perf_counter` around the loop, the GPU"
         f" idle-waiting for the host), median of {repeats} loops; `launch` = the bare kernel launch: its two"
         " outputs allocated and Triton's own `rope_kernel[grid](...)` with the arguments worked out beforehand"
         " (the module's `rope.triton_rope.launch_plan`); `call-launch` = what the module call adds: the"
         f" median over {3 * repeats} pairs of adjacent call and launch loops of their difference (with its"
         " quartiles), which a drift of the host's speed between loops does not move as it moves the two"
         " medians beside it."
         " `no_grad`: inputs without grad under `torch.no_grad()`; `requires_grad`: inputs requiring grad"
         " (the autograd Function); `autograd floor` (with grad) = what an empty autograd Function returning"
         " two fresh tensors adds to allocating them, in the same paired loops: the share of call-launch that"
         " any kernel joining autograd through a Function pays. `torch` = the eager reference's call; `liger` ="
         " Liger's own entry (`rope_forward` in place, `LigerRopeFunction` with grad) with its tables gathered"
         " outside the call."
         " The CSV also has the wall time per call (loop + final synchronize) and the GPU time per call."])
    target_h = [f"target ({main} call-launch <= {OVERHEAD_TARGET_US:g} us)"] if main else []
    lines += _pivot(rows, keys, entries, cells, extra if main else None, target_h)
    lines += _notes(res.notes)
    return "\n".join(lines) + "\n"


# -- files ----------------------------------------------------------------------------------------
def write_result(res: Result, out: Path) -> None:
    """``<name>.md`` and ``<name>.csv`` under ``out`` (the CSV only when there are rows)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{res.name}.md").write_text(res.markdown)
    if res.rows:
        write_csv(out / f"{res.name}.csv", res.rows)
