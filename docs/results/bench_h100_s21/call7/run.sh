#!/usr/bin/env bash
# Session 21, call 7: the head-dim report at 32M, variant full, head dims 16,18,20,22,24,26,28,30,32,34,36,38,40,42,44,46,48,50,52,54,56,58,60,62,64,66,68,70,72,74,76,78,80,82,84,86,88,90,92,94,96,98,100,102,104,106,108,110,112,114,116,118,120,122,124,126,128,130,132,134,136, triton_v4 beside Liger and compiled
# torch, each configuration timed on three input sets (--placements 3); calls 7-9 on one machine.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,uuid --format=csv,noheader | tee $OUT/r/gpu.txt; cp .devrun/commit.txt $OUT/r/
timeout 560 python -m scripts.bench_rope --budget-s 545 --variant full --head-dims --head-dim-list 16,18,20,22,24,26,28,30,32,34,36,38,40,42,44,46,48,50,52,54,56,58,60,62,64,66,68,70,72,74,76,78,80,82,84,86,88,90,92,94,96,98,100,102,104,106,108,110,112,114,116,118,120,122,124,126,128,130,132,134,136 \
  --ropes triton_v4 --placements 3 --out $OUT/r/full > $OUT/r/full.log 2>&1
grep -E "D=.*fwd" $OUT/r/full.log | sed 's/.*D=/D=/; s/(build+compile [0-9.]* s)//; s/fwd\/bwd % copy  //' | awk '{printf "%s ", $0; if (NR%2==0) print ""}'
tail -n 5 $OUT/r/full.log | cut -c1-300
echo "at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf res.tgz r && rm -rf r
