#!/usr/bin/env bash
# Session 21, call 8: the head-dim report at 32M, variant full, head dims 138,140,142,144,146,148,150,152,154,156,158,160,162,164,166,168,170,172,174,176,178,180,182,184,186,188,190,192,194,196,198,200,202,204,206,208,210,212,214,216,218,220,222,224,226,228,230,232,234,236,238,240,242,244,246,248,250,252,254,256, triton_v4 beside Liger and compiled
# torch, each configuration timed on three input sets (--placements 3); calls 7-9 on one machine.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,uuid --format=csv,noheader | tee $OUT/r/gpu.txt; cp .devrun/commit.txt $OUT/r/
timeout 560 python -m scripts.bench_rope --budget-s 545 --variant full --head-dims --head-dim-list 138,140,142,144,146,148,150,152,154,156,158,160,162,164,166,168,170,172,174,176,178,180,182,184,186,188,190,192,194,196,198,200,202,204,206,208,210,212,214,216,218,220,222,224,226,228,230,232,234,236,238,240,242,244,246,248,250,252,254,256 \
  --ropes triton_v4 --placements 3 --out $OUT/r/full > $OUT/r/full.log 2>&1
grep -E "D=.*fwd" $OUT/r/full.log | sed 's/.*D=/D=/; s/(build+compile [0-9.]* s)//; s/fwd\/bwd % copy  //' | awk '{printf "%s ", $0; if (NR%2==0) print ""}'
tail -n 5 $OUT/r/full.log | cut -c1-300
echo "at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf res.tgz r && rm -rf r
