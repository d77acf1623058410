"""RoPE kernels against their peers: forward and backward time, in % of the copy bandwidth of the same GPU.

    python -m bench.kernel                                                # every implementation, common head dims
    python -m bench.kernel --impls triton_v4,liger --head-dims even --variants full
    python -m bench.kernel --impls triton_v4 --cases plain,positions,cu_seqlens --rope-path .baseline
    python -m bench.kernel --impls triton_v4 --head-dims 96 --tuning tiling=rows,tile=2048
    python -m bench.kernel --smoke                                        # CPU, tiny shapes, seconds

Each configuration (head dim D, variant, case) gets fresh random q and k of shape (B, T, H, D), B the smallest that
gives each tensor ``--elements`` elements (default 32M: far beyond any L2, so the time is the memory traffic's).
Cases: ``plain`` (layout half, the whole head rotated), ``interleaved`` (pairs 2i, 2i+1), ``rotary_half``
(rotary_dim = D/2, the rest passed through), ``positions`` ((B, T) int64 positions at random offsets) and
``cu_seqlens`` (packed sequences of random lengths up to T, as (B T, H, D)); the ``positions`` column says
``arange``, ``tensor`` or ``cu_seqlens``. Implementations: the registry's
entries (``rope.available()`` but ``none`` and ``liger``), ``torch_compiled`` (``torch.compile`` of the ``torch``
entry) and ``liger`` (Liger-Kernel's kernels called natively, where it computes the same function: the plain case).

Forward: the module call. Backward: the autograd backward of that call's graph, kept for the repetitions (what a
training step runs); Liger: its backward kernel. Bytes: q and k read once and written once. Every output is
checked against the float32 ``torch`` reference (``max_err``; above 0.25, or an output of another dtype or shape
than the reference's, which makes ``max_err`` inf, the row is flagged WRONG in the log).
One row per (configuration, implementation, direction) is appended to ``bench/results/kernel.csv`` as soon as its
configuration is measured, so a run cut short keeps what it measured. ``--jobs N`` compiles every configuration in
N processes first (Triton's and Inductor's on-disk caches), then times them one after another in this one.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import multiprocessing
from collections.abc import Callable
from dataclasses import dataclass

import torch

from bench import harness
from bench import liger as liger_native
from llm.cli import OneLineParser

NAME = "kernel"
COLUMNS = (*harness.ENV_COLUMNS, "implementation", "direction", "head_dim", "variant", "layout", "rotary_dim",
           "positions", "shape", "dtype", "elements", "time_us", "gbps", "copy_gbps", "pct_copy_bw", "max_err",
           "tuning", "plan")
#: The head sizes of public models (partial or full rotation): what ``--head-dims common`` (the default) times.
COMMON_HEAD_DIMS = (64, 80, 96, 128, 160, 192, 256)
CASES = ("plain", "interleaved", "rotary_half", "positions", "cu_seqlens")
COMPILED, LIGER = "torch_compiled", liger_native.NAME
#: The cases Liger-Kernel's kernels compute (half-split whole heads at positions 0..T-1): the others are not timed
#: for it.
LIGER_CASES = ("plain",)
#: What ``--smoke`` times unless told otherwise (the compiled reference's compile alone would take seconds).
SMOKE_IMPLS = f"torch,triton_v4,{LIGER}"
#: An output further than this from the float32 reference is wrong, not rounded (unit-variance bf16 inputs: one
#: ulp is at most 2^-5 below 8).
MAX_ERR = 0.25


@dataclass(frozen=True)
class Config:
    head_dim: int
    variant: str
    case: str

    @property
    def layout(self) -> str:
        return "interleaved" if self.case == "interleaved" else "half"

    @property
    def rotary_dim(self) -> int:
        return self.head_dim // 2 if self.case == "rotary_half" else self.head_dim

    @property
    def positions(self) -> str:
        return {"positions": "tensor", "cu_seqlens": "cu_seqlens"}.get(self.case, "arange")

    def options(self) -> dict:
        """``rope.build`` options, defaults left out (an entry without a layout option still builds)."""
        opts: dict = {"variant": self.variant}
        if self.layout != "half":
            opts["layout"] = self.layout
        if self.rotary_dim != self.head_dim:
            opts["rotary_dim"] = self.rotary_dim
        return opts

    def __str__(self) -> str:
        return f"D={self.head_dim} {self.variant} {self.case}"


@dataclass
class Inputs:
    """q, k and output gradients of one configuration, the call's keyword arguments and its table length."""

    q: torch.Tensor
    k: torch.Tensor
    gq: torch.Tensor
    gk: torch.Tensor
    kwargs: dict
    max_seq_len: int
    shape: str


