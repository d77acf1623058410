# ruff: noqa
"""Session 33: the SASS of rope_kernel at one head dim (a second argument: the backward), for diffing two trees ."""
import re, sys
sys.path.insert(0, ".")
from scripts.kernel_vectors import compile_kernel, cubin_tool_output
D = int(sys.argv[1]); inv = len(sys.argv) > 2
k = compile_kernel(D, D, "half", "full", "bf16", 90, inverse=inv)
sass = cubin_tool_output(k, "nvdisasm", "-c", check=True)
out = []
for l in sass.splitlines():
    if re.match(r"\s*/\*[0-9a-f]{4,}\*/", l):
        out.append(re.sub(r"\s+", " ", re.sub(r"/\*[0-9a-f]+\*/", "", l)).strip())
print("\n".join(out))
