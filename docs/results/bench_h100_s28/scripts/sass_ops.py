# ruff: noqa
"""Session 28: registers and static SASS opcode counts of rope_kernel (forward, variant full, bf16, sm_90) at one
head dim, compiled on the CPU with this checkout's Triton (python scripts/sass_ops.py D, from a tree holding the
kernel file to inspect)."""
import collections, re, sys
sys.path.insert(0, ".")
from scripts.kernel_vectors import compile_kernel, registers, cubin_tool_output
D = int(sys.argv[1])
k = compile_kernel(D, D, "half", "full", "bf16", 90)
sass = cubin_tool_output(k, "nvdisasm", "-c", check=True)
ops = collections.Counter()
for line in sass.splitlines():
    m = re.match(r"\s*/\*[0-9a-f]{4,}\*/\s+(@!?U?P\w+\s+)?([A-Z0-9_.]+)", line)
    if m:
        ops[m.group(2).split(".")[0]] += 1
print(f"D={D} regs={registers(k)} total={sum(ops.values())}")
print(" ".join(f"{o}:{n}" for o, n in ops.most_common(40)))
