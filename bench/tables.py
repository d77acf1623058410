"""``docs/benchmarks.md``'s tables, rewritten from the rows in ``bench/results/*.csv``.

    python -m bench.tables                     # rewrites the part of docs/benchmarks.md between the markers
    python -m bench.tables --print             # prints it instead

Every table shows the current numbers: of each configuration measured more than once on a GPU, the row of the
newest commit in this checkout's git history (an older commit timed in the same run, as ``bench/compare_commits.sh``
does, never stands in for the current code), then the newest by date.
Rows carry their GPU, commit and date, so each table says which code and machine its numbers come from. Rows
timed with ``--tuning`` (forced launch settings) are experiments, not the product's numbers, and are left out; so
are kernel rows whose output was far from the reference (``max_err`` above ``bench.kernel.MAX_ERR``, the log's
WRONG): a wrong kernel's speed is no result; so are ``--smoke`` rows (the CPU at tiny shapes).
Nothing is written where a table could lose rows without a word: a CSV lacking a column of its benchmark, with a row
cut short or a word in a number's cell, or with no GPU row, and a ``--results`` folder without the CSV of a section
the page has, are each refused in one line (exit 2), the page left as it was.
"""

from __future__ import annotations

import argparse
import csv
import functools
import importlib
import math
import statistics
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from bench import harness
from bench.compare import CONFIG_KEYS, commit_ages, latest
from bench.kernel import COMMON_HEAD_DIMS, MAX_ERR
from llm.cli import OneLineParser

DOC = harness.ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- bench.tables: begin -->", "<!-- bench.tables: end -->"
IMPL_ORDER = ("triton_v4", "triton_v2", "cutedsl", "liger", "torch_compiled", "torch", "none")


def newest(rows: list[dict], key: tuple[str, ...]) -> dict[tuple, dict]:
    """Each ``key`` value's current row (module docstring): the newest commit in the history, then the newest date."""
    return latest(rows, key, commit_ages())


def rank(name: str) -> tuple[int, str]:
    """Where an implementation's column or line goes: ours first, then the peers, then the references."""
    return IMPL_ORDER.index(name) if name in IMPL_ORDER else len(IMPL_ORDER), name


def order(names: Iterable[str]) -> list[str]:
    return sorted(set(names), key=rank)


def size_class(elements: str) -> int:
    """``35782656`` -> 2**25: the power of two at or below a tensor's size, how the sweeps are asked for."""
    return 2 ** int(math.log2(int(elements)))


def size_label(n: int) -> str:
    return f"{n // 2**20}M" if n >= 2**20 else f"{n // 2**10}K" if n >= 2**10 else str(n)


def provenance(rows: Sequence[dict]) -> str:
    """Which commits, dates and versions a table's rows come from."""
    commits = ", ".join(sorted({r["commit"] for r in rows}))
    days = sorted({r["date"][:10] for r in rows})
    versions = ", ".join(sorted({f"torch {r['torch']}, triton {r['triton']}" for r in rows if r["torch"]}))
    return f"commits {commits}; {days[0]}" + (f" to {days[-1]}" if len(days) > 1 else "") + \
        (f"; {versions}" if versions else "")


def pivot(rows: Sequence[dict], line_key: Callable[[dict], tuple], cell: Callable[[dict, dict], str],
          headers: Sequence[str]) -> list[str]:
    """One table line per ``line_key`` value, one column per implementation; ``cell(forward, backward)``."""
    impls = order(r["implementation"] for r in rows)
    lines: dict[tuple, dict] = {}
    for r in rows:
        lines.setdefault(line_key(r), {}).setdefault(r["implementation"], {})[r["direction"]] = r
    body = []
    for key in sorted(lines, key=lambda k: tuple(int(x) if str(x).isdigit() else str(x) for x in k)):
        by = lines[key]
        body.append([*map(str, key), *(cell(by[i].get("forward", {}), by[i].get("backward", {})) if i in by else ""
                                       for i in impls)])
    return harness.markdown_table([*headers, *impls], body, len(headers))


