"""The offline PTX inspection of the Triton kernel (``scripts/kernel_vectors.py``): it parses access
widths, refuses the interpreter, and guards the kernel's vector widths at the head sizes whose
narrow loads cost bandwidth on the H100 (a CPU check of a GPU performance property)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from scripts import kernel_vectors
from scripts.kernel_vectors import access_widths

ROOT = Path(__file__).resolve().parents[2]


def test_access_widths_counts_bytes_per_thread():
    ptx = """
    @%p1 ld.global.L1::evict_last.v4.b32 { %r1, %r2, %r3, %r4 }, [ %rd1 + 0 ];
    ld.global.v2.b32 { %r5, %r6 }, [ %rd2 + 0 ];
    @%p2 ld.global.b32 { %r7 }, [ %rd3 + 0 ];
    ld.global.b16 %rs1, [ %rd4 + 0 ];
    @%p3 st.global.v4.b32 [ %rd5 + 0 ], { %r1, %r2, %r3, %r4 };
    ld.shared.v4.b32 { %r1, %r2, %r3, %r4 }, [ %r9 ];
    """
    assert access_widths(ptx) == {"ld": {2: 1, 4: 1, 8: 1, 16: 1}, "st": {16: 1}}


def _run(*args: str, interpret: bool = False) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    return subprocess.run([sys.executable, "-m", "scripts.kernel_vectors", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


def test_refuses_the_interpreter():
    res = _run("--head-dims", "48", interpret=True)
    assert res.returncode == 2 and "TRITON_INTERPRET=1" in res.stderr.strip().splitlines()[-1]


def test_cos_sin_and_rows_load_at_least_8_bytes_per_thread():
    """D = 40 and 56 (scalar cos/sin loads: 74-75% of copy bandwidth on the H100) and interleaved
    D = 48 (55%): every global access at least 8 bytes, and the wide ones 16."""
    pytest.importorskip("triton.backends.nvidia")
    res = _run("--head-dims", "40,48,56", "--layouts", "half,interleaved", "--json")
    if res.returncode != 0 and ("ptxas" in res.stderr or "backend" in res.stderr.lower()):
        pytest.skip(f"triton cannot compile for sm_90 here: {res.stderr.strip().splitlines()[-1]}")
    assert res.returncode == 0, res.stderr
    rows = json.loads(res.stdout)
    assert len(rows) == 6
    for r in rows:
        assert r["narrowest_bytes"] >= 8, r
        assert "16" in r["loads"], r  # JSON keys: the cos/sin tiles load 16 bytes per thread
        # the registers a thread takes, read from the cubin (None only where cuobjdump is missing)
        assert r["registers"] is None or 16 <= r["registers"] <= 255, r
    assert any(r["registers"] for r in rows) or kernel_vectors.cuda_tool("cuobjdump") is None


def test_shared_output_buffer_keeps_the_access_widths():
    """The fused-qkv backward writes k's outputs through q's output pointer plus an offset (OUT_SHARED);
    the offset reaches the kernel in the row-stride unit, so every access stays as wide as with two pointers."""
    pytest.importorskip("triton.backends.nvidia")
    runs = [_run("--head-dims", "40,48,80", "--layouts", "half,interleaved", "--json", *flag)
            for flag in ((), ("--out-shared",))]
    if runs[0].returncode != 0 and ("ptxas" in runs[0].stderr or "backend" in runs[0].stderr.lower()):
        pytest.skip(f"triton cannot compile for sm_90 here: {runs[0].stderr.strip().splitlines()[-1]}")
    plain, shared = ([{k: v for k, v in row.items() if k not in ("sass_per_element", "registers")}
                      for row in json.loads(r.stdout)] for r in runs)
    assert len(plain) == 6 and shared == plain


@pytest.mark.parametrize("tiling", ("rows", "chunks"))
def test_no_integer_division_by_runtime_values(tiling):
    """Rows are divided by H and T through host-computed magic numbers: a runtime division is a
    ~20-instruction sequence per chunk, which at V = 2 (D = 20, 36) outweighed the rotation itself.
    Every tiling, layout and copied tail compiles without one; the per-element instruction count of a
    V = 2 head size stays within twice that of a 16-byte one (it was 2.3x with the divisions)."""
    pytest.importorskip("triton.backends.nvidia")
    res = _run("--head-dims", "20,36,48", "--layouts", "half,interleaved", "--rotary-fractions", "1,0.5",
               "--tiling", tiling, "--json")
    if res.returncode != 0 and ("ptxas" in res.stderr or "backend" in res.stderr.lower()):
        pytest.skip(f"triton cannot compile for sm_90 here: {res.stderr.strip().splitlines()[-1]}")
    assert res.returncode == 0, res.stderr
    rows = json.loads(res.stdout)
    assert len(rows) == 8 and all(r["integer_divisions"] == 0 for r in rows), rows
    if tiling == "chunks" and rows[0]["sass_per_element"] is not None:
        per = {(r["head_dim"], r["layout"], r["rotary_dim"]): r["sass_per_element"] for r in rows}
        assert per[36, "half", 36] <= 2 * per[48, "half", 48], per


@pytest.mark.parametrize("out_shared", (False, True))
def test_compiles_with_every_integer_argument_constant(out_shared):
    """torch 2.11's Inductor compiles a user Triton kernel with its int arguments as constants to find
    the tensors it mutates; a kernel that fails to compile there (``.to`` on a scalar argument) gets
    every input cloned in the compiled graph, which cost the compiled step 4-8% on the H100."""
    pytest.importorskip("triton.backends.nvidia")
    res = _run("--head-dims", "20,48,64", "--layouts", "half,interleaved", "--rotary-fractions", "1,0.5",
               "--constant-scalars", "--json", *(("--out-shared",) if out_shared else ()))
    if res.returncode != 0 and "ptxas" in res.stderr:
        pytest.skip(f"triton cannot compile for sm_90 here: {res.stderr.strip().splitlines()[-1]}")
    assert res.returncode == 0, res.stderr[-2000:]
    assert len(json.loads(res.stdout)) == 10


@pytest.mark.parametrize("D,R,layout", [(48, 48, "half"), (64, 64, "interleaved"), (64, 32, "half")])
def test_streaming_marks_only_the_tensor_loads_evict_first(D, R, layout):
    """LaunchConfig(streaming=True): every q/k load (the copied tail's too) carries L2 evict-first, the
    cos/sin loads keep evict-last, and the widths are those of the default launch. Compiled in a child
    process (the Triton compiler needs no GPU; the interpreter must be off)."""
    pytest.importorskip("triton.backends.nvidia")
    code = f"""
import json, re
from scripts.kernel_vectors import compile_kernel, access_widths
out = {{}}
for streaming in (False, True):
    ptx = compile_kernel({D}, {R}, "{layout}", "partial", "bf16", 90, streaming=streaming).asm["ptx"]
    loads = re.findall(r"ld\\.global([\\w:.]*)\\s", ptx)
    out[str(streaming)] = {{"first": sum("evict_first" in m for m in loads), "all": len(loads),
                           "last": sum("evict_last" in m for m in loads), "widths": access_widths(ptx)}}
print(json.dumps(out))
"""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    if res.returncode != 0 and "ptxas" in res.stderr:
        pytest.skip(f"triton cannot compile for sm_90 here: {res.stderr.strip().splitlines()[-1]}")
    assert res.returncode == 0, res.stderr[-2000:]
    out = json.loads(res.stdout)
    plain, stream = out["False"], out["True"]
    assert plain["first"] == 0 and plain["last"] > 0
    assert stream["last"] == plain["last"] and stream["first"] == stream["all"] - stream["last"] > 0
    assert stream["widths"] == plain["widths"]


def test_positions_and_a_register_cap():
    """``--positions`` compiles the kernel that reads (B, T) int64 positions (one 8-byte load a row more than
    without), ``--regs`` caps its registers as ``rope.triton_rope.ROWS_REGISTERS`` does (the stack column shows
    what spills), and a cap out of range is refused in one line naming the flag. The three compiles share one
    child process (the interpreter must be off)."""
    pytest.importorskip("triton.backends.nvidia")
    code = """
import json
from scripts.kernel_vectors import report
print(json.dumps([report([48], ["half"], [1.0], "full", "bf16", 90, chunks=0, positions=p, maxnreg=r)[0]
                  for p, r in ((False, 0), (True, 0), (True, 32))]))
"""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    if res.returncode != 0 and "ptxas" in res.stderr:
        pytest.skip(f"triton cannot compile for sm_90 here: {res.stderr.strip().splitlines()[-1]}")
    assert res.returncode == 0, res.stderr[-2000:]
    plain, pos, capped = json.loads(res.stdout)
    assert pos["loads"].get("8", 0) == plain["loads"].get("8", 0) + 2, (plain, pos)  # q's and k's branches
    if capped["registers"] is not None:
        assert capped["registers"] <= 32 < pos["registers"] and capped["stack_bytes"] is not None, (pos, capped)
    bad = _run("--head-dims", "48", "--regs", "8")
    assert bad.returncode == 2 and "--regs" in bad.stderr.strip().splitlines()[-1]
