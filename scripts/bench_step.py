"""What a RoPE kernel costs inside a real training step (GPU).

Times one GPT training step (forward, backward, fused AdamW step; bf16 autocast) for each RoPE
implementation (default: every registered one, ``rope.available()``; ``none`` is the baseline of
the "vs rope=none" column), eager and under ``torch.compile``, on random tokens, and reports each
one's step time against ``rope=none`` and ``rope=torch``. Default: GPT-2 small (124M with the
50257-token GPT-2 vocabulary), B=32, T=1024. Timers and writers: ``scripts/benchlib.py``.

    python -m scripts.bench_step [--ropes none,torch,triton_v4] [--batch 32] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch
from omegaconf import OmegaConf

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # also runnable as `python scripts/bench_step.py`
    sys.path.insert(0, str(ROOT))

from scripts.benchlib import event_times, markdown_table, require_cuda, rope_names, write_csv  # noqa: E402

CONF = ROOT / "conf"


def rope_config(name: str):
    """The ``conf/rope/<name>.yaml`` group (a registered name without one: its defaults)."""
    path = CONF / "rope" / f"{name}.yaml"
    return OmegaConf.load(path) if path.is_file() else OmegaConf.create({"name": name})


def time_step(model_cfg, name: str, mode: str, args: argparse.Namespace) -> dict:
    """Median milliseconds of one training step of the model with RoPE ``name`` in ``mode``."""
    from llm.model import build_model
    from llm.optim import build_optimizers

    device = torch.device("cuda")
    torch.manual_seed(0)
    model = build_model(model_cfg, rope_config(name), args.vocab).to(device)
    optimizers = build_optimizers(model, {"name": "adamw", "lr": 1e-4, "weight_decay": 0.1}, device)
    step_model = torch.compile(model) if mode == "compile" else model
    batch = torch.randint(0, args.vocab, (args.batch, model_cfg.seq_len), device=device)

    def step() -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            _, loss = step_model(batch, batch)
        loss.backward()
        for opt in optimizers:
            opt.step()
            opt.zero_grad(set_to_none=True)

    times = event_times(step, args.warmup, args.iters)
    return {"mode": mode, "rope": name, "step_ms": statistics.median(times), "min_ms": min(times),
            "params_M": model.num_params() / 1e6}


def relative(rows: list[dict]) -> None:
    """Add each row's overhead against rope=none and rope=torch of the same mode (None if absent)."""
    for r in rows:
        for key, base_name in (("overhead_vs_none_pct", "none"), ("vs_torch_pct", "torch")):
            base = [b for b in rows if b["mode"] == r["mode"] and b["rope"] == base_name]
            r[key] = 100.0 * (r["step_ms"] / base[0]["step_ms"] - 1.0) if base else None


def table(rows: list[dict], args: argparse.Namespace, seq_len: int) -> str:
    head = (f"GPT training step, model={args.model} ({rows[0]['params_M']:.0f}M), B={args.batch}, "
            f"T={seq_len}, bf16 autocast, fused AdamW, {torch.cuda.get_device_name()}; "
            f"median of {args.iters} steps after {args.warmup} warm-up")

    def pct(v: float | None) -> str:
        return f"{v:+.1f}%" if v is not None else "n/a"

    body = ([r["mode"], r["rope"], f"{r['step_ms']:.2f}", pct(r["overhead_vs_none_pct"]), pct(r["vs_torch_pct"])]
            for r in rows)
    return "\n".join([head, "", *markdown_table(["mode", "rope", "step (ms)", "vs rope=none", "vs rope=torch"],
                                                body, 2)])


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="gpt2_small", help="a conf/model preset")
    p.add_argument("--ropes", default=None, help="comma-separated implementations (default: every registered one)")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--vocab", type=int, default=50257, help="50257 = GPT-2's vocabulary (the 124M model)")
    p.add_argument("--modes", default="eager,compile")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--out", default="outputs/bench")
    args = p.parse_args(argv)
    require_cuda("bench_step")
    import rope

    names = [n for n in rope_names(args.ropes) if rope.get(n).unavailable_reason(torch.device("cuda")) is None]
    torch.backends.cuda.matmul.allow_tf32 = True
    model_cfg = OmegaConf.load(CONF / "model" / f"{args.model}.yaml")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for mode in args.modes.split(","):
        for name in names:
            rows.append(time_step(model_cfg, name, mode, args))  # the model dies with the call's frame
            print(f"{mode:8s} {name:10s} median {rows[-1]['step_ms']:.2f} ms", flush=True)
            torch._dynamo.reset()
            torch.cuda.empty_cache()
    relative(rows)
    text = table(rows, args, model_cfg.seq_len)
    (out / "step_bench.md").write_text(text + "\n")
    write_csv(out / "step_bench.csv", rows)
    (out / "step_bench.json").write_text(json.dumps(rows, indent=2))
    print(text)


if __name__ == "__main__":
    main()