def pct_cell(fwd: dict, bwd: dict) -> str:
    return " / ".join(f"{float(r['pct_copy_bw']):.1f}" if r else "-" for r in (fwd, bwd))


def computes_the_reference(row: dict) -> bool:
    """Whether a kernel row's outputs were within ``MAX_ERR`` of the reference's (a row without ``max_err``: yes)."""
    try:
        return float(row.get("max_err") or 0) <= MAX_ERR
    except ValueError:
        return False


def kernel_section(rows: list[dict]) -> list[str]:
    rows = [{**r, "heads": harness.heads_of(r)} for r in rows if not r["tuning"] and computes_the_reference(r)]
    current = newest(rows, ("gpu", "implementation", "direction", *CONFIG_KEYS))
    out = ["## Kernels (`python -m bench.kernel`)", "",
           "Forward / backward, % of the copy bandwidth measured on the same GPU in the same run (bf16 q and k, "
           "(B, T, H, D) = (B, 2048, 16, D) with B the smallest giving each tensor the size named unless other "
           "shapes are listed; bytes = q and k read once and written once)."]
    by_gpu: dict[tuple, list[dict]] = {}
    for r in current.values():
        by_gpu.setdefault((r["gpu"], size_class(r["elements"]), r["heads"] != "16", r["heads"]), []).append(r)
    for (gpu, size, _, heads), mine in sorted(by_gpu.items()):
        plain = [r for r in mine if r["positions"] == "arange" and r["layout"] == "half"
                 and r["rotary_dim"] == r["head_dim"]]
        common = [r for r in plain if int(r["head_dim"]) in COMMON_HEAD_DIMS]
        other = [r for r in mine if r not in plain]
        title = f"### {gpu}, {size_label(size)} elements per tensor" + ("" if heads == "16" else f", {heads} heads")
        out += ["", title, "", provenance(mine)]
        shapes = sorted({r["shape"] for r in mine if len(r["shape"].split("x")) == 4 and r["shape"].split("x")[1:3]
                         != ["2048", "16"]})
        if shapes:
            out[-1] += f"; shapes (B x T x H x D) {', '.join(shapes)}"
        if common:
            out += ["", "Head sizes of public models, the whole head rotated:", ""]
            out += pivot(common, lambda r: (r["head_dim"], r["variant"]), pct_cell, ["D", "variant"])
        if len(plain) > len(common):
            out += ["", "Every head dim measured (plain): lowest, median and highest of min(forward, backward) over "
                        "them, and where `triton_v4` is below Liger-Kernel:", ""]
            out += sweep_summary(plain)
        if other:
            out += ["", "Layouts, `rotary_dim` and positions:", ""]
            out += pivot(other, lambda r: (r["layout"], r["rotary_dim"], r["positions"], r["head_dim"], r["variant"]),
                         pct_cell, ["layout", "rotary_dim", "positions", "D", "variant"])
    return out


def sweep_summary(rows: list[dict]) -> list[str]:
    worst: dict[tuple, dict[str, float]] = {}
    for r in rows:
        d = worst.setdefault((r["implementation"], r["variant"]), {})
        d[r["head_dim"]] = min(d.get(r["head_dim"], math.inf), float(r["pct_copy_bw"]))
    body = []
    for (impl, variant), by_d in sorted(worst.items(), key=lambda kv: (rank(kv[0][0]), kv[0][1])):
        values = list(by_d.values())
        below = ""
        if impl == "triton_v4" and ("liger", variant) in worst:
            liger = worst[("liger", variant)]
            below = ", ".join(d for d in sorted(by_d, key=int) if d in liger and by_d[d] < liger[d]) or "none"
        body.append([impl, variant, str(len(values)), f"{min(values):.1f}", f"{statistics.median(values):.1f}",
                     f"{max(values):.1f}", below])
    return harness.markdown_table(["implementation", "variant", "head dims", "lowest", "median", "highest",
                                   "D where below Liger"], body, 2)


