#!/usr/bin/env bash
# Session 26, call 5: the report at --flush steady: head-dim sweep, variant partial, every multiple of 4 from 16 to
# 256, --placements 3, beside Liger and compiled torch; then 256M elements at the odd halves 54, 114, 206 and rows
# 48, 64, 128 (variant full).
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,uuid --format=csv,noheader | tee $OUT/r/gpu.txt; cp .devrun/commit.txt $OUT/r/
timeout 400 python -m scripts.bench_rope --budget-s 390 --variant partial --head-dims --head-dim-list $(seq -s, 16 4 256) \
  --ropes triton_v4 --placements 3 --flush steady --out $OUT/r/partial > $OUT/r/partial.log 2>&1
grep -E "D=.*fwd" $OUT/r/partial.log | sed 's/.*D=/D=/; s/(build+compile [0-9.]* s)//; s/fwd\/bwd % copy  //' | awk '{printf "%s ", $0; if (NR%2==0) print ""}'
head -1 $OUT/r/partial.log | cut -c1-200; tail -n 3 $OUT/r/partial.log | cut -c1-300
echo "at $(( $(date +%s) - T0 )) s"
timeout $(( 588 - $(date +%s) + T0 )) python -m scripts.bench_rope --budget-s $(( 575 - $(date +%s) + T0 )) --variant full --head-dims --elements 256M \
  --head-dim-list 48,54,64,114,128,206 --ropes triton_v4 --flush steady --out $OUT/r/full256 > $OUT/r/full256.log 2>&1
grep -E "D=.*fwd" $OUT/r/full256.log | sed 's/.*D=/D=/; s/(build+compile [0-9.]* s)//; s/fwd\/bwd % copy  //'
tail -n 3 $OUT/r/full256.log | cut -c1-300
echo "at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf res.tgz r && rm -rf r
