"""What a user's own compiled model pays for each RoPE entry: the issue-style model, not the project's (GPU).

    python -m bench.user_model                                   # head dims 48, 64, 128; none, torch, triton_v4
    python -m bench.user_model --head-dims 48 --profile          # and where the step's GPU time goes, per entry
    python -m bench.user_model --smoke                           # CPU, tiny, seconds

Why a model of its own: a user adds RoPE to a model written their way and compiles the whole of it, so the
Triton entry meets Inductor's fusions around it, which ``bench.step`` (the project's model) does not show for
every head size. The model: bf16 autocast, ``torch.compile(model)``, ``--heads`` heads of D (width heads x D),
``--layers`` blocks of ``qkv = Linear(rms_norm(x))``, ``q, k, v = rotary.rotate_qkv(qkv, heads)``,
``F.scaled_dot_product_attention`` on (B, H, T, D) views (causal), an output projection and a GELU MLP; a tied
head over ``--vocab`` tokens, cross-entropy, fused AdamW. One row per (head dim, entry) in
``bench/results/user_model.csv``: the median step, its cost over ``none`` and, against the compiled PyTorch
formula (``torch``), the ratio of medians with a 95% bootstrap interval over the interleaved rounds (as
``bench.step``), and the GPU kernels a step launches.
"""

from __future__ import annotations

import argparse
import statistics

import torch
import torch.nn.functional as F
from torch import nn

from bench import harness
from bench.step import allow_compiled_models, rotated, step_times
from llm.cli import OneLineParser

NAME = "user_model"
COLUMNS = (*harness.ENV_COLUMNS, "head_dim", "shape", "implementation", "time_us", "min_us", "steps", "rounds",
           "vs_none_pct", "vs_torch_pct", "vs_torch_lo", "vs_torch_hi", "kernels_per_step")


class Block(nn.Module):
    def __init__(self, width: int, heads: int, rotary: nn.Module | None) -> None:
        super().__init__()
        self.heads, self.rotary = heads, rotary
        self.qkv, self.proj = nn.Linear(width, 3 * width, bias=False), nn.Linear(width, width, bias=False)
        self.fc, self.out = nn.Linear(width, 4 * width, bias=False), nn.Linear(4 * width, width, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        qkv = self.qkv(F.rms_norm(x, (C,)))
        if self.rotary is None:
            q, k, v = qkv.view(B, T, 3, self.heads, C // self.heads).unbind(2)
        else:
            q, k, v = self.rotary.rotate_qkv(qkv, self.heads)
        y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.out(F.gelu(self.fc(F.rms_norm(x, (C,)))))


class UserModel(nn.Module):
    def __init__(self, entry: str, head_dim: int, args: argparse.Namespace) -> None:
        super().__init__()
        import rope

        width = args.heads * head_dim
        self.emb = nn.Embedding(args.vocab, width)
        self.blocks = nn.ModuleList(
            Block(width, args.heads, None if entry == "none" else rope.build(entry, head_dim, args.seq))
            for _ in range(args.layers))
        self.head = nn.Linear(width, args.vocab, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        x = self.emb(idx)
        for block in self.blocks:
            x = block(x)
        logits = self.head(F.rms_norm(x, (x.shape[-1],)))
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))


def make_step(entry: str, head_dim: int, args: argparse.Namespace):
    """One compiled training step of the user model with RoPE ``entry`` (``none``: no rotation)."""
    torch.manual_seed(0)
    model = UserModel(entry, head_dim, args).to(args.device)
    compiled = torch.compile(model, backend="inductor" if args.device.type == "cuda" else "aot_eager")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=args.device.type == "cuda")
    idx = torch.randint(0, args.vocab, (args.batch, args.seq), device=args.device)

    def step() -> None:
        with torch.autocast(args.device.type, dtype=torch.bfloat16, enabled=args.device.type == "cuda"):
            loss = compiled(idx, idx)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def kernels_per_step(step, device: torch.device) -> tuple[float, list]:
    """GPU kernels a step launches, and the profiler's per-kernel averages of two steps (empty off the GPU)."""
    if device.type != "cuda":
        return float("nan"), []
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(2):
            step()
        torch.cuda.synchronize()
    launched = [e for e in prof.events() if e.device_type == DeviceType.CUDA]
    return len(launched) / 2, prof.key_averages()


