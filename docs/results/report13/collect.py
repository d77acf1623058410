"""Issue #13's closing-note tables from one run of ``docs/results/report13/run.sh`` (parts a, b, c).

    python docs/results/report13/collect.py DIR      # DIR holds a/, b/, c/ as the parts wrote them

Why a script: the report is some 400 numbers in a dozen files, and copying them by hand into the note is where
errors enter. It reads the benchmarks' CSVs and prints markdown: the head-dim table at #13's eleven head dims beside
Liger and compiled torch, each sweep's ranges with the head dims under the target or under Liger, the layout,
rotary_dim and cu_seqlens rows, the tiny-shape host overheads and the training steps. A part missing is said, not
guessed.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

DIMS = (16, 32, 48, 64, 80, 96, 112, 128, 160, 192, 256)
MAIN, PEERS = "triton_v4", ("liger", "torch_compiled")


def _rows(path: Path) -> list[dict]:
    return list(csv.DictReader(path.read_text().splitlines())) if path.exists() else []


def _pct(r: dict) -> tuple[float, float]:
    return float(r["fwd_pct_copy"]), float(r["bwd_pct_copy"])


def _span(values: list[float]) -> str:
    return f"{min(values):.1f}-{max(values):.1f}" if values else "n/a"


def _by_dim(rows: list[dict]) -> dict[int, dict[str, tuple[float, float]]]:
    out: dict[int, dict[str, tuple[float, float]]] = {}
    for r in rows:
        out.setdefault(int(r["D"]), {})[r["impl"]] = _pct(r)
    return out


def head_dim_table(sweeps: dict[str, dict]) -> list[str]:
    lines = ["| D | " + " | ".join(map(str, DIMS)) + " |", "|---|" + "---|" * len(DIMS)]
    for variant, by in sweeps.items():
        for impl in (MAIN, *PEERS):
            cells = [f"{by[d][impl][0]:.1f}/{by[d][impl][1]:.1f}" if impl in by.get(d, {}) else "" for d in DIMS]
            lines.append(f"| {variant}: {impl} | " + " | ".join(cells) + " |")
    return lines


def sweep_summary(name: str, by: dict[int, dict], target: float) -> str:
    """One line: the main entry's ranges, the head dims under ``target`` or under Liger in either direction."""
    dims = sorted(d for d in by if MAIN in by[d])
    fwd, bwd = [by[d][MAIN][0] for d in dims], [by[d][MAIN][1] for d in dims]
    misses = sorted((d for d in dims if min(by[d][MAIN]) < target), key=lambda d: min(by[d][MAIN]))
    under = [f"{d} ({by[d][MAIN][0]:.1f}/{by[d][MAIN][1]:.1f})" for d in (misses if len(misses) <= 12 else misses[:5])]
    if len(misses) > 12:  # a long list says little: how many, and the lowest
        under = [f"{len(misses)} head dims; the lowest {', '.join(under)}"]
    below = [d for d in dims if "liger" in by[d]
             and any(m < p for m, p in zip(by[d][MAIN], by[d]["liger"], strict=True))]
    peers = " | ".join(_span([v for d in dims if p in by[d] for v in by[d][p]]) for p in PEERS)
    return (f"| {name} | {len(dims)} | {_span(fwd)} | {_span(bwd)} | {', '.join(under) or 'none'} "
            f"| {', '.join(map(str, below)) or 'none'} | {peers} |")


def layouts(rows: list[dict]) -> list[str]:
    lines = ["| D | layout | rotary_dim | " + " | ".join(f"{i} fwd/bwd" for i in (MAIN, "triton_v2", *PEERS)) + " |",
             "|---|---|---|" + "---|" * 4]
    keys = sorted({(int(r["D"]), r["layout"], int(r["rotary_dim"])) for r in rows}, key=lambda k: (k[0], k[1], -k[2]))
    for key in keys:
        got = {r["impl"]: _pct(r) for r in rows if (int(r["D"]), r["layout"], int(r["rotary_dim"])) == key}
        cells = [f"{got[i][0]:.1f}/{got[i][1]:.1f}" if i in got else "" for i in (MAIN, "triton_v2", *PEERS)]
        lines.append(f"| {key[0]} | {key[1]} | {key[2]} | " + " | ".join(cells) + " |")
    return lines