def make_inputs(cfg: Config, elements: int, T: int, heads: tuple[int, int], dtype: torch.dtype,
                device: torch.device) -> Inputs:
    """q of about ``elements`` elements (B, T, HQ, D) and k of the same tokens with HK heads (``heads`` = (HQ, HK))."""
    D = cfg.head_dim
    HQ, HK = heads
    B = max(1, -(-elements // (T * HQ * D)))
    gen = torch.Generator().manual_seed(D)
    tokens: tuple[int, ...] = (B, T)
    kwargs: dict = {}
    if cfg.case == "positions":
        offsets = torch.randint(0, T, (B, 1), generator=gen)
        kwargs["positions"] = (torch.arange(T)[None] + offsets).to(device)
    elif cfg.case == "cu_seqlens":
        lengths, left = [], B * T
        while left:
            lengths.append(min(left, int(torch.randint(1, T + 1, (1,), generator=gen))))
            left -= lengths[-1]
        cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
        kwargs["cu_seqlens"] = cu.to(device)
        tokens = (B * T,)
    on_device = torch.Generator(device).manual_seed(D)  # 32M numbers: drawn where they are used, in milliseconds
    q, k, gq, gk = (torch.randn((*tokens, h, D), generator=on_device, device=device).to(dtype)
                    for h in (HQ, HK, HQ, HK))
    shape = "x".join(map(str, (*tokens, HQ if HQ == HK else f"{HQ}/{HK}", D)))
    return Inputs(q, k, gq, gk, kwargs, 2 * T, shape)


@dataclass
class Runner:
    """One implementation on one configuration's inputs: ``forward()`` and ``backward()`` as timed, and
    ``outputs()`` (forward and backward results on fresh copies) for the check."""

    forward: Callable[[], object]
    backward: Callable[[], object]
    outputs: Callable[[], tuple]
    plan: Callable[[], str] = lambda: ""  # the forward's launch, as made after the timed calls


def _module_runner(fn: Callable, x: Inputs) -> Runner:
    qg, kg = x.q.detach().clone().requires_grad_(), x.k.detach().clone().requires_grad_()
    graph = fn(qg, kg, **x.kwargs)  # kept: every timed backward runs through the same graph

    def outputs() -> tuple:
        qc, kc = x.q.detach().clone().requires_grad_(), x.k.detach().clone().requires_grad_()
        y = fn(qc, kc, **x.kwargs)
        return (*y, *torch.autograd.grad(y, (qc, kc), (x.gq, x.gk)))

    return Runner(lambda: fn(x.q, x.k, **x.kwargs),
                  lambda: torch.autograd.grad(graph, (qg, kg), (x.gq, x.gk), retain_graph=True), outputs)


def build_runner(name: str, cfg: Config, x: Inputs, compile_backend: str) -> Runner:
    """``name`` ready to time on ``x``; raises when it cannot run this configuration."""
    import rope

    device = x.q.device
    if name == LIGER:
        native = liger_native.LigerNative(rope.build("torch", cfg.head_dim, x.max_seq_len, **cfg.options())
                                          .to(device), x.q.dtype)
        cos, sin = native.tables(x.q.shape[1])
        q, k, gq, gk = (t.clone() for t in (x.q, x.k, x.gq, x.gk))  # rotated in place, call after call

        def outputs() -> tuple:
            fresh = [t.clone() for t in (x.q, x.k, x.gq, x.gk)]
            return (*native.forward(*fresh[:2], cos, sin), *native.backward(*fresh[2:], cos, sin))

        return Runner(lambda: native.forward(q, k, cos, sin), lambda: native.backward(gq, gk, cos, sin), outputs)
    module = rope.build("torch" if name == COMPILED else name, cfg.head_dim, x.max_seq_len, **cfg.options()).to(device)
    if name == COMPILED:
        return _module_runner(torch.compile(module, dynamic=False, backend=compile_backend), x)
    run = _module_runner(module, x)
    if "cu_seqlens" in x.kwargs:  # the module rotates packed tokens as one sequence at their packed positions
        from rope.base import packed_positions

        positions = packed_positions(x.kwargs["cu_seqlens"], x.q.shape[0], x.max_seq_len)
        run.plan = lambda: harness.plan_label(module, x.q[None], x.k[None], positions)
    else:
        run.plan = lambda: harness.plan_label(module, x.q, x.k, x.kwargs.get("positions"))
    return run


def applies(name: str, cfg: Config) -> bool:
    """Whether ``name`` computes this configuration's function: Liger rotates half-split whole heads at positions
    0..T-1 only."""
    return name != LIGER or cfg.case in LIGER_CASES


def computing(impls: list[str], configs: list[Config], log: Callable[[str], None]) -> list[str]:
    """``impls`` less those that compute none of ``configs``; the cases an implementation is not timed on are named
    in the log (a run asking Liger for another case only must not end with nothing measured and nothing said)."""
    kept = []
    for name in impls:
        some = any(applies(name, c) for c in configs) or not configs
        if skipped := list(dict.fromkeys(c.case for c in configs if not applies(name, c))):
            log(f"{name}: computes the {', '.join(LIGER_CASES)} case only, not --cases {','.join(skipped)}: "
                f"{'timed on the others' if some else 'left out'}")
        if some:
            kept.append(name)
    return kept


def tuned(name: str, spec: dict[str, object]) -> dict[str, object]:
    """The ``--tuning`` fields that reach ``name``'s launches (:func:`bench.harness.tuning`): the Triton entries take
    all but cutedsl's, the cutedsl entry its own, the others none."""
    import rope

    if not spec or name in (COMPILED, LIGER):
        return {}
    cls, cute, package = rope.get(name), harness._cutedsl_fields(), harness.triton_package()
    if cls.__module__.split(".")[:2] == ["rope", "cutedsl"]:
        return {k: v for k, v in spec.items() if k in cute}
    if package is not None and issubclass(cls, package.TritonRotary):
        return {k: v for k, v in spec.items() if k not in cute}
    return {}


def tuning_label(name: str, spec: dict[str, object]) -> str:
    """The tuning column of ``name``'s rows, ``FIELD=VALUE,...`` of the fields that reached its launches: a row that
    ran as without the option says none, or it reads as a tuning it did not have."""
    return ",".join(f"{k}={v}" for k, v in tuned(name, spec).items())


def check_tuning_reaches(spec: dict[str, object], impls: list[str]) -> None:
    """A ``--tuning`` field that none of the implementations timed takes: one line and exit 2, before any work."""
    if unused := [k for k in spec if not any(k in tuned(name, spec) for name in impls)]:
        harness._refuse(f"--tuning {','.join(unused)}: no implementation of --impls ({', '.join(impls)}) takes it "
                        f"(tiling, tile, num_warps, maxnreg: the Triton entries'; threads, rows_per_thread: cutedsl's)")


def mismatch(got: tuple, want: tuple) -> str:
    """How the outputs (q, k, dq, dk) differ from the reference's in shape or dtype, in a few words; '' when they
    agree. Why apart from :func:`max_err`: a float32 output of bf16 inputs is exact in value, yet it writes twice the
    bytes the row counts and is no rotation in the inputs' dtype; and a wrong shape may broadcast against the
    reference's."""
    for name, a, b in zip(("q", "k", "dq", "dk"), got, want, strict=True):
        if a.dtype != b.dtype or a.shape != b.shape:
            return f"{name}: {str(a.dtype).removeprefix('torch.')} {tuple(a.shape)}, " \
                   f"expected {str(b.dtype).removeprefix('torch.')} {tuple(b.shape)}"
    return ""


def max_err(got: tuple, want: tuple) -> float:
    """The largest absolute difference from the reference's outputs; inf where their shapes or dtypes differ."""
    if mismatch(got, want):
        return math.inf
    return max((a.float() - b.float()).abs().max().item() for a, b in zip(got, want, strict=True))


def measure_config(cfg: Config, impls: list[str], args: argparse.Namespace, timer, copy_gbps: float,
                   env: dict, log: Callable[[str], None], problem: Callable[[str], None] | None = None) -> list[dict]:
    """Rows of every implementation on one configuration; one that fails is left out, and that or an output far from
    the reference (its rows kept, ``max_err`` saying so) goes to ``problem`` (default: ``log``)."""
    problem = problem or log
    import rope

    x = make_inputs(cfg, args.elements, args.seq_len, args.heads, args.dtype, args.device)
    want = _module_runner(rope.build("torch", cfg.head_dim, x.max_seq_len, **cfg.options()).to(args.device),
                          x).outputs()
    nbytes = 2 * (x.q.numel() + x.k.numel()) * x.q.element_size()
    rows, summary = [], []
    for name in (n for n in impls if applies(n, cfg)):
        try:
            with harness.tuning(args.tuning):
                run = build_runner(name, cfg, x, args.compile_backend)
                got = run.outputs()
                wrong, err = mismatch(got, want), max_err(got, want)
                times = {"forward": timer(run.forward), "backward": timer(run.backward)}
                plan = run.plan()
        except Exception as exc:  # one implementation failing (a shape it cannot compile) must not lose the others
            problem(f"{cfg}: {name} failed: {type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:200]}")
            continue
        for direction, us in times.items():
            gbps = nbytes / (us * 1e-6) / 1e9
            rows.append({**env, "implementation": name, "direction": direction, "head_dim": cfg.head_dim,
                         "variant": cfg.variant, "layout": cfg.layout, "rotary_dim": cfg.rotary_dim,
                         "positions": cfg.positions, "shape": x.shape, "dtype": str(args.dtype).replace("torch.", ""),
                         "elements": x.q.numel(), "time_us": us, "gbps": gbps, "copy_gbps": copy_gbps,
                         "pct_copy_bw": 100 * gbps / copy_gbps, "max_err": err,
                         "tuning": tuning_label(name, args.tuning), "plan": plan})
        flag = f" WRONG ({wrong})" if wrong else "" if err <= MAX_ERR else f" WRONG (max_err {err:.3g})"
        if flag:
            problem(f"{cfg}: {name}{flag}")
        summary.append(f"{name} {rows[-2]['pct_copy_bw']:.1f}/{rows[-1]['pct_copy_bw']:.1f}{flag}")
    log(f"{cfg} {x.shape}: fwd/bwd % of copy  " + "  ".join(summary))
    if COMPILED in impls:
        torch._dynamo.reset()  # the compiled graphs of this shape are not needed again
    return rows


def keep_compiled_graphs(impls: list[str]) -> None:
    """Let the compiled reference's backward run again on one graph: a compiled backward that donates its saved
    buffers cannot (retain_graph), and that is how every backward here is timed. Donation saves memory, not time;
    the timed and the warming processes set it alike, so their compiled graphs share Inductor's cache."""
    if COMPILED in impls:
        from torch._functorch import config as functorch_config

        functorch_config.donated_buffer = False


def warm_configs(args: argparse.Namespace, configs: list[Config], impls: list[str]) -> int:
    """Compile what ``configs`` need (one forward and backward of each implementation), timing nothing: run in
    the ``--jobs`` workers, it fills the on-disk caches the timed process then reads. Returns how many it warmed."""
    harness.import_rope(args.rope_path)
    keep_compiled_graphs(impls)
    for cfg in configs:
        x = make_inputs(cfg, args.elements, args.seq_len, args.heads, args.dtype, args.device)
        for name in (n for n in impls if applies(n, cfg)):
            with contextlib.suppress(Exception), harness.tuning(args.tuning):  # the timed run reports failures
                run = build_runner(name, cfg, x, args.compile_backend)
                run.forward()
                run.backward()
        harness.synchronize(args.device)
        if COMPILED in impls:
            torch._dynamo.reset()
    return len(configs)


def warm_in_workers(args: argparse.Namespace, configs: list[Config], impls: list[str],
                    log: Callable[[str], None]) -> None:
    # one task per configuration, each logged as it ends: a compile of many minutes shows where it is
    done = 0
    with multiprocessing.get_context("spawn").Pool(args.jobs, initializer=harness.ignore_ctrl_c) as pool:
        for n in pool.imap_unordered(_warm_one, [(args, cfg, impls) for cfg in configs]):
            done += n
            log(f"compiled {done}/{len(configs)} configurations")
    log(f"compiled {done} configurations in {args.jobs} processes")


def _warm_one(task: tuple) -> int:
    args, cfg, impls = task
    return warm_configs(args, [cfg], impls)


def default_impls(device: torch.device) -> list[str]:
    import rope

    names = [n for n in rope.available() if n not in ("none", LIGER)]
    names.sort(key=lambda n: n != "triton_v4")
    return [*names, COMPILED, LIGER]


def select_impls(text: str | None, device: torch.device, parser: argparse.ArgumentParser,
                 log: Callable[[str], None]) -> list[str]:
    """The implementations asked for (or every one), each once, those that cannot run here left out with a note."""
    import rope

    names = list(dict.fromkeys(harness.split_list(text, "--impls"))) or default_impls(device)
    timed = [n for n in rope.available() if n != "none"]  # none rotates nothing: no rotation to time
    if "none" in names:
        parser.error("--impls none: rotates nothing, so there is no rotation to time (bench.step times a model "
                     "without RoPE); choose from " + ", ".join([*timed, COMPILED]))
    unknown = [n for n in names if n not in (COMPILED, LIGER) and n not in rope.available()]
    if unknown:
        parser.error(f"--impls: unknown {', '.join(unknown)}; choose from "
                     f"{', '.join([*timed, COMPILED])} (liger = Liger-Kernel's own kernels)")
    kept = []
    for name in names:
        if name == LIGER:
            reason = liger_native.unavailable_reason(device)
        else:
            reason = rope.get("torch" if name == COMPILED else name).unavailable_reason(device)
        if reason:
            log(f"{name} left out: {reason}")
        else:
            kept.append(name)
    return kept


def parse_head_dims(text: str) -> list[int]:
    if text == "common":
        return list(COMMON_HEAD_DIMS)
    if text == "even":
        return list(range(16, 257, 2))
    try:
        dims = [int(x) for x in harness.split_list(text, "--head-dims")]
    except ValueError:
        dims = []
    if not dims or min(dims) < 2:
        raise ValueError(f"--head-dims takes common, even or comma-separated head dims, got {text!r}")
    return dims


def make_configs(args: argparse.Namespace, log: Callable[[str], None]) -> list[Config]:
    """Every (head dim, variant, case) asked for that the rotation can take; the others named in the log."""
    import rope

    configs = []
    for D in args.head_dims:
        for variant in args.variants:
            for case in args.cases:
                cfg = Config(D, variant, case)
                try:
                    rope.check_args("torch", D, 2 * args.seq_len, **cfg.options())
                except rope.RopeArgumentError as exc:
                    log(f"{cfg} skipped: {exc}")
                    continue
                configs.append(cfg)
    return configs


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = OneLineParser(prog="python -m bench.kernel", description=__doc__,
                      formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--impls", default=None,
                   help=f"comma-separated: registry names but none (it rotates nothing), {COMPILED}, {LIGER} "
                        f"(default: every one that runs here; --smoke: {SMOKE_IMPLS})")
    p.add_argument("--head-dims", default=None,
                   help=f"common ({','.join(map(str, COMMON_HEAD_DIMS))}; the default), even (16, 18, ..., 256) or a "
                        "comma-separated list (--smoke: 16)")
    p.add_argument("--variants", default=None,
                   help="comma-separated, of partial, full (default partial,full; --smoke: partial)")
    p.add_argument("--cases", default="plain",
                   help=f"comma-separated, of {', '.join(CASES)} (default plain; {LIGER}: plain only)")
    p.add_argument("--elements", default=None,
                   help="elements per tensor (K/M = 2^10/2^20; default 32M; --smoke: 256)")
    p.add_argument("--seq-len", type=int, default=None, help="T of the shapes (default 2048; --smoke 8)")
    p.add_argument("--heads", default=None,
                   help="q's heads, or q's/k's for grouped-query attention: 16, 32/8 (default 16; --smoke 2)")
    p.add_argument("--dtype", default=None, choices=tuple(harness.DTYPES),
                   help="of q and k: bf16 or bfloat16, fp16 or float16, fp32 or float32 (default bf16; --smoke: fp32)")
    p.add_argument("--reps", type=int, default=None,
                   help="timed calls per median (default 15, two medians and the lower kept; --smoke: 1)")
    p.add_argument("--tuning", default=None, metavar="FIELD=VALUE,...",
                   help="launch settings (bench.harness.tuning): the Triton entries' eager launches' (tiling, tile, "
                        "num_warps, maxnreg; e.g. tiling=rows,tile=2048,num_warps=8) and cutedsl's (threads, "
                        "rows_per_thread); a field none of --impls takes is refused, and a row's tuning column names "
                        "the fields its launches took")
    p.add_argument("--jobs", type=int, default=1, help="processes compiling the configurations before the timing")
    p.add_argument("--warm-only", action="store_true", help="compile every configuration, time nothing, write nothing")
    harness.add_common_args(p, NAME)
    args = p.parse_args(argv)
    if args.smoke:  # the fewest calls that still take every path: the interpreter runs a launch in tens of ms
        args.impls = SMOKE_IMPLS if args.impls is None else args.impls
        args.head_dims = "16" if args.head_dims is None else args.head_dims
        args.variants = "partial" if args.variants is None else args.variants
        args.reps = 1 if args.reps is None else args.reps
    try:
        args.head_dims = parse_head_dims("common" if args.head_dims is None else args.head_dims)
        args.elements = parse_count(("256" if args.smoke else "32M") if args.elements is None else args.elements)
        harness.split_list(args.tuning, "--tuning")  # an empty list is refused, not read as no setting
        args.tuning = harness.parse_tuning(args.tuning)
    except ValueError as exc:
        p.error(str(exc))
    args.variants = harness.split_list("partial,full" if args.variants is None else args.variants, "--variants")
    args.cases = harness.split_list(args.cases, "--cases")
    for option, values, allowed in (("--variants", args.variants, ("partial", "full")), ("--cases", args.cases, CASES)):
        if bad := [v for v in values if v not in allowed]:
            p.error(f"{option} takes comma-separated values of {', '.join(allowed)}, got {', '.join(bad)}")
    # a value given is checked, never replaced: only an option left out takes its default
    args.reps = 15 if args.reps is None else args.reps
    if args.jobs < 1 or args.reps < 1:
        p.error("--jobs and --reps must be at least 1")
    args.seq_len = (8 if args.smoke else 2048) if args.seq_len is None else args.seq_len
    if args.seq_len < 1:
        p.error(f"--seq-len takes a positive number of tokens, got {args.seq_len}")
    try:
        args.heads = parse_heads(("2" if args.smoke else "16") if args.heads is None else args.heads)
    except ValueError as exc:
        p.error(str(exc))
    args.dtype = harness.DTYPES[args.dtype or ("fp32" if args.smoke else "bf16")]
    args.parser = p
    return args


def parse_heads(text: str) -> tuple[int, int]:
    """``16`` -> (16, 16); ``32/8`` -> (32, 8): k's heads must divide q's (grouped-query attention)."""
    parts = text.split("/")
    try:
        hq, hk = (int(parts[0]), int(parts[-1])) if len(parts) <= 2 else (0, 0)
    except ValueError:
        hq = hk = 0
    if hq < 1 or hk < 1 or hq % hk:
        raise ValueError(f"--heads takes H or HQ/HK with HK dividing HQ (16, 32/8), got {text!r}")
    return hq, hk


def parse_count(text: str) -> int:
    """``32M`` -> 33554432 (K, M, G: powers of 1024)."""
    t = text.strip().upper()
    mult = {"K": 2**10, "M": 2**20, "G": 2**30}.get(t[-1:], 1)
    try:
        value = int(float(t[:-1] if mult > 1 else t) * mult)
    except ValueError:
        value = 0
    if value <= 0:
        raise ValueError(f"--elements takes a positive count such as 32M, got {text!r}")
    return value


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    parser = args.parser
    del args.parser  # the workers get the namespace: no parser in it
    log = harness.Progress()
    args.device = harness.pick_device(args.smoke, "bench.kernel")
    rope_root = harness.import_rope(args.rope_path)
    harness.check_tuning(args.tuning)
    args.compile_backend = "inductor" if args.device.type == "cuda" else "aot_eager"
    impls = select_impls(args.impls, args.device, parser, log)
    configs = make_configs(args, log)
    impls = computing(impls, configs, log)
    keep_compiled_graphs(impls)
    if impls and configs:
        check_tuning_reaches(args.tuning, impls)
    if not impls or not configs:  # every implementation or shape asked for was left out, each said why above
        what = "--impls" if not impls else "--head-dims/--variants/--cases"
        harness._refuse(f"bench.kernel: nothing to measure: every choice of {what} was left out (the lines above "
                        "say why)")
    results = None if args.warm_only else harness.ResultsCsv(harness.out_path(args, NAME), COLUMNS)
    env = harness.environment(args.device, rope_root, args.commit)
    log(f"{env['gpu']}, rope code {env['commit']} ({rope_root}), torch {env['torch']}, triton {env['triton']}: "
        f"{len(configs)} configurations x {', '.join(impls)}{harness.plugin_versions(impls)}")
    if args.jobs > 1:
        warm_in_workers(args, configs, impls, log)
    elif args.warm_only:
        for i, cfg in enumerate(configs, 1):
            warm_configs(args, [cfg], impls)
            log(f"compiled {i}/{len(configs)} configurations")
    if args.warm_only:
        return 0
    timer = harness.make_timer(args.reps, args.device, flush="zero")  # a training step: each kernel writes as it reads
    copy = harness.copy_gbps(timer, 2**30 if args.device.type == "cuda" else 2**22, args.device)
    log(f"copy bandwidth {copy:.0f} GB/s; rows to {results.path}")
    for i, cfg in enumerate(configs, 1):
        numbered = lambda message, i=i: log(f"{i}/{len(configs)} {message}")  # noqa: E731
        results.append(measure_config(cfg, impls, args, timer, copy, env, numbered, log.problem))
    return log.exit_code("bench.kernel")


if __name__ == "__main__":
    harness.run_main(main, "bench.kernel")
