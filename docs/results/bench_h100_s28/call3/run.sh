#!/usr/bin/env bash
# Session 28, calls 2 (FLUSH unset: zero) and 3 (FLUSH=steady bash run.sh): the head-dim sweep at every odd half (variant full, D = 2 mod 4, 18 ... 254), --flush zero,
# --placements 3, triton_v4 alone (Liger and compiled torch left out: they are 20-45 points behind at these dims).
set -u
[ -d /tmp/site/liger_kernel ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,uuid --format=csv,noheader > $OUT/r/gpu.txt; cp .devrun/commit.txt $OUT/r/
timeout 575 python -m scripts.bench_rope --budget-s 560 --variant full --head-dims --head-dim-list $(seq -s, 18 4 254) \
  --ropes triton_v4 --no-liger --no-compiled --placements 3 --flush ${FLUSH:-zero} --out $OUT/r/odd > $OUT/r/odd.log 2>&1
grep -E "D=.*fwd" $OUT/r/odd.log | sed 's/.*D=/D=/; s/(build+compile [0-9.]* s)//; s/fwd\/bwd % copy  //' | awk '{printf "%s ", $0; if (NR%3==0) print ""}'
tail -n 3 $OUT/r/odd.log | cut -c1-300
echo "at $(( $(date +%s) - T0 )) s"
