"""What a RoPE kernel costs inside a real training step (GPU).

Times one GPT training step (forward, backward, fused AdamW step; bf16 autocast) for each RoPE
implementation (default: every registered one, ``rope.available()``; ``none`` is the baseline of
the "vs rope=none" column), eager and under ``torch.compile``, on random tokens, and reports each
one's step time against ``rope=none`` and ``rope=torch``. Default: GPT-2 small (124M with the
50257-token GPT-2 vocabulary), B=32, T=1024. ``--model`` takes several presets (comma-separated),
each at its own batch (``--batch``, or the preset's default: 32, seed004 24) and vocabulary
(``--vocab``, or 50257 for gpt2_small and cl100k_base's 100277 otherwise, the project's default
tokenizer). Every registered entry that can run here is timed, the ``liger`` entry (Liger-Kernel's
kernel, ``rope/liger.py``) included when ``liger-kernel`` is installed (``--no-liger`` leaves it
out); those that cannot run are named on stderr. A row that fails (say, an entry that
does not compile) is reported with its error and the others go on; the files are rewritten after
every row. Timers and writers: ``scripts/benchlib.py``.

One rope after another, the medians of one call moved by several % between calls on the H100's
host (session 7), more than the differences looked for; ``--rounds R`` times the ropes interleaved
(all built, compiled and warmed up first, then R rounds with the order rotating, one untimed step before
each rope's timed ones) and pairs them by round. Two comparisons against rope=torch: the medians of all
steps with a bootstrap CI that resamples whole rounds (:func:`llm.report.stats.median_ratio_interval`), and
the mean over rounds of each round's median ratio with a t-CI. Step times drift by several % within a call
and have a heavy tail (single steps 3-4x the median), so many short rounds and the medians resolve most:
on the compiled seed004 step (H100, session 23) 1000 rounds of 2 steps gave +-0.3% for the medians, where
16-24 rounds of 60 give +-1-2% either way; the round means need tens of steps a round (at 2, one outlier
moves them: +-1.2% over those 1000 rounds).

    python -m scripts.bench_step [--model gpt2_small,seed004] [--ropes none,torch,triton_v4] [--batch 32] [--out DIR]
    python -m scripts.bench_step --model seed004 --ropes none,torch,triton_v4 --modes compile --iters 2000 --rounds 1000
    python -m scripts.bench_step --model seed004 --ropes none,torch,triton_v4 --modes compile,cudagraphs --rounds 600
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

import torch
from omegaconf import OmegaConf

ROOT = Path(__file__).resolve().parent.parent
#: ``--modes``: eager, ``torch.compile`` as training does, and ``torch.compile(mode="reduce-overhead")``
#: (CUDA graphs: the host's launch cost out of the step, which shows what the GPU work alone costs where a
#: compiled step is host-bound, as the seed004 forward is on the H100: docs/kernels.md, session 25)
COMPILE_MODES = {"compile": None, "cudagraphs": "reduce-overhead"}
if str(ROOT) not in sys.path:  # also runnable as `python scripts/bench_step.py`
    sys.path.insert(0, str(ROOT))

from scripts.benchlib import (  # noqa: E402
    event_times,
    markdown_table,
    parse_device,
    rope_names,
    round_order,
    use_device,
    write_csv,
)

CONF = ROOT / "conf"
#: The batch each preset is benchmarked at unless --batch says otherwise (seed004: its recipe's 24).
DEFAULT_BATCH = {"gpt2_small": 32, "seed004": 24}
GPT2_VOCAB, CL100K_VOCAB = 50257, 100277
#: Fewer steps a round than this draws a note: the round means' t interval widens (the module docstring).
MIN_STEPS_PER_ROUND = 10
#: Row keys that are lists (per round), written to the JSON only.
JSON_ONLY = ("round_medians_ms", "round_times_ms")


def default_batch(model: str) -> int:
    return DEFAULT_BATCH.get(model, 32)


def default_vocab(model: str) -> int:
    """GPT-2's vocabulary for the GPT-2 preset (the 124M model), cl100k_base's (the project's default
    tokenizer, what seed004 trains with) for the others."""
    return GPT2_VOCAB if model == "gpt2_small" else CL100K_VOCAB


def rope_config(name: str):
    """The ``conf/rope/<name>.yaml`` group (a registered name without one: its defaults)."""
    path = CONF / "rope" / f"{name}.yaml"
    return OmegaConf.load(path) if path.is_file() else OmegaConf.create({"name": name})


def make_step(model_cfg, name: str, mode: str, args: argparse.Namespace, batch_size: int,
              vocab: int) -> tuple[Callable[[], None], float]:
    """One training step of the model with RoPE ``name`` in ``mode`` as a callable, and the parameter count (M)."""
    from llm.model import build_model, compile_model
    from llm.optim import build_optimizers

    device = torch.device(args.device)
    torch.manual_seed(0)
    model = build_model(model_cfg, rope_config(name), vocab).to(device)
    optim_cfg = OmegaConf.to_container(OmegaConf.load(CONF / "optim" / f"{args.optim}.yaml"))
    optimizers = build_optimizers(model, optim_cfg, device)
    step_model = model if mode == "eager" else compile_model(model, mode=COMPILE_MODES[mode])
    batch = torch.randint(0, vocab, (batch_size, model_cfg.seq_len), device=device)
    graphs = mode == "cudagraphs"

    def step() -> None:
        if graphs:  # a new iteration: the previous replay's outputs may be overwritten
            torch.compiler.cudagraph_mark_step_begin()
        with torch.autocast(device.type, dtype=torch.bfloat16):
            _, loss = step_model(batch, batch)
        loss.backward()
        for opt in optimizers:
            opt.step()
            opt.zero_grad(set_to_none=True)

    return step, model.num_params() / 1e6


def _row(model_cfg, args: argparse.Namespace, batch_size: int, vocab: int, mode: str, name: str,
         times: list[float], params_m: float | None, error: str = "") -> dict:
    ok = bool(times)
    return {"model": model_cfg.get("name", args.model), "batch": batch_size, "seq_len": model_cfg.seq_len,
            "vocab": vocab, "mode": mode, "rope": name, "step_ms": statistics.median(times) if ok else math.nan,
            "min_ms": min(times) if ok else math.nan, "params_M": params_m, "error": error}


def time_step(model_cfg, name: str, mode: str, args: argparse.Namespace, batch_size: int, vocab: int) -> dict:
    """Median milliseconds of one training step of the model with RoPE ``name`` in ``mode``."""
    step, params_m = make_step(model_cfg, name, mode, args, batch_size, vocab)
    times = event_times(step, args.warmup, args.iters, torch.device(args.device))
    return _row(model_cfg, args, batch_size, vocab, mode, name, times, params_m)


def time_interleaved(model_cfg, names: list[str], mode: str, args: argparse.Namespace, batch_size: int,
                     vocab: int) -> list[dict]:
    """Every rope's step timed in ``args.rounds`` rounds of ``iters / rounds`` steps, the ropes' order rotating
    each round, all models alive at once: a drift of the host or the GPU over the run (several % between
    calls on the H100's host) then falls on every rope alike, and each round pairs the ropes. The rows add
    ``vs_torch_median_pct`` (the medians of all steps against torch's, 95% bootstrap CI over rounds) and
    ``vs_torch_round_pct`` (mean and 95% t-CI over rounds of each round's median against torch's)."""
    from llm.report.stats import median_ratio_interval, t_interval

    device = torch.device(args.device)
    steps, params, errors = {}, {}, {}
    for name in names:
        try:
            steps[name], params[name] = make_step(model_cfg, name, mode, args, batch_size, vocab)
            event_times(steps[name], args.warmup, 0, device)  # compile and warm up before any timing
        except Exception as exc:  # one entry failing must not lose the others
            errors[name] = _error(exc)
            steps.pop(name, None)
    per_round = max(1, args.iters // args.rounds)
    if per_round < MIN_STEPS_PER_ROUND:
        print(f"note: --iters {args.iters} over --rounds {args.rounds} times {per_round} step(s) a round: read the "
              "medians' bootstrap interval; the round means' t interval needs tens of steps a round",
              file=sys.stderr)
    times: dict[str, list[list[float]]] = {n: [] for n in steps}
    order = list(steps)
    for r in range(args.rounds):
        for name in round_order(order, r):
            times[name].append(event_times(steps[name], 1, per_round, device))
    rows = []
    for name in names:
        if name in errors:
            rows.append(_row(model_cfg, args, batch_size, vocab, mode, name, [], None, errors[name]))
            continue
        row = _row(model_cfg, args, batch_size, vocab, mode, name, [t for rnd in times[name] for t in rnd],
                   params[name])
        row["round_medians_ms"] = [statistics.median(rnd) for rnd in times[name]]  # in the JSON, for a re-analysis
        row["round_times_ms"] = times[name]  # every timed step, by round (the JSON only)
        if "torch" in times and name != "torch":
            d = [100.0 * (statistics.median(a) / statistics.median(b) - 1.0)
                 for a, b in zip(times[name], times["torch"], strict=True)]
            row["vs_torch_round_pct"], row["vs_torch_round_lo"], row["vs_torch_round_hi"] = t_interval(d)
            row["vs_torch_median_pct"], row["vs_torch_median_lo"], row["vs_torch_median_hi"] = \
                median_ratio_interval(times[name], times["torch"])
        rows.append(row)
    return rows


def _error(exc: Exception) -> str:
    return f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:300]}"


def relative(rows: list[dict]) -> None:
    """Add each row's overhead against rope=none and rope=torch of the same model and mode (None if absent)."""
    for r in rows:
        for key, base_name in (("overhead_vs_none_pct", "none"), ("vs_torch_pct", "torch")):
            base = [b for b in rows if b.get("model") == r.get("model") and b["mode"] == r["mode"]
                    and b["rope"] == base_name and math.isfinite(b["step_ms"])]
            ok = base and math.isfinite(r["step_ms"])
            r[key] = 100.0 * (r["step_ms"] / base[0]["step_ms"] - 1.0) if ok else None


def table(rows: list[dict], args: argparse.Namespace, seq_len: int | None = None,
          device_name: str | None = None) -> str:
    """One Markdown table per model (its own header line)."""
    device_name = device_name or (torch.cuda.get_device_name() if torch.cuda.is_available() else "CPU")

    def pct(v: float | None) -> str:
        return f"{v:+.1f}%" if v is not None else "n/a"

    out = []
    for model in dict.fromkeys(r.get("model", args.model) for r in rows):
        mine = [r for r in rows if r.get("model", args.model) == model]
        first = mine[0]
        params = next((f"{r['params_M']:.0f}M" for r in mine if r.get("params_M") is not None), "?")
        head = (f"GPT training step, model={model} ({params}), B={first.get('batch', args.batch)}, "
                f"T={first.get('seq_len', seq_len)}, vocab={first.get('vocab', args.vocab)}, bf16 autocast, "
                f"{args.optim} ({'fused AdamW' if args.optim == 'adamw' else 'Muon + AdamW'}), {device_name}; "
                f"median of {args.iters} steps after {args.warmup} warm-up")
        paired = any(r.get("vs_torch_round_pct") is not None for r in mine)
        if paired:
            head += (f"; timed interleaved in {args.rounds} rounds. Against rope=torch: the medians of all steps "
                     "[95% bootstrap CI, rounds resampled], and the mean over rounds of each round's median [95% t-CI]")
        cols = ["mode", "rope", "step (ms)", "vs rope=none", "vs rope=torch"]
        cols += ["medians [bootstrap CI]", "paired by round"] if paired else []
        body = ([r["mode"], r["rope"], f"{r['step_ms']:.2f}" if math.isfinite(r["step_ms"]) else "failed",
                 pct(r["overhead_vs_none_pct"]), pct(r["vs_torch_pct"])]
                + ([_ci(r, "vs_torch_median"), _ci(r, "vs_torch_round")] if paired else []) for r in mine)
        out += [head, "", *markdown_table(cols, body, 2)]
        errors = [f"- {r['mode']} {r['rope']}: {r['error']}" for r in mine if r.get("error")]
        out += ["", *errors, ""] if errors else [""]
    return "\n".join(out).rstrip() + "\n"


def _ci(row: dict, key: str) -> str:
    """``row``'s ``<key>_pct`` with its ``_lo``/``_hi`` interval, as "+0.1% [-0.2, +0.5]"."""
    mean, lo, hi = (row.get(f"{key}_{end}") for end in ("pct", "lo", "hi"))
    if mean is None:
        return ""
    return f"{mean:+.1f}%" + (f" [{lo:+.1f}, {hi:+.1f}]" if lo is not None else "")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="gpt2_small", help="conf/model presets, comma-separated (gpt2_small,seed004)")
    p.add_argument("--ropes", default=None,
                   help="comma-separated implementations (default: every registered one that can run here)")
    p.add_argument("--batch", default=None,
                   help="batch size, or one per model (comma-separated); default: 32, seed004 24")
    p.add_argument("--vocab", type=int, default=None,
                   help="vocabulary (default: 50257 = GPT-2's for gpt2_small, 100277 = cl100k_base's otherwise)")
    p.add_argument("--optim", default="adamw", help="a conf/optim preset (adamw: fused AdamW; muon)")
    p.add_argument("--modes", default="eager,compile",
                   help="comma-separated: eager, compile (torch.compile as training does), cudagraphs "
                        "(torch.compile mode=reduce-overhead)")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--rounds", type=int, default=1,
                   help="time the ropes interleaved: R rounds of iters/R steps each, the order rotating, with a "
                        "per-round paired CI against rope=torch (default 1: one rope after another)")
    p.add_argument("--no-liger", action="store_true", help="leave Liger-Kernel's RoPE out")
    p.add_argument("--device", type=parse_device, default="cuda",
                   help="cuda[:N] (the GPU timed); cpu = a dry run (tests)")
    p.add_argument("--out", default="outputs/bench")
    args = p.parse_args(argv)
    if args.rounds < 1 or args.rounds > args.iters:
        p.error(f"--rounds must be between 1 and --iters ({args.iters}), got {args.rounds}")
    allowed = ("eager", *COMPILE_MODES)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not modes or any(m not in allowed for m in modes):
        p.error(f"--modes: each of {', '.join(allowed)} (comma-separated), got {args.modes!r}")
    args.modes = ",".join(modes)
    args.models = [m.strip() for m in args.model.split(",") if m.strip()]
    for m in args.models:
        if not (CONF / "model" / f"{m}.yaml").is_file():
            p.error(f"no model preset conf/model/{m}.yaml")
    if not (CONF / "optim" / f"{args.optim}.yaml").is_file():
        p.error(f"no optimizer preset conf/optim/{args.optim}.yaml")
    batches = [int(b) for b in str(args.batch).split(",")] if args.batch else []
    if len(batches) not in (0, 1, len(args.models)):
        p.error(f"--batch gives {len(batches)} sizes for {len(args.models)} models")
    if len(batches) == 1:
        batches *= len(args.models)
    args.batches = batches or [default_batch(m) for m in args.models]
    args.vocabs = [args.vocab or default_vocab(m) for m in args.models]
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    device = use_device(args.device, "bench_step")
    args.device = device
    import rope

    names = []
    for n in rope_names(args.ropes):
        reason = rope.get(n).unavailable_reason(device)
        if reason:
            print(f"note: rope={n} left out: {reason}", file=sys.stderr)
        elif not (args.no_liger and n == "liger"):
            names.append(n)
    torch.backends.cuda.matmul.allow_tf32 = True
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU (dry run)"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    for model, batch_size, vocab in zip(args.models, args.batches, args.vocabs, strict=True):
        model_cfg = OmegaConf.load(CONF / "model" / f"{model}.yaml")
        for mode in args.modes.split(","):
            if args.rounds > 1:
                for r in time_interleaved(model_cfg, names, mode, args, batch_size, vocab):
                    rows.append(r)
                    print(f"{model:10s} {mode:8s} {r['rope']:10s} median {r['step_ms']:.2f} ms {r['error']}",
                          flush=True)
                torch._dynamo.reset()
                if device.type == "cuda":
                    torch.cuda.empty_cache()
                write(rows, args, out, device_name)
                continue
            for name in names:
                try:
                    rows.append(time_step(model_cfg, name, mode, args, batch_size, vocab))  # the model dies here
                except Exception as exc:  # one entry failing (say, under compile) must not lose the others
                    rows.append(_row(model_cfg, args, batch_size, vocab, mode, name, [], None, _error(exc)))
                r = rows[-1]
                print(f"{model:10s} {mode:8s} {name:10s} median {r['step_ms']:.2f} ms {r['error']}", flush=True)
                torch._dynamo.reset()
                if device.type == "cuda":
                    torch.cuda.empty_cache()
                write(rows, args, out, device_name)
    text = write(rows, args, out, device_name)
    print(text)


def write(rows: list[dict], args: argparse.Namespace, out: Path, device_name: str) -> str:
    """step_bench.md/.csv/.json of the rows so far (rewritten after each row: a cut-off run keeps them)."""
    rows = [dict(r) for r in rows]
    relative(rows)
    text = table(rows, args, device_name=device_name)
    (out / "step_bench.md").write_text(text)
    write_csv(out / "step_bench.csv", [{k: v for k, v in r.items() if k not in JSON_ONLY} for r in rows])
    (out / "step_bench.json").write_text(json.dumps(rows, indent=2))
    return text


if __name__ == "__main__":
    main()
