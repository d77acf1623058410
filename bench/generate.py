"""Decoding speed with and without the KV cache, and the share of RoPE in a decode step.

    python -m bench.generate --model small                      # every registered implementation, batches 1 and 16
    python -m bench.generate --model gpt2_small --impls none,torch,triton_v4,liger
    python -m bench.generate --smoke                            # CPU, the tiny model, seconds

For a ``conf/model`` preset with random weights (weights do not change the timing), per RoPE implementation and
batch size: ``tok_s_cache`` / ``tok_s_no_cache``, new tokens of all rows per second of greedy decoding of
``--new-tokens`` after a ``--prompt-len`` prompt with the KV cache and without it (every token recomputes the
prefix), prompt included; ``time_us``, one cached decode step (one position per row, at position ``--prompt-len``);
``rope_us``, the RoPE calls of that step alone (``rotate_qkv`` of a one-position projection with ``positions=``,
once per layer). Wall-clock medians with the device synchronised around each call: at one position per row a
decode step is bound by kernel launches and host work, which is what a user waits for. bf16 autocast on CUDA,
float32 on the CPU. One row per (implementation, batch) is appended to ``bench/results/generate.csv``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from contextlib import nullcontext

import torch

from bench import harness

NAME = "generate"
COLUMNS = (*harness.ENV_COLUMNS, "model", "shape", "implementation", "batch", "time_us", "rope_us",
           "rope_share_pct", "step_vs_none_pct", "tok_s_cache", "tok_s_no_cache")


def wall_us(fn: Callable[[], object], device: torch.device, warmup: int, iters: int) -> float:
    """Median wall-clock microseconds of ``fn``, the device synchronised before and after each call."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        harness.synchronize(device)
        t0 = time.perf_counter()
        fn()
        harness.synchronize(device)
        times.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(times)


def throughput(model, batch: int, args: argparse.Namespace, autocast, use_cache: bool) -> float:
    """New tokens per second of greedy decoding (every row), prompt processing included."""
    from llm.generation import GREEDY, generate

    prompt = torch.randint(0, args.vocab, (batch, args.prompt_len), device=args.device)

    def run() -> None:
        with autocast:
            generate(model, prompt, args.new_tokens, GREEDY, use_cache=use_cache)

    return batch * args.new_tokens / (wall_us(run, args.device, 1, args.iters) / 1e6)


@torch.no_grad()
def decode_step(model, batch: int, args: argparse.Namespace, autocast) -> tuple[float, float]:
    """(us of one cached decode step at position ``prompt_len``, us of its RoPE calls alone)."""
    device = args.device
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

    return (wall_us(step, device, args.warmup, args.iters * 10),
            wall_us(rope_calls, device, args.warmup, args.iters * 10))


def measure(model_cfg, names: list[str], args: argparse.Namespace, env: dict, log) -> list[dict]:
    from llm.model import build_model

    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if args.device.type == "cuda" else nullcontext()
    rows = []
    for name in names:
        torch.manual_seed(0)  # the same weights for every implementation: RoPE has no parameters
        model = build_model(model_cfg, harness.rope_config(name), args.vocab).to(args.device).eval()
        for batch in args.batches:
            step_us, rope_us = decode_step(model, batch, args, autocast)
            row = {**env, "model": args.model, "shape": f"prompt {args.prompt_len} + {args.new_tokens}",
                   "implementation": name, "batch": batch, "time_us": step_us, "rope_us": rope_us,
                   "rope_share_pct": 100 * rope_us / step_us, "step_vs_none_pct": None,
                   "tok_s_cache": throughput(model, batch, args, autocast, True),
                   "tok_s_no_cache": throughput(model, batch, args, autocast, False)}
            rows.append(row)
            log(f"{name} B={batch}: cache {row['tok_s_cache']:.1f} tok/s, no cache {row['tok_s_no_cache']:.1f} tok/s, "
                f"step {step_us / 1e3:.3f} ms, rope {rope_us / 1e3:.3f} ms")
        del model
        if args.device.type == "cuda":
            torch.cuda.empty_cache()
    for r in rows:  # the step against the same step without RoPE
        base = [b for b in rows if b["implementation"] == "none" and b["batch"] == r["batch"]]
        r["step_vs_none_pct"] = 100 * (r["time_us"] / base[0]["time_us"] - 1) if base else None
    return rows


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.generate", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=None, help="a conf/model preset (default small; --smoke: tiny)")
    p.add_argument("--impls", default=None, help="comma-separated implementations (default: every registered one "
                                                 "that runs here; --smoke: none,torch)")
    p.add_argument("--batches", default=None, help="comma-separated batch sizes (default 1,16; --smoke: 1,2)")
    p.add_argument("--prompt-len", type=int, default=None, help="default 128 (--smoke: 4)")
    p.add_argument("--new-tokens", type=int, default=None, help="default 128 (--smoke: 3)")
    p.add_argument("--vocab", type=int, default=None, help="default 50257, GPT-2's (--smoke: 256)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--iters", type=int, default=5, help="timed generations (decode steps: 10x as many)")
    harness.add_common_args(p, NAME)
    args = p.parse_args(argv)
    smoke = args.smoke
    args.model = args.model or ("tiny" if smoke else "small")
    args.impls = args.impls or ("none,torch" if smoke else None)
    try:
        args.batches = [int(b) for b in harness.split_list(args.batches or ("1,2" if smoke else "1,16"))]
    except ValueError:
        p.error(f"--batches takes comma-separated positive integers, got {args.batches!r}")
    args.prompt_len = args.prompt_len or (4 if smoke else 128)
    args.new_tokens = args.new_tokens or (3 if smoke else 128)
    args.vocab = args.vocab or (256 if smoke else 50257)
    if smoke:
        args.warmup, args.iters = 0, 1
    if not args.batches or min(args.batches) < 1 or args.iters < 1 or args.warmup < 0:
        p.error("--batches and --iters must be positive, --warmup at least 0")
    args.model_cfg = harness.model_config(args.model, p)
    if smoke:  # one small layer: seconds on a CPU
        args.model_cfg.update(n_layer=1, n_embd=32, n_head=2, seq_len=16)
    if min(args.prompt_len, args.new_tokens) < 1 or args.prompt_len + args.new_tokens > args.model_cfg.seq_len:
        p.error(f"--prompt-len {args.prompt_len} + --new-tokens {args.new_tokens} must be at least 1 each and fit "
                f"model.seq_len={args.model_cfg.seq_len} of --model {args.model}")
    args.parser = p
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    log = harness.Progress()
    args.device = harness.pick_device(args.smoke, "bench.generate")
    rope_root = harness.import_rope(args.rope_path)
    import rope

    names = harness.registered(harness.split_list(args.impls) or rope.available(), args.device, args.parser, log)
    results = harness.ResultsCsv(harness.out_path(args, NAME), COLUMNS)
    env = harness.environment(args.device, rope_root, args.commit)
    if args.device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    results.append(measure(args.model_cfg, names, args, env, log))
    log(f"rows appended to {results.path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