def step_section(rows: list[dict]) -> list[str]:
    current = newest(rows, ("gpu", "model", "shape", "mode", "implementation"))
    out = ["## Training steps (`python -m bench.step`)", "",
           "Median step (forward, backward, fused AdamW; bf16 autocast) and its ratio to `rope=torch` in the same "
           "run, timed in interleaved rounds [95% bootstrap CI over rounds]."]
    for gpu in sorted({r["gpu"] for r in current.values()}):
        mine = [r for r in current.values() if r["gpu"] == gpu]
        body = [[r["model"], r["shape"], r["mode"], r["implementation"], f"{float(r['time_us']) / 1e3:.2f}",
                 _ratio(r), f"{r['rounds']} x {int(r['steps']) // max(1, int(r['rounds']))}", r["commit"]]
                for r in sorted(mine, key=lambda r: (r["model"], r["mode"], rank(r["implementation"])))]
        out += ["", f"### {gpu}", "", provenance(mine), ""]
        out += harness.markdown_table(["model", "shape", "mode", "implementation", "step ms", "vs torch",
                                       "rounds x steps", "commit"], body, 4)
    return out


def user_model_section(rows: list[dict]) -> list[str]:
    current = newest(rows, ("gpu", "head_dim", "shape", "implementation"))
    out = ["## A user's compiled model (`python -m bench.user_model`)", "",
           "Median step of a model written the user's way (`rotate_qkv`, SDPA, `torch.compile` of the whole model) "
           "per head dim: its cost over no RoPE, and the ratio to the compiled PyTorch formula (`torch`) in the same "
           "run [95% bootstrap CI over rounds]."]
    for gpu in sorted({r["gpu"] for r in current.values()}):
        mine = sorted((r for r in current.values() if r["gpu"] == gpu),
                      key=lambda r: (int(r["head_dim"]), rank(r["implementation"])))
        body = [[r["head_dim"], r["shape"], r["implementation"], f"{float(r['time_us']) / 1e3:.3f}",
                 f"{float(r['vs_none_pct']):+.1f}%" if r["vs_none_pct"] else "", _ratio(r),
                 _number(r["kernels_per_step"], "{:.0f}"), r["commit"]] for r in mine]
        out += ["", f"### {gpu}", "", provenance(mine), ""]
        out += harness.markdown_table(["D", "shape", "implementation", "step ms", "vs none", "vs torch",
                                       "kernels a step", "commit"], body, 3)
    return out


def _ratio(r: dict) -> str:
    if not r["vs_torch_pct"]:
        return ""
    ci = f" [{float(r['vs_torch_lo']):+.1f}, {float(r['vs_torch_hi']):+.1f}]" if r["vs_torch_lo"] else ""
    return f"{float(r['vs_torch_pct']):+.1f}%{ci}"


#: The order of the decoding modes in a table (``llm.generation.speed.MODES``).
DECODE_MODES = ("captured", "eager", "dynamic", "none")


