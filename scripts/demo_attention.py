"""The RoPE kernels in an attention layer of one's own: ``rope.RoPEAttention`` and ``rope.apply``.

Shows, on random inputs: the shapes in and out; causal masking (changing later tokens leaves the
outputs of earlier ones untouched); RoPE's relative-position property (a query-key score depends on
the distance of the two positions, not on where they are); and decoding with the layer's KV cache
(a prompt, then one token at a time, equal to the whole sequence at once). Nothing of ``llm/`` is
imported. Runs on the CPU with ``--impl torch`` (the default); the Triton kernels need a GPU (or
``TRITON_INTERPRET=1``).

    python -m scripts.demo_attention [--impl torch|triton_v4|...] [--device auto|cpu|cuda]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # also runnable as `python scripts/demo_attention.py`
    sys.path.insert(0, str(ROOT))

import rope  # noqa: E402

D_MODEL, HEADS, T, PROMPT = 64, 4, 12, 8


def shapes(attn: rope.RoPEAttention, x: torch.Tensor, impl: str) -> None:
    y = attn(x)
    print(f"RoPEAttention(d_model={D_MODEL}, n_heads={HEADS}, impl={impl!r}): x {tuple(x.shape)} -> y {tuple(y.shape)}")
    q = torch.randn(2, T, HEADS, D_MODEL // HEADS, device=x.device)
    k = torch.randn(2, T, 2, D_MODEL // HEADS, device=x.device)  # fewer key heads (grouped-query attention)
    q2, k2 = rope.apply(q, k, seq_len=64, theta=10000.0, impl=impl)
    print(f"rope.apply(q, k, seq_len=64, impl={impl!r}): q {tuple(q.shape)} -> {tuple(q2.shape)}, "
          f"k {tuple(k.shape)} -> {tuple(k2.shape)}")


def causality(attn: rope.RoPEAttention, x: torch.Tensor) -> tuple[float, float]:
    """Max change of the outputs before and from position PROMPT when the tokens from PROMPT change."""
    y = attn(x)
    x2 = x.clone()
    x2[:, PROMPT:] = torch.randn_like(x2[:, PROMPT:])
    y2 = attn(x2)
    before = (y2[:, :PROMPT] - y[:, :PROMPT]).abs().max().item()
    after = (y2[:, PROMPT:] - y[:, PROMPT:]).abs().max().item()
    print(f"causal: new tokens at positions >= {PROMPT} change the outputs before them by {before:.1e}, "
          f"theirs by {after:.2f}")
    return before, after


def relative_positions(impl: str, device: torch.device, shift: int = 20) -> tuple[float, float]:
    """Max change of the q.k scores when every position moves by ``shift``, rotated and not."""
    q = torch.randn(1, T, 1, D_MODEL // HEADS, device=device)
    k = torch.randn(1, T, 1, D_MODEL // HEADS, device=device)

    def scores(offset: int) -> torch.Tensor:
        pos = torch.arange(offset, offset + T, device=device)
        q2, k2 = rope.apply(q, k, seq_len=64, impl=impl, variant="full", positions=pos)
        return q2[0, :, 0] @ k2[0, :, 0].T

    moved = (scores(shift) - scores(0)).abs().max().item()
    rotated = (scores(0) - q[0, :, 0] @ k[0, :, 0].T).abs().max().item()
    print(f"relative positions: every position + {shift} changes the q.k scores by {moved:.1e} "
          f"(the rotation itself changes them by {rotated:.2f})")
    return moved, rotated


def cached_decoding(attn: rope.RoPEAttention, x: torch.Tensor) -> float:
    """Max difference between the whole sequence at once and a prompt then one token at a time."""
    full = attn(x)
    cache = attn.new_cache(max_len=T)
    pieces = [attn(x[:, :PROMPT], cache=cache)]
    print(f"KV cache: prompt of {PROMPT} tokens, max |diff| to the full pass {_diff(pieces[0], full[:, :PROMPT]):.1e}")
    for t in range(PROMPT, T):
        pieces.append(attn(x[:, t:t + 1], cache=cache))
        diff = _diff(pieces[-1], full[:, t:t + 1])
        print(f"  decode position {t} (cache holds {cache.length}): max |diff| {diff:.1e}")
    worst = _diff(torch.cat(pieces, dim=1), full)
    print(f"KV cache decoding equals the full pass within {worst:.1e}")
    return worst


def _diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a - b).abs().max().item()


def main(argv: list[str] | None = None) -> dict[str, float]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--impl", default="torch", help=f"a RoPE implementation: {', '.join(rope.available())}")
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"), help="auto: cuda if present")
    args = p.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: no CUDA GPU here (this torch sees none); use --device cpu or auto")
    device = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device)
    torch.manual_seed(0)
    try:
        attn = rope.RoPEAttention(D_MODEL, HEADS, dropout=0.1, impl=args.impl, max_seq_len=64).to(device).eval()
        x = torch.randn(2, T, D_MODEL, device=device)
        with torch.no_grad():
            shapes(attn, x, args.impl)
            before, after = causality(attn, x)
            moved, rotated = relative_positions(args.impl, device)
            worst = cached_decoding(attn, x)
    except (ValueError, RuntimeError) as e:  # a bad --impl, or a kernel that cannot run here: one line, exit 2
        print(f"Error: {str(e).strip().splitlines()[0]}", file=sys.stderr)
        raise SystemExit(2) from None
    return {"causal_before": before, "causal_after": after, "relative_moved": moved, "relative_rotated": rotated,
            "cache_max_diff": worst}


if __name__ == "__main__":
    main()
