"""How wide are the Triton RoPE kernel's memory accesses? Compiled for a Hopper GPU, on any machine.

A memory-bound kernel reaches the copy bandwidth only when its global loads and stores are wide
(16 bytes per thread at best); a mask or an offset the compiler cannot prove aligned makes them
narrower, and the H100 showed what that costs (scalar cos/sin loads at D = 40 and 56: 74-75% of
copy bandwidth; the rotated halves' 8-byte accesses are no obstacle by themselves: D = 32 reaches
96% with them). Triton can generate the PTX of ``rope_kernel`` without a GPU (its CUDA backend is
in the wheel), so this counts, per head size and layout, the global load and store instructions
of the kernel by width, with the arguments specialised as a launch on contiguous (B, T, H, D)
tensors would specialise them (strides passed in their power-of-two units, divisibility by 16
where the value has it). Counts are instructions in the code (per tile, per thread), not executed
bytes. It needs no GPU and it is no benchmark: what the widths cost is measured by
``scripts/bench_rope.py`` on the device.

    python -m scripts.kernel_vectors [--head-dims 16,24,40,48] [--layouts half,interleaved]
        [--rotary-fractions 1,0.5] [--variant partial] [--dtype bf16] [--arch 90] [--positions] [--regs N] [--json]

Runs without ``TRITON_INTERPRET`` (the interpreter replaces the kernels by Python functions). The code is
the installed Triton's; to see what the device compiles, put its version first on the path (the H100 image
has triton 3.6: ``pip install --target DIR triton==3.6.0 --no-deps``, then ``PYTHONPATH=DIR``). Two Tritons
compile the same kernel differently, and the order of the same operations in the source can move a geometry
by points (docs/kernels.md, session 13).
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # also runnable as `python scripts/kernel_vectors.py`
    sys.path.insert(0, str(ROOT))

_DTYPES = {"bf16": "*bf16", "fp16": "*fp16", "fp32": "*fp32"}
_ACCESS = re.compile(r"\b(ld|st)\.global(\.[\w:.]+)?\s")
#: The shape the strides are specialised for (T, H): the benchmark's.
_T, _H = 2048, 16


def compile_kernel(head_dim: int, rotary_dim: int, layout: str, variant: str, dtype: str, arch: int,
                   chunks: int = -1, out_shared: bool = False, wide: bool = False, constant_scalars: bool = False,
                   streaming: bool = False, inverse: bool = False, config=None, positions: bool = False,
                   maxnreg: int = 0):
    """The compiled ``rope_kernel`` (forward, or ``inverse``: the backward's transposed rotation) for contiguous
    (B, T, H, D) inputs; ``positions``: reading (B, T) int64 positions (HAS_POS).
    ``maxnreg``: a register cap (``LaunchConfig.maxnreg``, as ``rope.triton_rope.ROWS_REGISTERS`` sets it).
    ``streaming``: the q/k loads with L2 evict-first priority (``LaunchConfig.streaming``).
    ``out_shared``: as the fused-qkv backward launches it, k's outputs H heads into q's buffer.
    ``constant_scalars``: ``rope_kernel_static``, every integer argument a compile-time constant, the kernel
    ``torch.compile`` launches (and how torch 2.11's Inductor compiles a user kernel to find what it mutates: a
    kernel that fails there gets its inputs cloned)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from rope import _triton_kernels as kernels
    from rope.triton_rope import LaunchConfig, _pow2_unit, element_table_width, launch_config

    cfg = dict(launch_config(head_dim, rotary_dim // 2, variant == "partial", layout == "interleaved",
                             config or LaunchConfig(chunks=chunks, streaming=streaming, maxnreg=maxnreg)))
    num_warps = cfg.pop("num_warps")
    options = {"num_warps": num_warps, **({"maxnreg": cfg.pop("maxnreg")} if "maxnreg" in cfg else {})}
    fn = kernels.rope_kernel_static if constant_scalars else kernels.rope_kernel
    names = list(fn.arg_names)
    index = {n: (i,) for i, n in enumerate(names)}
    flat = cfg["FLAT"]  # the flat tiling addresses tokens, not rows: the head stride does not count
    sv = _pow2_unit(math.gcd(_T * _H * head_dim, _H * head_dim, *(() if flat else (head_dim,))))
    # the table's row stride: pairs, or (flat) the element tables' width (rope.triton_rope.element_table_width;
    # two floats a column in the paired one)
    paired = cfg["PAIRED"]
    table_stride = (1 + paired) * element_table_width(head_dim, cfg["VB"], paired) if flat else rotary_dim // 2
    csv = _pow2_unit(table_stride)
    ints = {}
    for p in ("q", "k", "oq", "ok"):
        ints |= {f"s{p}b": _T * _H * head_dim // sv, f"s{p}t": _H * head_dim // sv, f"s{p}h": head_dim // sv}
    ints["s_cs"] = table_stride // csv
    ints["ook"] = head_dim // sv  # one q head before k: the least aligned offset there is
    if constant_scalars:  # the values a launch of B=2 would pass
        from rope.triton_rope import magic_divisor

        (m_t, p_t), (m_h, p_h) = magic_divisor(_T), magic_divisor(_H)
        ints |= {"spb": 0, "spt": 0, "NPOS": _T, "T": _T, "mT": m_t, "pT": p_t, "HQ": _H, "mHQ": m_h, "pHQ": p_h,
                 "HK": _H, "mHK": m_h, "pHK": p_h, "NRQ": 2 * _T * _H, "NRK": 2 * _T * _H, "NPQ": 64, "NPR": 128,
                 "NPPQ": 0}
    constexprs = {**cfg, "SV": sv, "CSV": csv, "HAS_POS": positions, "LOW": False, "INVERSE": inverse, "EMULATE": False,
                  "OUT_SHARED": out_shared, "WIDE": wide}
    constexprs |= {n: 1 for n in names if re.fullmatch(r"s(q|k|oq|ok)d", n)}  # unit element stride
    if constant_scalars:
        constexprs |= {n: ints[n] for n in names if n in ints and n not in constexprs}
    pointers = {"q_ptr", "k_ptr", "oq_ptr", "ok_ptr", "cos_ptr", "sin_ptr", "pos_ptr"}
    signature, attrs = {}, {}
    for n in names:
        if n in constexprs:
            signature[n] = "constexpr"
        elif n in pointers:
            # out_shared: ok's slot gets the cos table (float32), as launch() passes it
            fp32 = ("cos_ptr", "sin_ptr") + (("ok_ptr",) if out_shared else ()) + (() if positions else ("pos_ptr",))
            signature[n] = "*i64" if n == "pos_ptr" and positions else "*fp32" if n in fp32 else _DTYPES[dtype]
            attrs[index[n]] = [["tt.divisibility", 16]]  # torch allocations are 16-byte aligned
        else:
            signature[n] = "i32"
            if ints.get(n, 1) % 16 == 0:  # what the launcher specialises on
                attrs[index[n]] = [["tt.divisibility", 16]]
    src = ASTSource(fn=fn, signature=signature, constexprs={index[n]: v for n, v in constexprs.items()},
                    attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", arch, 32), options=options)


def access_widths(ptx: str) -> dict[str, dict[int, int]]:
    """{"ld": {bytes per thread: instructions}, "st": {...}} of the global accesses in ``ptx``."""
    out: dict[str, collections.Counter] = {"ld": collections.Counter(), "st": collections.Counter()}
    for m in _ACCESS.finditer(ptx):
        mods = (m.group(2) or "").split(".")
        vec = next((int(x[1:]) for x in mods if re.fullmatch(r"v[248]", x)), 1)
        bits = next((int(x[1:]) for x in mods if re.fullmatch(r"[bfus](8|16|32|64)", x)), 0)
        out[m.group(1)][vec * bits // 8] += 1
    return {k: dict(sorted(v.items())) for k, v in out.items()}


_INTEGER_DIVISION = re.compile(r"\b(?:div|rem)\.[su](?:16|32|64)\b")


def integer_divisions(ptx: str) -> int:
    """Integer divisions and remainders in ``ptx``: each a ~20-instruction sequence on the GPU when
    the divisor is a runtime value (the kernel divides by H and T through magic numbers instead)."""
    return len(_INTEGER_DIVISION.findall(ptx))


def cuda_tool(name: str) -> str | None:
    """The CUDA binary ``name`` (nvdisasm, cuobjdump): the one Triton ships, else one on PATH, else None."""
    tool = Path(__import__("triton").__file__).parent / "backends" / "nvidia" / "bin" / name
    return str(tool) if tool.exists() else shutil.which(name)


def cubin_tool_output(kernel, name: str, *args: str, check: bool = False) -> str | None:
    """What the CUDA binary ``name`` prints for the compiled kernel's cubin given ``args`` (None without it)."""
    tool = cuda_tool(name)
    if tool is None:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "k.cubin"
        path.write_bytes(kernel.asm["cubin"])
        return subprocess.run([tool, *args, str(path)], capture_output=True, text=True, check=check).stdout


def sass_per_element(kernel, head_dim: int, rotary_dim: int, layout: str, variant: str, chunks: int) -> float | None:
    """Machine instructions in the code of one tensor's branch (half the kernel: a program runs q's or
    k's) over the elements one thread rotates: a static measure of the per-element work, which the
    rotation's float arithmetic keeps near 12 for wide vectors. None without ``nvdisasm``."""
    from rope.triton_rope import LaunchConfig, launch_config

    sass = cubin_tool_output(kernel, "nvdisasm", "-c", check=True)
    if sass is None:
        return None
    n = len(re.findall(r"^\s*/\*[0-9a-f]{4,}\*/", sass, flags=re.M))
    cfg = launch_config(head_dim, rotary_dim // 2, variant == "partial", layout == "interleaved",
                        LaunchConfig(chunks=chunks))
    elements = cfg["NBP"] * cfg["VB"] if cfg["FLAT"] else cfg["NCH"] * cfg["V"] * 2 if cfg["CHUNKED"] else \
        cfg["BR"] * head_dim
    return round(n / 2 / (elements / (32 * cfg["num_warps"])), 1)


def registers(kernel) -> int | None:
    """Registers a thread of the compiled kernel takes (``cuobjdump -res-usage``; None without the tool). Why
    it matters: a flat program is 4 warps, and at 32 registers 16 programs share an SM where at 34-40 only 12
    do; every 3-5 point gap between code variants measured on the H100 in session 13 lined up with it."""
    return resource_usage(kernel).get("REG")


def resource_usage(kernel) -> dict[str, int]:
    """``cuobjdump -res-usage``'s counts for the compiled kernel, by name ({} without the tool), in one run of it:
    ``REG`` registers a thread, ``STACK`` bytes of stack a thread (registers spilled, what a register cap
    (``maxnreg``) can cost)."""
    usage = cubin_tool_output(kernel, "cuobjdump", "-res-usage") or ""
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"\b([A-Z]+):(\d+)", usage)}


def report(head_dims: list[int], layouts: list[str], fractions: list[float], variant: str, dtype: str,
           arch: int, chunks: int = -1, out_shared: bool = False, constant_scalars: bool = False,
           inverse: bool = False, positions: bool = False, maxnreg: int = 0) -> list[dict]:
    rows = []
    for D in head_dims:
        for layout in layouts:
            for frac in fractions:
                R = int(D * frac)
                if R < 2 or R % 2 or (variant == "partial" and R % 4):
                    continue
                kernel = compile_kernel(D, R, layout, variant, dtype, arch, chunks, out_shared,
                                        constant_scalars=constant_scalars, inverse=inverse, positions=positions,
                                        maxnreg=maxnreg)
                widths, usage = access_widths(kernel.asm["ptx"]), resource_usage(kernel)
                rows.append({"head_dim": D, "layout": layout, "rotary_dim": R, "variant": variant, "dtype": dtype,
                             "loads": widths["ld"], "stores": widths["st"],
                             "narrowest_bytes": min([*widths["ld"], *widths["st"]], default=0),
                             "integer_divisions": integer_divisions(kernel.asm["ptx"]),
                             "sass_per_element": sass_per_element(kernel, D, R, layout, variant, chunks),
                             "registers": usage.get("REG"), "stack_bytes": usage.get("STACK")})
    return rows


def _fmt(counts: dict[int, int]) -> str:
    return ", ".join(f"{n}x{b}B" for b, n in counts.items())


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--head-dims", default="16,24,32,40,48,56,64,80,96,112,128")
    p.add_argument("--layouts", default="half,interleaved")
    p.add_argument("--rotary-fractions", default="1", help="rotary_dim as fractions of the head dim, e.g. 1,0.5,0.25")
    p.add_argument("--variant", default="partial", choices=("partial", "full"))
    p.add_argument("--dtype", default="bf16", choices=sorted(_DTYPES))
    p.add_argument("--arch", type=int, default=90, help="compute capability x 10 (90: H100/H200)")
    p.add_argument("--tiling", default="auto", choices=("auto", "rows", "chunks", "flat"),
                   help="the program tiling (LaunchConfig.chunks): auto is the kernel's own choice")
    p.add_argument("--out-shared", action="store_true",
                   help="k's outputs through q's output pointer, as the fused-qkv backward launches it")
    p.add_argument("--constant-scalars", action="store_true",
                   help="rope_kernel_static: every int argument a compile-time constant, as torch.compile launches it")
    p.add_argument("--backward", action="store_true",
                   help="the backward's kernel (the transposed rotation) instead of the forward's")
    p.add_argument("--positions", action="store_true",
                   help="the kernel reading (B, T) int64 positions (HAS_POS), as r(q, k, positions=...) launches it")
    p.add_argument("--regs", type=int, default=0,
                   help="a register cap (LaunchConfig.maxnreg, 16-255; 0: the compiler's choice)")
    p.add_argument("--json", action="store_true", help="print the rows as JSON instead of a table")
    args = p.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET") == "1":
        p.error("TRITON_INTERPRET=1 is set: the interpreter has no compiled kernels to inspect; unset it")
    for name, value in (("--layouts", args.layouts),):
        bad = [x for x in value.split(",") if x not in ("half", "interleaved")]
        if bad:
            p.error(f"{name}: {bad[0]!r} is not a layout (half, interleaved)")
    try:
        dims = [int(x) for x in args.head_dims.split(",")]
        fractions = [float(x) for x in args.rotary_fractions.split(",")]
    except ValueError as exc:
        p.error(f"--head-dims / --rotary-fractions: comma-separated numbers expected ({exc})")
    from rope.triton_rope import LaunchConfig

    try:  # LaunchConfig's own bounds, refused before any compile
        LaunchConfig(maxnreg=args.regs)
    except ValueError as exc:
        p.error(f"--regs: {exc}")
    chunks = {"auto": -1, "rows": 0, "chunks": 1, "flat": 2}[args.tiling]
    rows = report(dims, args.layouts.split(","), fractions, args.variant, args.dtype, args.arch, chunks,
                  args.out_shared, args.constant_scalars, args.backward, args.positions, args.regs)
    if args.json:
        print(json.dumps(rows))
    else:
        print(f"rope_kernel global accesses (instructions in the code by bytes per thread), sm_{args.arch}, "
              f"{args.dtype}, variant={args.variant}, tiling {args.tiling}, "
              f"{'backward' if args.backward else 'forward'}{', positions' if args.positions else ''}"
              f"{f', at most {args.regs} registers' if args.regs else ''}")
        print("| D | layout | rotary_dim | loads | stores | narrowest | integer divisions | instructions per element "
              "| registers | stack |\n|---|---|---:|---|---|---:|---:|---:|---:|---:|")
        for r in rows:
            print(f"| {r['head_dim']} | {r['layout']} | {r['rotary_dim']} | {_fmt(r['loads'])} | {_fmt(r['stores'])} "
                  f"| {r['narrowest_bytes']} B | {r['integer_divisions']} | {r['sass_per_element'] or 'n/a'} "
                  f"| {r['registers'] or 'n/a'} | {'n/a' if r['stack_bytes'] is None else r['stack_bytes']} |")
    return rows


if __name__ == "__main__":
    main()
