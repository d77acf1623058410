"""Decoding speed with and without the KV cache, and the share of RoPE in a decode step.

For a conf/model preset with random weights (the weights do not change the timing), per RoPE
implementation (default: every registered one that runs here, ``rope.available()``):

* ``tok/s``: greedy decoding of ``--new-tokens`` after a ``--prompt-len`` prompt, for each batch size
  (default 1 and 16), with the KV cache and without it (every token recomputes the whole prefix);
  new tokens of all rows per second, prompt included in the time;
* ``step ms``: one cached decode step (one position per row, at position ``--prompt-len``), and its
  difference to the same step with ``rope=none``;
* ``rope ms``: the RoPE calls of that step alone (``rotate_qkv`` of a (B, 1, ...) projection with
  ``positions=``, once per layer), and its share of the step.

Times are wall-clock medians with the device synchronised around each call: at one position per row
a decode step is bound by kernel launches and host work, which is what a user waits for. bfloat16
autocast on CUDA, float32 on the CPU (where it runs too, at tiny sizes; a test does that).

    python -m scripts.bench_generate [--model small] [--batches 1,16] [--ropes none,torch,triton_v4] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path

import torch
from omegaconf import OmegaConf

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # also runnable as `python scripts/bench_generate.py`
    sys.path.insert(0, str(ROOT))

from scripts.benchlib import fmt, markdown_table, parse_device, rope_names, use_device, write_csv  # noqa: E402

CONF = ROOT / "conf"


def wall_ms(fn: Callable[[], object], device: torch.device, warmup: int, iters: int) -> float:
    """Median wall-clock milliseconds of ``fn``, the device synchronised before and after each call."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def build(model_cfg, name: str, vocab: int, device: torch.device):
    """The model with RoPE ``name`` (the same random weights for every name: RoPE has no parameters)."""
    from llm.model import build_model

    rope_file = CONF / "rope" / f"{name}.yaml"
    rope_cfg = OmegaConf.load(rope_file) if rope_file.is_file() else OmegaConf.create({"name": name})
    torch.manual_seed(0)
    return build_model(model_cfg, rope_cfg, vocab).to(device).eval()


def throughput(model, batch: int, args, device: torch.device, autocast, use_cache: bool) -> float:
    """New tokens per second of greedy decoding (every row), prompt processing included."""
    from llm.generation import GREEDY, generate

    prompt = torch.randint(0, args.vocab, (batch, args.prompt_len), device=device)

    def run() -> None:
        with autocast:
            generate(model, prompt, args.new_tokens, GREEDY, use_cache=use_cache)

    return batch * args.new_tokens / (wall_ms(run, device, 1, args.iters) / 1e3)


@torch.no_grad()
def decode_step(model, batch: int, args, device: torch.device, autocast) -> tuple[float, float]:
    """(ms of one cached decode step at position ``prompt_len``, ms of its RoPE calls alone)."""
    cache = model.new_cache(args.prompt_len + 1)
    with autocast:
        model.next_logits(torch.randint(0, args.vocab, (batch, args.prompt_len), device=device), cache)
    token = torch.randint(0, args.vocab, (batch, 1), device=device)

    def step() -> None:
        cache.length = args.prompt_len  # rewind: every timed step writes the same position
        with autocast:
            model.next_logits(token, cache)

    attn = model.blocks[0].attn
    with autocast:
        qkv = attn.qkv(torch.randn(batch, 1, model.cfg.n_embd, device=device))
    positions = torch.full((1,), args.prompt_len, device=device)

    def rope_calls() -> None:
        for _ in range(model.cfg.n_layer):
            model.rotary.rotate_qkv(qkv, attn.n_head, attn.n_kv_head, positions=positions)

    return (wall_ms(step, device, args.warmup, args.iters * 10),
            wall_ms(rope_calls, device, args.warmup, args.iters * 10))


def measure(model_cfg, names: list[str], args, device: torch.device) -> list[dict]:
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else nullcontext()
    rows = []
    for name in names:
        model = build(model_cfg, name, args.vocab, device)
        for batch in args.batches:
            step_ms, rope_ms = decode_step(model, batch, args, device, autocast)
            row = {"rope": name, "batch": batch,
                   "tok_s_cache": throughput(model, batch, args, device, autocast, True),
                   "tok_s_no_cache": throughput(model, batch, args, device, autocast, False),
                   "step_ms": step_ms, "rope_ms": rope_ms, "rope_share_pct": 100 * rope_ms / step_ms}
            rows.append(row)
            print(f"{name:10s} B={batch:<3d} cache {row['tok_s_cache']:10.1f} tok/s   no cache "
                  f"{row['tok_s_no_cache']:10.1f} tok/s   step {step_ms:.3f} ms   rope {rope_ms:.3f} ms", flush=True)
        del model
        if device.type == "cuda":
            torch.cuda.empty_cache()
    for r in rows:  # the step against the same step without RoPE
        base = [b for b in rows if b["rope"] == "none" and b["batch"] == r["batch"]]
        r["step_vs_none_pct"] = 100 * (r["step_ms"] / base[0]["step_ms"] - 1) if base else None
    return rows


