# ruff: noqa
"""Session 26: under --flush steady, does the timed call find its cos/sin tables in the L2 (its untimed predecessor,
the same call, read them last)? triton_v4 forward, variant full, 32M elements, timed after:
  zero          the default flush;
  zero+tables   the default flush, then the call's own tables read (so they are in L2; session 22's table_warm);
  steady        the same call untimed before (tables and the predecessor's dirty lines in L2);
  steady-other  the same call of another module (other tables: base 500000) on other inputs untimed before: the
                predecessor's dirty lines, but not this call's tables.
Median of 3 input sets each; us and % of the 1 GiB copy (timed the zero way).

    python .devrun/s26/table_steady.py
"""
import statistics

import torch

import rope
from rope import triton_rope as tr
from scripts.benchlib import Timer, copy_bandwidth


class Before(Timer):
    def __init__(self, before, zero=False):
        super().__init__(15, "steady")
        self.before, self.zero = before, zero
        self.buf = torch.zeros(256 * 2**20, dtype=torch.uint8, device="cuda") if zero else None

    def _flush(self, fn):
        if self.zero:
            self.buf.zero_()
        self.before()


def main():
    bw = copy_bandwidth(Timer(15))
    print(f"copy bandwidth {bw:.0f} GB/s", flush=True)
    zero = Timer(15, "zero")
    steady = Timer(15, "steady")
    for D in (54, 56, 114, 116, 128, 206, 208):
        r = rope.build("triton_v4", D, 2048, variant="full").cuda()
        other = rope.build("triton_v4", D, 2048, variant="full", base=500000.0).cuda()
        B = -(-32 * 2**20 // (2048 * 16 * D))
        nbytes = 4 * B * 2048 * 16 * D * 2
        res = {k: [] for k in ("zero", "zero+tables", "steady", "steady-other")}
        for _ in range(3):
            q = torch.randn(B, 2048, 16, D, device="cuda", dtype=torch.bfloat16)
            k = torch.randn_like(q)
            q2, k2 = torch.randn_like(q), torch.randn_like(q)
            with torch.no_grad():
                r(q, k); other(q2, k2)
                plan = tr.launch_plan(q, k, r.cos, r.sin, None, r._partial_shortcut, False, False,
                                      config=r.launch_config)
                tables = plan.tables if plan.tables is not None else (r.cos, r.sin)
                touch = lambda: [t.sum() for t in tables]
                fn = lambda: r(q, k)
                res["zero"].append(zero(fn))
                res["zero+tables"].append(Before(touch, zero=True)(fn))
                res["steady"].append(steady(fn))
                res["steady-other"].append(Before(lambda: other(q2, k2))(fn))
            del q, k, q2, k2
        tb = sum(t.numel() * t.element_size() for t in {id(t): t for t in tables}.values()) / 2**20
        cells = [f"{k} {statistics.median(v) * 1e3:.1f} us {100 * nbytes / (statistics.median(v) * 1e-3) / 1e9 / bw:.1f}%"
                 for k, v in res.items()]
        print(f"D={D} B={B} tables {tb:.2f} MB: " + " | ".join(cells), flush=True)


if __name__ == "__main__":
    main()
