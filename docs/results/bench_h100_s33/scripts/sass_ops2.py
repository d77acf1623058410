# ruff: noqa
"""Session 33: registers and static SASS opcode counts of rope_kernel (variant full, bf16, sm_90) per head dim (Ni: the backward), compiled on the CPU with the Triton on PYTHONPATH (python sass_ops2.py 54 54i ..., from a tree holding the kernel) ."""
import collections, re, sys
sys.path.insert(0, ".")
from scripts.kernel_vectors import compile_kernel, registers, cubin_tool_output
for arg in sys.argv[1:]:
    D, inv = (int(arg.rstrip("i")), arg.endswith("i"))
    k = compile_kernel(D, D, "half", "full", "bf16", 90, inverse=inv)
    sass = cubin_tool_output(k, "nvdisasm", "-c", check=True)
    ops = collections.Counter()
    for line in sass.splitlines():
        m = re.match(r"\s*/\*[0-9a-f]{4,}\*/\s+(@!?U?P\w+\s+)?([A-Z0-9_.]+)", line)
        if m:
            ops[m.group(2).split(".")[0]] += 1
    print(f"{arg} regs={registers(k)} total={sum(ops.values())} " + " ".join(f"{o}:{n}" for o, n in ops.most_common(12)))