def generate_section(rows: list[dict]) -> list[str]:
    """Rows of the current benchmark only: those without a ``mode`` timed the decoder the static cache replaced,
    in columns of their own, and stay in the CSV as its history."""
    key = ("gpu", "model", "implementation", "batch", "prompt_len", "new_tokens", "mode", "attention")
    current = newest([r for r in rows if r.get("mode")], key)
    out = ["## Decoding (`python -m bench.generate`)", "",
           "Greedy decoding of random prompts with random weights (bf16): the first token's latency (the prompt, "
           "plus the capture of the decode step in mode `captured`) and the decode rate after it, new tokens of "
           "every row per second; step ms = batch / rate. Modes: `captured` (static cache, the step a CUDA graph), "
           "`eager` (the same step, not captured), `dynamic` (the dynamic cache), `none` (no cache: the prefix "
           "recomputed per token); attention `sdpa` (RoPE on q and k, then SDPA) or `fused_rope` "
           "(`rope.attention_with_rope`). Medians of the timed runs."]

    def order_key(r: dict) -> tuple:
        mode = DECODE_MODES.index(r["mode"]) if r["mode"] in DECODE_MODES else len(DECODE_MODES)
        return (r["model"], rank(r["implementation"]), int(r["batch"]), int(r["prompt_len"]), mode,
                r["attention"] != "sdpa", r["attention"])

    for gpu in sorted({r["gpu"] for r in current.values()}):
        mine = sorted((r for r in current.values() if r["gpu"] == gpu), key=order_key)
        notes = any(r["note"] for r in mine)  # a column only where a point has one (why not captured, or measured)
        body = [[r["model"], r["implementation"], r["mode"], r["attention"], r["batch"], r["prompt_len"],
                 r["new_tokens"], _number(r["first_token_ms"], "{:.1f}"), _number(r["decode_tok_s"], "{:,.0f}"),
                 _number(r["step_ms"], "{:.3f}"), *([r["note"]] if notes else [])] for r in mine]
        out += ["", f"### {gpu}", "", provenance(mine), ""]
        out += harness.markdown_table(["model", "implementation", "mode", "attention", "batch", "prompt", "new tokens",
                                       "first token ms", "tok/s", "step ms", *(["note"] if notes else [])], body, 4)
    return out


def _number(text: str, fmt: str) -> str:
    return fmt.format(float(text)) if text else ""


def profile_section(rows: list[dict]) -> list[str]:
    current = newest(rows, ("gpu", "model", "shape", "mode", "implementation", "part"))
    parts = ("wall", "host", "gpu kernels", "gpu idle")
    out = ["## Where a step's time goes (`python -m bench.profile`)", "", "Per step, ms."]
    groups: dict[tuple, dict[str, dict[str, str]]] = {}
    for r in current.values():
        groups.setdefault((r["gpu"], r["model"], r["mode"]), {}).setdefault(r["implementation"], {})[r["part"]] = \
            r["time_us"]
    for (gpu, model, mode), by_impl in sorted(groups.items()):
        mine = [r for r in current.values() if (r["gpu"], r["model"], r["mode"]) == (gpu, model, mode)]
        body = [[impl, *(f"{float(by_impl[impl][p]) / 1e3:.3f}" if p in by_impl[impl] else "" for p in parts)]
                for impl in order(by_impl)]
        out += ["", f"### {gpu}, {model}, {mode}", "", provenance(mine), ""]
        out += harness.markdown_table(["implementation", *parts], body, 1)
    return out


