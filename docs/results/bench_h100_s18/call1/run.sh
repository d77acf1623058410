#!/usr/bin/env bash
# Session 18, call 1: the compiled seed004 step's GPU kernels and idle gaps per rope; R2 = 2 mod 8 family with
# joint programs and words + paired tables (never measured together), and tile=2048.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,uuid,clocks.max.sm --format=csv | tee $OUT/r/gpu.txt
timeout 260 python .devrun/s18/kprof.py none,torch,triton_v4 > $OUT/r/kprof.txt 2> $OUT/r/kprof.err
grep -E "^round" $OUT/r/kprof.txt; tail -3 $OUT/r/kprof.err
echo "at $(( $(date +%s) - T0 )) s"
R="triton_v4,triton_v4@joint+words+paired,triton_v4@joint+paired,triton_v4@words+paired+tile=2048,triton_v4@tile=2048"
timeout $(( 560 - $(date +%s) + T0 )) python -m scripts.bench_rope --budget-s $(( 550 - $(date +%s) + T0 )) --head-dims \
  --head-dim-list 68,100,164,244,52 --ropes $R --no-compiled --no-liger --out $OUT/r/fam > $OUT/r/fam.log 2>&1
grep -E "D=.*fwd" $OUT/r/fam.log | sed 's/.*D=/D=/' | sed 's/(build+compile [0-9.]* s)//; s/fwd\/bwd % copy  //'
tail -2 $OUT/r/fam.log
echo "at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf res.tgz r && rm -rf r