def table(rows: list[dict], args, model_cfg, device: torch.device) -> str:
    where = torch.cuda.get_device_name(device) + ", bf16 autocast" if device.type == "cuda" else "CPU, float32"
    head = (f"Greedy decoding, model={args.model} ({model_cfg.n_layer} layers, d {model_cfg.n_embd}, "
            f"{model_cfg.n_head} heads), vocab {args.vocab}, prompt {args.prompt_len} + {args.new_tokens} new tokens, "
            f"random weights, {where}; medians of wall-clock times")
    body = ([r["rope"], str(r["batch"]), fmt(r["tok_s_cache"], ".1f"), fmt(r["tok_s_no_cache"], ".1f"),
             fmt(r["tok_s_cache"] / r["tok_s_no_cache"], ".2f"), fmt(r["step_ms"], ".3f"),
             "n/a" if r["step_vs_none_pct"] is None else f"{r['step_vs_none_pct']:+.1f}%",
             fmt(r["rope_ms"], ".3f"), f"{r['rope_share_pct']:.1f}%"] for r in rows)
    headers = ["rope", "batch", "tok/s cache", "tok/s no cache", "speed-up", "step ms", "step vs none", "rope ms",
               "rope share"]
    return "\n".join([head, "", *markdown_table(headers, body, 1)])


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="small", help="a conf/model preset (small, gpt2_small, tiny, ...)")
    p.add_argument("--ropes", default=None, help="comma-separated implementations (default: every registered one)")
    p.add_argument("--batches", default="1,16", help="comma-separated batch sizes")
    p.add_argument("--prompt-len", type=int, default=128)
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--vocab", type=int, default=50257, help="50257 = GPT-2's vocabulary")
    p.add_argument("--device", default="auto", help="auto (cuda if present) | cpu | cuda[:N]")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--iters", type=int, default=5, help="timed generations (decode steps: 10x as many)")
    p.add_argument("--out", default="outputs/bench")
    args = p.parse_args(argv)
    args.batches = [int(b) for b in args.batches.split(",") if b.strip()]
    if not args.batches or min(args.batches) < 1 or args.iters < 1 or args.warmup < 0:
        raise SystemExit(f"--batches {','.join(map(str, args.batches))}, --iters {args.iters} and --warmup "
                         f"{args.warmup} must be positive (warmup >= 0)")
    if args.device == "auto":
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    else:
        try:
            device = parse_device(args.device)
        except argparse.ArgumentTypeError as e:
            raise SystemExit(f"bench_generate: --device: {e} (or auto)") from None
    device = use_device(device, "bench_generate")
    model_file = CONF / "model" / f"{args.model}.yaml"
    if not model_file.is_file():
        raise SystemExit(f"--model {args.model}: no conf/model/{args.model}.yaml; choose one of "
                         f"{', '.join(sorted(p.stem for p in model_file.parent.glob('*.yaml')))}")
    model_cfg = OmegaConf.load(model_file)
    if args.prompt_len < 1 or args.new_tokens < 1 or args.prompt_len + args.new_tokens > model_cfg.seq_len:
        raise SystemExit(f"--prompt-len {args.prompt_len} + --new-tokens {args.new_tokens} must be >= 1 each and fit "
                         f"model.seq_len={model_cfg.seq_len} of --model {args.model}")
    import rope

    names = []
    for name in rope_names(args.ropes):
        reason = rope.get(name).unavailable_reason(device)
        if reason:
            print(f"skipping {name}: {reason}", flush=True)
        else:
            names.append(name)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    rows = measure(model_cfg, names, args, device)
    text = table(rows, args, model_cfg, device)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "generate_bench.md").write_text(text + "\n")
    write_csv(out / "generate_bench.csv", rows)
    (out / "generate_bench.json").write_text(json.dumps(rows, indent=2))
    print(text)
    return rows


if __name__ == "__main__":
    main()
