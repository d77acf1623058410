#!/usr/bin/env bash
# Session 21, call 10: layouts and rotary_dim at --placements 3, packed sequences and host overhead (triton_v4 and
# triton_v2 beside Liger and compiled torch), then the seed004 step, eager and compiled, 12 rounds.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,uuid --format=csv,noheader | tee $OUT/r/gpu.txt; cp .devrun/commit.txt $OUT/r/
timeout 240 python -m scripts.bench_rope --budget-s 230 --layouts --packed --overhead --placements 3 \
  --ropes triton_v4,triton_v2 --out $OUT/r/modes > $OUT/r/modes.log 2>&1
grep -vE "^\s*$" $OUT/r/modes.log | grep -v "^\[" | cut -c1-300 | tail -n 60
echo "at $(( $(date +%s) - T0 )) s"
timeout $(( 580 - $(date +%s) + T0 )) python -m scripts.bench_step --model seed004 --ropes none,torch,triton_v4 --no-liger \
  --iters 600 --rounds 10 --out $OUT/r/step_seed004 > $OUT/r/step_seed004.log 2>&1
tail -n 9 $OUT/r/step_seed004.log
echo "at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf res.tgz r && rm -rf r
