#!/usr/bin/env bash
# Session 21, call 9: the head-dim report at 32M, variant partial, head dims every, triton_v4 beside Liger and compiled
# torch, each configuration timed on three input sets (--placements 3); calls 7-9 on one machine.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,uuid --format=csv,noheader | tee $OUT/r/gpu.txt; cp .devrun/commit.txt $OUT/r/
timeout 560 python -m scripts.bench_rope --budget-s 545 --variant partial --head-dims --head-dim-list every \
  --ropes triton_v4 --placements 3 --out $OUT/r/partial > $OUT/r/partial.log 2>&1
grep -E "D=.*fwd" $OUT/r/partial.log | sed 's/.*D=/D=/; s/(build+compile [0-9.]* s)//; s/fwd\/bwd % copy  //' | awk '{printf "%s ", $0; if (NR%2==0) print ""}'
tail -n 5 $OUT/r/partial.log | cut -c1-300
echo "at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf res.tgz r && rm -rf r