def attention_section(rows: list[dict]) -> list[str]:
    """The fused call against the separate path per shape, eager and captured; the rows of forced launch settings
    (``fused[...]``, from ``--candidates``) are experiments and stay in the CSV only."""
    key = ("gpu", "head_dim", "heads", "batch", "cached", "queries", "dtype", "implementation", "mode")
    current = newest([r for r in rows if r["implementation"] in ("separate", "fused")], key)
    out = ["## Attention over a KV cache, queries rotated inside (`python -m bench.attention`)", "",
           "Per shape (head dim, query/key-value heads, batch, cached tokens, new queries; bf16), microseconds of "
           "the separate path (`triton_v4` on q, then SDPA) and of `rope.attention_with_rope`, eager (a stream of "
           "calls, the host launching each) and captured (a CUDA graph's replay, the L2 flushed before it); "
           "`x`: the separate path's time over the fused one's; `% copy`: the captured fused call's cache read "
           "against the copy bandwidth; `bound` and `roof` (the most any call could gain over the separate path: "
           "one launch plus the cache read at full bandwidth, or the FLOPs at the matmul rate) of the captured "
           "fused row, where its run measured them (`roof` from runs that timed a launch: `launch_floor_us`)."]
    shapes: dict[tuple, dict[tuple[str, str], dict]] = {}
    for r in current.values():
        shape = (r["gpu"], int(r["head_dim"]), r["heads"], int(r["queries"]), int(r["batch"]), int(r["cached"]),
                 r["dtype"])
        shapes.setdefault(shape, {})[r["implementation"], r["mode"]] = r

    def cells(by: dict, mode: str) -> list[str]:
        sep, fused = by.get(("separate", mode)), by.get(("fused", mode))
        return [_number(sep["time_us"], "{:.1f}") if sep else "", _number(fused["time_us"], "{:.1f}") if fused else "",
                _number(fused["speedup"], "{:.2f}") if fused else ""]

    for gpu in sorted({s[0] for s in shapes}):
        mine = {s: by for s, by in shapes.items() if s[0] == gpu}
        body = []
        for (_, d, heads, queries, batch, cached, dtype), by in sorted(mine.items(), key=lambda kv: (
                kv[0][1], int(kv[0][2].split("/")[1]), *kv[0][3:])):
            captured = by.get(("fused", "captured"), {})
            body.append([str(d), heads, str(batch), str(cached), f"+{queries}", dtype, *cells(by, "eager"),
                         *cells(by, "captured"), _number(captured.get("pct_copy_bw", ""), "{:.0f}"),
                         captured.get("bound", ""),
                         _number(captured["roof_speedup"], "{:.2f}") if captured.get("launch_floor_us") else ""])
        rows_of_gpu = [r for by in mine.values() for r in by.values()]
        out += ["", f"### {gpu}", "", provenance(rows_of_gpu), ""]
        out += harness.markdown_table(["D", "heads", "B", "cached", "new", "dtype", "separate eager", "fused eager",
                                       "x eager", "separate captured", "fused captured", "x captured", "% copy",
                                       "bound", "roof"], body, 6)
    return out


#: Each results CSV: its section, and the columns its section reads as numbers (a cell of another kind is refused
#: naming its line, not read as another value or a traceback).
#: (benchmark, its section, its numeric columns, of them the whole numbers, the cells of a form: harness.read_rows)
SECTIONS = (("kernel", kernel_section, ("head_dim", "elements", "pct_copy_bw", "max_err"), ("head_dim", "elements"),
             ("shape",)),
            ("step", step_section, ("time_us", "steps", "rounds", "vs_torch_pct", "vs_torch_lo", "vs_torch_hi"),
             ("steps", "rounds"), ()),
            ("user_model", user_model_section, ("head_dim", "time_us", "vs_none_pct", "vs_torch_pct", "vs_torch_lo",
                                                "vs_torch_hi", "kernels_per_step"), ("head_dim",), ()),
            ("attention", attention_section, ("time_us", "speedup", "head_dim", "batch", "cached", "queries",
                                              "pct_copy_bw", "roof_speedup", "launch_floor_us"),
             ("head_dim", "batch", "cached", "queries"), ("heads",)),
            ("generate", generate_section, ("batch", "prompt_len", "new_tokens", "first_token_ms", "decode_tok_s",
                                            "step_ms"), ("batch", "prompt_len", "new_tokens"), ()),
            ("profile", profile_section, ("time_us",), (), ()))


@functools.cache
def columns_of(name: str) -> tuple[str, ...]:
    """The columns ``bench.<name>`` writes (imported when asked: each benchmark's module imports its own needs)."""
    module = importlib.import_module(f"bench.{name}")
    return tuple(getattr(module, "HEADER", None) or module.COLUMNS)


