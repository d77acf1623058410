"""What a RoPE kernel costs inside a real training step (GPU).

Times one GPT training step (forward, backward, fused AdamW step; bf16 autocast) for each RoPE
implementation, eager and under ``torch.compile``, on random tokens, and reports each one's step
time against ``rope=none``. Default: GPT-2 small (124M with the 50257-token GPT-2 vocabulary),
B=32, T=1024.

    python -m scripts.bench_step [--ropes none,torch,triton_v4] [--batch 32] [--out DIR]
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
from pathlib import Path

import torch
from omegaconf import OmegaConf

from llm.model import build_model
from llm.optim import build_optimizers

CONF = Path(__file__).resolve().parent.parent / "conf"


def time_steps(model: torch.nn.Module, step_model, optimizers, batch: torch.Tensor, warmup: int,
               iters: int) -> list[float]:
    """Milliseconds per training step, measured with CUDA events around each step after warm-up."""
    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            _, loss = step_model(batch, batch)
        loss.backward()
        for opt in optimizers:
            opt.step()
            opt.zero_grad(set_to_none=True)

    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return times


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="gpt2_small", help="a conf/model preset")
    p.add_argument("--ropes", default="none,torch,triton_v4,triton_v2")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--vocab", type=int, default=50257, help="50257 = GPT-2's vocabulary (the 124M model)")
    p.add_argument("--modes", default="eager,compile")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--out", default="outputs/bench")
    args = p.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("bench_step needs a CUDA GPU")
    torch.backends.cuda.matmul.allow_tf32 = True
    model_cfg = OmegaConf.load(CONF / "model" / f"{args.model}.yaml")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    device = torch.device("cuda")
    rows = []
    for mode in args.modes.split(","):
        for name in args.ropes.split(","):
            rope_cfg = OmegaConf.load(CONF / "rope" / f"{name}.yaml")
            torch.manual_seed(0)
            model = build_model(model_cfg, rope_cfg, args.vocab).to(device)
            optimizers = build_optimizers(model, {"name": "adamw", "lr": 1e-4, "weight_decay": 0.1}, device)
            step_model = torch.compile(model) if mode == "compile" else model
            batch = torch.randint(0, args.vocab, (args.batch, model_cfg.seq_len), device=device)
            times = time_steps(model, step_model, optimizers, batch, args.warmup, args.iters)
            rows.append({"mode": mode, "rope": name, "step_ms": statistics.median(times),
                         "min_ms": min(times), "params_M": model.num_params() / 1e6})
            print(f"{mode:8s} {name:10s} median {rows[-1]['step_ms']:.2f} ms", flush=True)
            del model, optimizers, step_model
            torch._dynamo.reset()
            torch.cuda.empty_cache()
    for r in rows:
        base = next(b for b in rows if b["mode"] == r["mode"] and b["rope"] == "none")["step_ms"]
        r["overhead_vs_none_pct"] = 100.0 * (r["step_ms"] / base - 1.0)
        same_mode_torch = [b for b in rows if b["mode"] == r["mode"] and b["rope"] == "torch"]
        r["vs_torch_pct"] = 100.0 * (r["step_ms"] / same_mode_torch[0]["step_ms"] - 1.0) if same_mode_torch else None
    head = (f"GPT training step, model={args.model} ({rows[0]['params_M']:.0f}M), B={args.batch}, "
            f"T={model_cfg.seq_len}, bf16 autocast, fused AdamW, {torch.cuda.get_device_name()}; "
            f"median of {args.iters} steps after {args.warmup} warm-up")
    lines = [head, "", "| mode | rope | step (ms) | vs rope=none | vs rope=torch |", "|---|---|---|---|---|"]
    for r in rows:
        vs_torch = f"{r['vs_torch_pct']:+.1f}%" if r["vs_torch_pct"] is not None else "n/a"
        lines.append(f"| {r['mode']} | {r['rope']} | {r['step_ms']:.2f} | {r['overhead_vs_none_pct']:+.1f}% | "
                     f"{vs_torch} |")
    table = "\n".join(lines)
    (out / "step_bench.md").write_text(table + "\n")
    with open(out / "step_bench.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    (out / "step_bench.json").write_text(json.dumps(rows, indent=2))
    print(table)


if __name__ == "__main__":
    main()
