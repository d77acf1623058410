#!/usr/bin/env bash
# Session 21, call 6: every odd half (variant full, D = 18 ... 254) and rows at 48, 64, 128, 32M, triton_v4 beside
# Liger, each timed on three input sets (bench_rope --placements 3), at the default.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,uuid --format=csv,noheader | tee $OUT/r/gpu.txt; cp .devrun/commit.txt $OUT/r/
DL=$(seq -s, 18 4 254),48,64,128
timeout 575 python -m scripts.bench_rope --budget-s 560 --variant full --head-dims --head-dim-list $DL \
  --ropes triton_v4 --no-compiled --placements 3 --out $OUT/r/odd3 > $OUT/r/odd3.log 2>&1
grep -E "D=.*fwd" $OUT/r/odd3.log | sed 's/.*D=/D=/; s/(build+compile [0-9.]* s)//; s/fwd\/bwd % copy  //' | awk '{printf "%s ", $0; if (NR%2==0) print ""}'
tail -n 4 $OUT/r/odd3.log | cut -c1-300
echo "at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf res.tgz r && rm -rf r