def gpu_rows(path: Path, name: str, numeric: Sequence[str], integer: Sequence[str] = (),
             forms: Sequence[str] = ()) -> list[dict]:
    """The rows of ``path`` measured on a GPU (a --smoke row, the CPU at tiny shapes, is no measurement: never a
    table's number). A file without a column of ``bench.<name>`` (another tool's, an edit) and one that holds no
    GPU row (empty, or only --smoke rows) are refused in one line, exit 2: the first would be a traceback, the
    second a section of the page removed without a word."""
    if not path.is_file():
        return []
    with open(path, newline="") as f:
        header = next(csv.reader(f), [])
    missing = [c for c in columns_of(name) if c not in header]
    if header and missing:
        harness._refuse(f"{path}: no column {', '.join(missing)}: not the columns bench.{name} writes; name the "
                        "folder of the benchmarks' CSVs with --results")
    rows = harness.read_rows(path, numeric, integer, forms, infinite_ok=("max_err",))  # inf: a wrong kernel's row
    kept = [r for r in rows if r.get("gpu") != harness.SMOKE_GPU]
    if not kept:
        held = f"{len(rows)} --smoke row(s), which no table shows" if rows else "no rows"
        harness._refuse(f"{path}: no row measured on a GPU ({held}): its section would be left out of the page; "
                        "take that file out of the folder, or add its GPU rows")
    return kept


def shown(path: Path) -> str:
    """``path`` as the page's comment names it: relative to the checkout where inside it."""
    path = path.resolve()
    return str(path.relative_to(harness.ROOT)) if path.is_relative_to(harness.ROOT) else str(path)


def render(results: Path) -> str:
    out = [BEGIN, "", f"<!-- written by `python -m bench.tables` from {shown(results)}/*.csv: edit those, not this -->"]
    for name, fn, numeric, integer, forms in SECTIONS:
        rows = gpu_rows(results / f"{name}.csv", name, numeric, integer, forms)
        if rows:
            out += ["", *fn(rows)]
    return "\n".join([*out, "", END]) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(prog="python -m bench.tables", description=__doc__,
                      formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--results", type=Path, default=harness.RESULTS,
                   help="the folder of the benchmarks' CSVs (default bench/results)")
    p.add_argument("--doc", type=Path, default=DOC,
                   help="the Markdown file whose marked part is rewritten (default docs/benchmarks.md)")
    p.add_argument("--print", action="store_true", help="print the tables, write nothing")
    args = p.parse_args(argv)
    names = [name for name, *_ in SECTIONS]
    # a folder without the CSVs (a typo) would render no tables and wipe the page's: refused before any work
    if not any((args.results / f"{name}.csv").is_file() for name in names):
        p.error(f"--results {args.results}: no results CSV there ({', '.join(f'{n}.csv' for n in names)})")
    text = ""
    if not args.print:
        if args.doc.is_dir():
            p.error(f"--doc {args.doc}: a folder; name the Markdown file to rewrite")
        if not args.doc.is_file():
            p.error(f"--doc {args.doc}: no such file")
        text = args.doc.read_text()
        if BEGIN not in text or END not in text:
            p.error(f"--doc {args.doc}: has no {BEGIN} ... {END} part to rewrite")
    if not commit_ages():  # (a GPU machine's copy of the checkout) said, as the page it writes differs by it
        print("bench.tables: no git history here: each configuration's row is its newest by date, not the newest "
              "commit's (a later run of an older commit shows)", file=sys.stderr)
    tables = render(args.results)
    if args.print:
        print(tables, end="")
        return 0
    head, rest = text.split(BEGIN, 1)
    # a section the page has and these CSVs do not fill (a --results folder of some benchmarks only) would vanish
    for name, fn, *_ in SECTIONS:
        title = fn([])[0]
        if title in rest.split(END, 1)[0] and title not in tables:
            p.error(f"--results {args.results}: no {name}.csv there, yet {args.doc} has its section "
                    f"{title.removeprefix('## ')!r}; name the folder of every benchmark's CSV")
    args.doc.write_text(head + tables.removesuffix("\n") + rest.split(END, 1)[1])
    print(f"rewrote the tables of {args.doc}")
    return 0


if __name__ == "__main__":
    harness.run_main(main, "bench.tables")
