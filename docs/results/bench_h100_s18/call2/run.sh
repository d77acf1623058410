#!/usr/bin/env bash
# Session 18, call 2: joint programs with paired tables (call 1's find) across the even flat halves: R2 = 2 mod 8
# (D = 20 ... 244) and R2 = 6 mod 8 (D = 28 ... 252), partial (the flat kernel is the same for full); rotary_dim
# D/2 and D/4 (the layouts mode).
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,uuid --format=csv,noheader | tee $OUT/r/gpu.txt
show() { grep -E "D=.*fwd" $1 | sed 's/.*D=/D=/' | sed 's/(build+compile [0-9.]* s)//; s/fwd\/bwd % copy  //; s/triton_v4//g' | sed "s/^/$2 /"; }
timeout 170 python -m scripts.bench_rope --budget-s 160 --head-dims --head-dim-list 20,36,52,68,84,100,116,132,148,164,180,196,212,228,244 \
  --ropes "triton_v4,triton_v4@joint+paired,triton_v4@joint+words+paired" --no-compiled --no-liger --out $OUT/r/r2 > $OUT/r/r2.log 2>&1
show $OUT/r/r2.log r2; echo "at $(( $(date +%s) - T0 )) s"
timeout 130 python -m scripts.bench_rope --budget-s 120 --head-dims --head-dim-list 28,44,60,76,92,108,124,140,156,172,188,204,220,236,252 \
  --ropes "triton_v4,triton_v4@joint+paired" --no-compiled --no-liger --out $OUT/r/r6 > $OUT/r/r6.log 2>&1
show $OUT/r/r6.log r6; echo "at $(( $(date +%s) - T0 )) s"
timeout $(( 570 - $(date +%s) + T0 )) python -m scripts.bench_rope --budget-s $(( 560 - $(date +%s) + T0 )) --layouts \
  --layout-dims 48,64,80,128,256 --ropes "triton_v4,triton_v4@joint+paired,triton_v4@joint+words+paired" --no-compiled --no-liger \
  --out $OUT/r/lay > $OUT/r/lay.log 2>&1
grep -vE "^\s*$" $OUT/r/lay.log | tail -40; echo "at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf res.tgz r && rm -rf r