def packed(rows: list[dict]) -> list[str]:
    lines = ["| total tokens | sequences | impl | fwd cu % | bwd % | repeated cu us | new cu us |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['total_tokens']} | {r['n_seq']} | {r['impl']} | {float(r['fwd_cu_pct_copy']):.1f} "
                     f"| {float(r['bwd_pos_pct_copy']):.1f} | {float(r['cu_overhead_us']):.1f} "
                     f"| {float(r['cu_new_overhead_us']):.1f} |")
    return lines


def overhead(rows: list[dict]) -> list[str]:
    mine = [r for r in rows if r["impl"] == MAIN]
    lines = ["| shape | positions | grad | call us | launch us | call - launch us [q1, q3] | autograd floor us |",
             "|---|---|---|---|---|---|---|"]
    for r in mine:
        floor = f"{float(r['autograd_floor_us']):.1f}" if r["autograd_floor_us"] else ""
        lines.append(f"| {r['shape']} | {r['positions']} | {r['grad']} | {float(r['call_host_us']):.1f} "
                     f"| {float(r['launch_host_us']):.1f} | {float(r['call_minus_launch_us']):.1f} "
                     f"[{float(r['call_minus_launch_q1_us']):.1f}, {float(r['call_minus_launch_q3_us']):.1f}] "
                     f"| {floor} |")
    over = [r for r in mine if float(r["call_minus_launch_us"]) > 10]
    lines.append(f"\n{len(mine) - len(over)} of {len(mine)} cases at or under 10 us"
                 + (": over, " + ", ".join(f"{r['shape']} {r['positions']} {r['grad']}" for r in over) if over else ""))
    return lines


def steps(rows: list[dict]) -> list[str]:
    lines = ["| model | mode | rope | step ms | vs rope=none | vs torch, paired by round [95% CI] |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        paired = (f"{float(r['vs_torch_round_pct']):+.1f}% [{float(r['vs_torch_round_lo']):+.1f}, "
                  f"{float(r['vs_torch_round_hi']):+.1f}]" if r["vs_torch_round_pct"] else "")
        lines.append(f"| {r['model']} | {r['mode']} | {r['rope']} | {float(r['step_ms']):.2f} "
                     f"| {float(r['overhead_vs_none_pct']):+.1f}% | {paired} |")
    return lines


def main(root: Path) -> None:
    def section(title: str, path: Path, render) -> None:
        rows = _rows(path)
        print(f"\n### {title}\n")
        print("\n".join(render(rows)) if rows else f"(missing: {path})")

    full, part = _by_dim(_rows(root / "a/full/headdim_32M.csv")), _by_dim(_rows(root / "b/part/headdim_32M.csv"))
    gpu = (root / "a/gpu.txt").read_text().strip() if (root / "a/gpu.txt").exists() else "(no a/gpu.txt)"
    print(f"GPU: {gpu}\n\n### Head dims at 32M elements (% of copy, forward/backward)\n")
    print("\n".join(head_dim_table({"full": full, "partial": part})))
    print("\n### Sweeps\n\n| sweep | head dims | triton_v4 fwd | bwd | under the target | under Liger | Liger | "
          "compiled torch |\n|---|---|---|---|---|---|---|---|")
    print(sweep_summary("full, even halves (32M, 93)", {d: v for d, v in full.items() if d % 4 == 0}, 93))
    print(sweep_summary("full, odd halves (32M, 93)", {d: v for d, v in full.items() if d % 4 == 2}, 93))
    print(sweep_summary("partial (32M, 93)", part, 93))
    for name in ("full256", "part256"):
        print(sweep_summary(f"{name} (256M, 97)", _by_dim(_rows(root / f"b/{name}/headdim_256M.csv")), 97))
    section("Layouts and rotary_dim (32M)", root / "c/modes/layouts.csv", layouts)
    section("Packed sequences (cu_seqlens)", root / "c/modes/packed.csv", packed)
    section("Host time at tiny shapes (triton_v4)", root / "c/modes/overhead.csv", overhead)
    for run in ("seed004", "seed004_eager", "gpt2"):  # the compiled seed004 step finely (point 4), then the rest
        section(f"Training step: {run}", root / f"c/step_{run}/step_bench.csv", steps)


if __name__ == "__main__":
    if len(sys.argv) != 2 or not Path(sys.argv[1]).is_dir():
        sys.exit("usage: python docs/results/report13/collect.py DIR (the folder holding the parts a/, b/, c/)")
    main(Path(sys.argv[1]))
