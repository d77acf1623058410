#!/usr/bin/env bash
# Session 18, report call D: the head-dim sweep at 256M elements a tensor (triton_v4 beside Liger): partial at every
# multiple of 4 from 16 to 256, full at the odd halves D = 18, 26, ..., 250 and 254.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,uuid --format=csv,noheader | tee $OUT/r/gpu.txt; cp .devrun/commit.txt $OUT/r/; cat .devrun/commit.txt
timeout 300 python -m scripts.bench_rope --budget-s 290 --variant partial --head-dims --head-dim-list every --elements 256M \
  --ropes triton_v4 --no-compiled --out $OUT/r/part256 > $OUT/r/part256.log 2>&1
grep -E "D=.*fwd" $OUT/r/part256.log | sed 's/.*D=/D=/; s/(build+compile [0-9.]* s)//; s/fwd\/bwd % copy  //' | awk '{printf "%s ", $0; if (NR%2==0) print ""}'
echo "at $(( $(date +%s) - T0 )) s"
timeout $(( 520 - $(date +%s) + T0 )) python -m scripts.bench_rope --budget-s $(( 510 - $(date +%s) + T0 )) --variant full --head-dims \
  --head-dim-list 18,26,34,42,50,58,66,74,82,90,98,106,114,122,130,138,146,154,162,170,178,186,194,202,210,218,226,234,242,250,254 \
  --elements 256M --ropes triton_v4 --no-compiled --out $OUT/r/full256 > $OUT/r/full256.log 2>&1
grep -E "D=.*fwd" $OUT/r/full256.log | sed 's/.*D=/D=/; s/(build+compile [0-9.]* s)//; s/fwd\/bwd % copy  //' | awk '{printf "%s ", $0; if (NR%2==0) print ""}'
echo "at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf res.tgz r && rm -rf r
