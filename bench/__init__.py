"""Benchmarks of ropelab: one script per question, each appending rows to ``bench/results/<benchmark>.csv``.

* ``python -m bench.kernel``: RoPE kernels against their peers, in % of the GPU's copy bandwidth.
* ``python -m bench.step``: what a RoPE implementation costs in a training step of the project's model.
* ``python -m bench.generate``: decoding speed with and without the KV cache.
* ``python -m bench.attention``: attention over a KV cache with the queries rotated inside the kernel
  (``rope.attention_with_rope``) against ``triton_v4`` then SDPA.
* ``python -m bench.profile``: where one training step spends its time.
* ``python -m bench.precision``: the cos/sin tables and the kernels at positions up to 2^20 (CPU).
* ``python -m bench.tables``: ``docs/benchmarks.md`` rewritten from the CSVs.
* ``python -m bench.compare``: two commits of the RoPE code side by side (``bench/compare_commits.sh``).

Every script takes ``--smoke`` (tiny shapes on the CPU, a few seconds: what CI runs) and ``--out``; the shared
timer, environment columns and CSV writer are in :mod:`bench.harness`. This package is no part of the installed
product: run it from a checkout.
"""

import sys

if sys.argv[:1] == ["-m"]:  # `python -m bench.<script>`, while Python finds the script: before torch imports
    from llm.entry import stop_quietly_while_starting

    # a Ctrl-C while the script's modules load (seconds: torch, triton) is one line, not an import's traceback;
    # bench.harness.run_main hands the signals back once the script runs
    stop_quietly_while_starting("before the benchmark began: nothing was measured")
