# ruff: noqa  (a record of what ran on the H100)
"""Host cost of a user Triton kernel's launch under torch.compile (Inductor's static launcher), by argument count:
a trivial copy kernel with 0 int args, with 40 runtime ints, with the same 40 as constexprs; and fed views
(Inductor's reinterpret_tensor) against whole buffers. The compiled function chains 12 launches; the GPU sleeps
while the host enqueues, so perf_counter times the host alone."""
import statistics, sys, time
import torch, triton, triton.language as tl
from torch.library import triton_op, wrap_triton
torch._inductor.config.static_launch_user_defined_triton_kernels = True

@triton.jit
def _body(x_ptr, y_ptr, s, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + i, tl.load(x_ptr + i * s) + 1)

@triton.jit
def k0(x_ptr, y_ptr, s, BLOCK: tl.constexpr):
    _body(x_ptr, y_ptr, s, BLOCK)

@triton.jit
def k40(x_ptr, y_ptr, s, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17, a18, a19, a20, a21, a22, a23, a24, a25, a26, a27, a28, a29, a30, a31, a32, a33, a34, a35, a36, a37, a38, a39, BLOCK: tl.constexpr):
    _body(x_ptr, y_ptr, s + a0 + a39, BLOCK)

@triton.jit
def k40c(x_ptr, y_ptr, s, a0: tl.constexpr, a1: tl.constexpr, a2: tl.constexpr, a3: tl.constexpr, a4: tl.constexpr, a5: tl.constexpr, a6: tl.constexpr, a7: tl.constexpr, a8: tl.constexpr, a9: tl.constexpr, a10: tl.constexpr, a11: tl.constexpr, a12: tl.constexpr, a13: tl.constexpr, a14: tl.constexpr, a15: tl.constexpr, a16: tl.constexpr, a17: tl.constexpr, a18: tl.constexpr, a19: tl.constexpr, a20: tl.constexpr, a21: tl.constexpr, a22: tl.constexpr, a23: tl.constexpr, a24: tl.constexpr, a25: tl.constexpr, a26: tl.constexpr, a27: tl.constexpr, a28: tl.constexpr, a29: tl.constexpr, a30: tl.constexpr, a31: tl.constexpr, a32: tl.constexpr, a33: tl.constexpr, a34: tl.constexpr, a35: tl.constexpr, a36: tl.constexpr, a37: tl.constexpr, a38: tl.constexpr, a39: tl.constexpr, BLOCK: tl.constexpr):
    _body(x_ptr, y_ptr, s + a0 + a39, BLOCK)

VALS = [(i * 7919) % 100003 + 2 for i in range(40)]
VALS[0] = VALS[39] = 0

@triton_op("lc::op0", mutates_args=())
def op0(x: torch.Tensor) -> torch.Tensor:
    y = torch.empty(1024, device=x.device, dtype=x.dtype)
    wrap_triton(k0)[(1,)](x, y, 1, BLOCK=1024)
    return y

@triton_op("lc::op40", mutates_args=())
def op40(x: torch.Tensor) -> torch.Tensor:
    y = torch.empty(1024, device=x.device, dtype=x.dtype)
    wrap_triton(k40)[(1,)](x, y, 1, *VALS, BLOCK=1024)
    return y

@triton_op("lc::op40c", mutates_args=())
def op40c(x: torch.Tensor) -> torch.Tensor:
    y = torch.empty(1024, device=x.device, dtype=x.dtype)
    wrap_triton(k40c)[(1,)](x, y, 1, **{f"a{i}": v for i, v in enumerate(VALS)}, BLOCK=1024)
    return y

def chain(op, view):
    def f(x):
        ys = []
        for j in range(12):
            src = x[j * 2048:(j + 1) * 2048][::2] if view else x[j * 1024:(j + 1) * 1024]
            ys.append(op(src))
        return ys
    return torch.compile(f)

x = torch.randn(1 << 16, device="cuda")
cases = {"0 ints": chain(op0, False), "40 ints": chain(op40, False), "40 constexpr": chain(op40c, False),
         "0 ints, views": chain(op0, True), "40 ints, views": chain(op40, True)}
for f in cases.values():
    for _ in range(3):
        f(x)
torch.cuda.synchronize()
res = {k: [] for k in cases}
for r in range(15):
    for k, f in cases.items():
        h = []
        for _ in range(20):
            torch.cuda._sleep(20_000_000)
            t0 = time.perf_counter()
            f(x)
            h.append(time.perf_counter() - t0)
            torch.cuda.synchronize()
        res[k].append(statistics.median(h) * 1e6 / 12)
base = res["0 ints"]
print("host us per launch (compiled function of 12 launches / 12), median of 15 rounds; paired diff vs 0 ints")
for k, v in res.items():
    d = sorted(a - b for a, b in zip(v, base))
    print(f"  {k:16s} {statistics.median(v):7.2f} us   diff {statistics.median(d):+6.2f} [{d[2]:+.2f}, {d[-3]:+.2f}]")