def measure(head_dim: int, names: list[str], args: argparse.Namespace, env: dict, log) -> list[dict]:
    from llm.report.stats import median_ratio_interval

    steps, counts = {}, {}
    for name in names:
        torch._dynamo.reset()
        steps[name] = make_step(name, head_dim, args)
        for _ in range(args.warmup):
            steps[name]()
        harness.synchronize(args.device)
        counts[name], averages = kernels_per_step(steps[name], args.device)
        if args.profile and averages:
            print(f"\n== D={head_dim} {name}: GPU kernels by self time, two steps ==")
            print(averages.table(sort_by="self_device_time_total", row_limit=14, max_name_column_width=60))
        log(f"D={head_dim} {name}: compiled and warm")
    times: dict[str, list[list[float]]] = {n: [] for n in steps}
    for r in range(args.rounds):
        for name in rotated(list(steps), r):
            times[name].append(step_times(steps[name], args.steps, args.device))
    medians = {n: statistics.median(t for rnd in times[n] for t in rnd) for n in steps}
    rows = []
    for name in steps:
        flat = [t for rnd in times[name] for t in rnd]
        row = {**env, "head_dim": head_dim, "shape": f"B{args.batch}xT{args.seq} {args.heads}x{head_dim} "
                                                     f"L{args.layers} vocab {args.vocab}",
               "implementation": name, "time_us": medians[name], "min_us": min(flat), "steps": len(flat),
               "rounds": args.rounds, "kernels_per_step": counts[name],
               "vs_none_pct": 100 * (medians[name] / medians["none"] - 1) if "none" in medians else None,
               "vs_torch_pct": None, "vs_torch_lo": None, "vs_torch_hi": None}
        if "torch" in times and name != "torch":
            row["vs_torch_pct"], row["vs_torch_lo"], row["vs_torch_hi"] = \
                median_ratio_interval(times[name], times["torch"])
        rows.append(row)
        log(f"D={head_dim} {name}: {medians[name] / 1e3:.3f} ms"
            + ("" if row["vs_none_pct"] is None else f", {row['vs_none_pct']:+.1f}% over none")
            + ("" if row["vs_torch_pct"] is None else
               f", vs torch {row['vs_torch_pct']:+.2f}% [{row['vs_torch_lo']:+.2f}, {row['vs_torch_hi']:+.2f}]"))
    return rows


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = OneLineParser(prog="python -m bench.user_model", description=__doc__,
                      formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--head-dims", default=None, help="comma-separated even head dims, each one every entry takes "
                                                     "(the partial variant: multiples of 4; default 48,64,128; "
                                                     "--smoke 8)")
    p.add_argument("--impls", default="none,torch,triton_v4", help="registry names, and none (no RoPE)")
    #: each sized option's (default, --smoke default): a value given is kept, with --smoke too
    sizes = {"heads": (8, 2), "layers": (6, 1), "batch": (24, 2), "seq": (512, 8), "vocab": (50304, 64),
             "warmup": (3, 1), "rounds": (6, 2), "steps": (5, 1)}
    helps = {"heads": "attention heads", "layers": "blocks", "batch": "batch size", "seq": "tokens per sequence",
             "vocab": "vocabulary", "warmup": "untimed steps after the compile",
             "rounds": "rounds of interleaved timing", "steps": "timed steps per round and entry"}
    for name, (default, smoke) in sizes.items():
        p.add_argument(f"--{name}", type=int, default=None,
                       help=f"{helps.get(name, name)} (default {default}; --smoke {smoke})")
    p.add_argument("--profile", action="store_true", help="print each entry's GPU kernels by time (on a GPU)")
    harness.add_common_args(p, NAME, rope_path=False)
    args = p.parse_args(argv)
    head_dims_text = args.head_dims or ("8" if args.smoke else "48,64,128")
    try:
        args.head_dims = [int(d) for d in harness.split_list(head_dims_text)]
    except ValueError:
        args.head_dims = []
    for name, (default, smoke) in sizes.items():
        if getattr(args, name) is None:
            setattr(args, name, smoke if args.smoke else default)
    if not args.head_dims or any(d <= 0 or d % 2 for d in args.head_dims):
        p.error(f"--head-dims takes positive even numbers, comma-separated, got {head_dims_text!r}")
    if min(args.rounds, args.steps) < 1 or args.warmup < 0:
        p.error("--rounds and --steps must be at least 1, --warmup at least 0")
    if min(args.heads, args.layers, args.batch, args.seq) < 1 or args.vocab < 2:
        p.error("--heads, --layers, --batch and --seq must be at least 1, --vocab at least 2")
    if not harness.split_list(args.impls):
        p.error(f"--impls takes comma-separated registry names and none, got {args.impls!r}")
    args.parser = p
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    log = harness.Progress()
    args.device = harness.pick_device(args.smoke, "bench.user_model")
    rope_root = harness.import_rope(None)
    names = harness.split_list(args.impls)
    kept = harness.registered([n for n in names if n != "none"], args.device, args.parser, log)
    names = [n for n in names if n == "none" or n in kept]
    if not names:
        args.parser.error(f"--impls {args.impls}: none of them runs on {args.device.type} here")
    import rope

    for head_dim in args.head_dims:  # a head dim an entry cannot take: said before any work, not at its turn
        for name in kept:
            try:
                rope.check_args(name, head_dim, args.seq)
            except rope.RopeArgumentError as exc:
                args.parser.error(f"--head-dims {head_dim}: {name}: {exc}")
    if args.profile and args.device.type != "cuda":
        log("--profile: the GPU's kernels are listed on a GPU only; none here")
    results = harness.ResultsCsv(harness.out_path(args, NAME), COLUMNS)
    env = harness.environment(args.device, rope_root)
    log(f"{env['gpu']}, rope code {env['commit']}: head dims {args.head_dims} x {', '.join(names)}")
    allow_compiled_models(len(names))
    for head_dim in args.head_dims:
        results.append(measure(head_dim, names, args, env, log))
        if args.device.type == "cuda":
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    harness.run_main(main, "bench.user_model")
